"""Cover probability pi(lambda, k; L, C) of the COW scenario (DOLCE Assumption 1, Appendix A.1)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from raylc.dolce.numeric import as_int

__all__ = ["cover_prob_partial", "cow_cover_prob"]

#: Tabulate log n! when the table is shorter than this many times the number of lookups.
_TABLE_FACTOR = 16


def cow_cover_prob(lam, k, L, C):
    r"""pi(lambda, k; L, C): probability that an observation span covers a ground-truth span.

    Assumption 1 (Section 3.2): k non-overlapping ground-truth spans of lambda units each are
    placed uniformly among the binom(L - k lambda + k, k) placements in L units; the
    observation span of C units starts uniformly at one of the L - C + 1 positions. pi is the
    probability that the observation completely covers at least one ground-truth span.

    Evaluated with the closed form of Appendix A.1,

        pi = 1 - [2 binom(w + lambda, k + 1)
                  + (k - 1)/(k + 1) (2k lambda + 2 lambda + w - 2k - k u - 1) binom(w + u, k)]
                 / [binom(L - k lambda + k, k) (L - C + 1)],
        w = L - C - k lambda + k,   u = min(C, 2 lambda - 2),

    where binom(n, r) = 0 unless 0 <= r <= n (binom(w + C, k) of the paper's first display
    equals binom(L - k lambda + k, k)). Checked against brute-force enumeration in exact
    rational arithmetic for every L <= 12 and every valid (lambda, k, C): the final formula is
    exact. The derivation has typos in intermediate steps only (Scenario 1's binom(w, k) w
    should read (w + 1) binom(w, k) = (k + 1) binom(w + 1, k + 1); Scenario 2's hockey-stick
    sum starts at w + 1, not w), so no correction is needed. The binomials overflow, so each is
    divided by binom(L - k lambda + k, k) as exp of a log-binomial difference (log-factorials
    from scipy ``gammaln``, tabulated when L is small); the bracket may mix signs, so the two
    terms are combined as signed ratios and pi is clipped to [0, 1] (a non-positive numerator,
    zero up to rounding: every window covers a copy, gives pi = 1). At L ~ 1e6 the absolute
    error is ~1e-9 (gammaln of arguments ~1e6); for L <= 12 it is below 1e-14.

    Conventions: pi = 1 when lambda = 0 (empty evidence; any k >= 0); otherwise pi = 0 when
    k < 1, k lambda > L or C < lambda, and pi = 1 when C >= L (with a valid lambda, k).
    Note pi is non-decreasing in C but not in k in general: L = 12, lambda = 6, C = 8 gives
    pi = 3/7 for k = 1 and 2/5 for k = 2 (packing forces the copies to the ends).

    Parameters broadcast against each other (non-negative integers); returns float64, a
    scalar when all inputs are scalars.
    """
    args = [as_int(a, n, non_negative=True) for a, n in zip((lam, k, L, C), ("lam", "k", "L", "C"))]
    scalar = all(a.ndim == 0 for a in args)
    lam_i, k_i, L_i, C_i = np.broadcast_arrays(*args)
    out = np.zeros(lam_i.shape, dtype=np.float64)

    out[lam_i == 0] = 1.0
    valid = (lam_i >= 1) & (k_i >= 1) & (k_i * lam_i <= L_i) & (C_i >= lam_i)
    out[valid & (C_i >= L_i)] = 1.0
    gen = valid & (C_i < L_i)
    if np.any(gen):
        out[gen] = cover_prob_partial(lam_i[gen], k_i[gen], L_i[gen], C_i[gen])
    return out[()] if scalar else out


def _log_factorials(shift: int, n_max: int, n_lookups: int):
    """Lookups of log n! = gammaln(n + 1) for int64 arguments i = n + ``shift`` (n <= n_max):
    ``lfn`` gives log max(n, 0)!, ``lfr`` gives log n! and +inf for n < 0, so that
    lfn(n) - log r! - lfr(n - r) = log binom(n, r), -inf unless r <= n (r >= 0). From one table
    when it is small relative to the number of lookups (the same float values either way)."""
    size = n_max + shift + 1
    if size < _TABLE_FACTOR * n_lookups:
        n = np.arange(size, dtype=np.float64) - shift
        table_n = gammaln(np.maximum(n, 0.0) + 1.0)
        table_r = np.where(n >= 0, table_n, np.inf)
        return table_n.take, table_r.take

    def lfn(i):
        return gammaln(np.maximum(i - shift, 0) + 1.0)

    def lfr(i):
        return np.where(i >= shift, lfn(i), np.inf)

    return lfn, lfr


def cover_prob_partial(lam: np.ndarray, k: np.ndarray, L: np.ndarray, C: np.ndarray, reps=None) -> np.ndarray:
    """pi(lambda, k; L, C) of :func:`cow_cover_prob` in the general case 1 <= lambda <= C < L,
    k >= 1, k lambda <= L (not checked), by the Appendix A.1 closed form
    pi = 1 - [2 T1 + coef T2] / [D (L - C + 1)], with T1 / D and T2 / D ratios of binomials
    taken as exp of differences of log-binomials, clipped to [0, 1].

    int64 arrays: ``lam``, ``k``, ``L`` per group, ``C`` per entry, each group's entries
    consecutive (``reps[g]`` entries for group g; one per group when ``reps`` is None). The
    values do not depend on the grouping, which only saves recomputing per-group terms."""
    if C.size == 0:
        return np.zeros(0)
    # binomial arguments are >= -2 L - 1 and <= L + 1: shift them to non-negative table indices
    L_max = int(L.max())
    s = 2 * L_max + 2
    lfn, lfr = _log_factorials(s, L_max + 1, 4 * C.size)
    # per group: binom(L - k lambda + k, k) of the denominator D, log k!, log (k + 1)!, ...
    n3 = L - k * lam + k
    lf_k, lf_k1 = lfr(k + s), lfr(k + 1 + s)
    lb3 = lfr(n3 + s) - lf_k - lfr(n3 - k + s)
    k_f = k.astype(np.float64)
    ratio = (k_f - 1.0) / (k_f + 1.0)
    group = {
        "lam": lam, "k": k, "k1": k + 1, "cap": 2 * lam - 2, "n3s": n3 + s, "h1": lf_k1 + lb3, "h2": lf_k + lb3,
        "ratio": ratio, "g0s": 2 * k * lam + 2 * lam - 2 * k - 1 - s, "L1": L + 1,
    }
    if reps is not None:
        group = {name: np.repeat(a, reps) for name, a in group.items()}
    g = group
    ws = g["n3s"] - C  # w + s, w = L - C - k lambda + k
    u = np.minimum(C, g["cap"])
    n1s, n2s = ws + g["lam"], ws + u
    # log binom(w + lambda, k + 1) - log D and log binom(w + u, k) - log D
    d1 = lfn(n1s) - lfr(n1s - g["k1"]) - g["h1"]
    d2 = lfn(n2s) - lfr(n2s - g["k"]) - g["h2"]
    coef = g["ratio"] * (g["g0s"] + ws - g["k"] * u).astype(np.float64)
    fail = 2.0 * np.exp(d1)
    fail += coef * np.exp(d2)
    fail /= (g["L1"] - C).astype(np.float64)
    # failures <= 0 (zero up to rounding: every window covers a copy) gives pi = 1
    pi = np.subtract(1.0, fail, out=fail)
    return np.clip(pi, 0.0, 1.0, out=pi)
