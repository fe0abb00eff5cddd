"""Focus categories I-V from (lambda, k) (DOLCE Figure 1 and Section 4)."""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["CATEGORIES", "CATEGORY_LEGEND", "assign_categories", "category_codes", "category_thresholds", "wilson"]

CATEGORIES = ("I", "II", "III", "IV", "V")
#: One line per category (Figure 1; :func:`assign_categories`), printed under category tables.
CATEGORY_LEGEND = (
    "I    lambda = 0: answered without the context (closed-book)",
    "II   lambda <= lambda_p, k > k_p: a short span suffices and it recurs (redundant retrieval)",
    "III  lambda <= lambda_p, k <= k_p: a short span suffices, found in few places (retrieval)",
    "IV   lambda_p < lambda <= lambda_q: a longer stretch of the context is needed",
    "V    lambda > lambda_q: no partial observation suffices (holistic understanding)",
)


def category_thresholds(ladder) -> tuple[int, int]:
    """Thresholds (lambda_p, k_p) from a task's observation-length ladder (Section 4).

    ``ladder`` holds the task's exponential observation lengths C, excluding 0 and the full
    context C = L (zeros, if passed, are dropped; duplicates are merged). With the N sorted
    distinct lengths, p = max(1, floor(N / 3)) and lambda_p = k_p = the p-th one (1-indexed),
    i.e. the first tertile.
    """
    arr = np.asarray(ladder)
    if arr.ndim != 1:
        raise ValueError("ladder must be one-dimensional")
    if arr.size and (arr.dtype.kind not in "iuf" or np.any(arr != np.floor(arr))):
        raise ValueError("ladder must hold integer observation lengths")
    if np.any(arr < 0):
        raise ValueError("ladder lengths must be non-negative")
    lengths = np.unique(arr[arr > 0]).astype(np.int64)
    if lengths.size == 0:
        raise ValueError("ladder has no observation length C > 0; cannot set lambda_p, k_p")
    p = max(1, lengths.size // 3)
    value = int(lengths[p - 1])
    return value, value


def assign_categories(lam, k, lam_p, k_p, lam_q) -> np.ndarray:
    """Category label per problem (Figure 1), vectorized; all arguments broadcast.

    I: lambda = 0 (closed-book / zero-shot); V: lambda > lambda_q (no partial observation is
    long enough; lambda_q = the problem's largest partial C); IV: lambda_p < lambda <= lambda_q;
    II: lambda <= lambda_p and k > k_p; III: lambda <= lambda_p and k <= k_p. When a short
    problem has lambda_q < lambda_p, the rules for V and II/III overlap; V takes precedence
    (the evidence is longer than every partial observation of that problem).
    Returns an array of str ("I" .. "V").
    """
    return np.array(CATEGORIES, dtype="<U3")[category_codes(lam, k, lam_p, k_p, lam_q)]


def category_codes(lam, k, lam_p, k_p, lam_q) -> np.ndarray:
    """:func:`assign_categories` as indices into :data:`CATEGORIES` (0 = I .. 4 = V)."""
    lam, k, lam_p, k_p, lam_q = np.broadcast_arrays(*(np.asarray(a) for a in (lam, k, lam_p, k_p, lam_q)))
    conds = [lam == 0, lam > lam_q, lam > lam_p, k > k_p]
    return np.select(conds, [0, 4, 3, 1], default=2).astype(np.int64)


Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson(n: pl.Expr, total: pl.Expr, z: float = Z95) -> tuple[pl.Expr, pl.Expr]:
    """Wilson score interval for a binomial share ``n / total`` (Wilson 1927)."""
    p = n / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * (p * (1 - p) / total + z * z / (4 * total * total)).sqrt() / (1 + z * z / total)
    # the ends are exactly 0 at n = 0 and 1 at n = N (rounding would leave 1e-17 off)
    return (pl.when(n == 0).then(0.0).otherwise((centre - half).clip(lower_bound=0.0)),
            pl.when(n == total).then(1.0).otherwise((centre + half).clip(upper_bound=1.0)))
