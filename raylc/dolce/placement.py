r"""COW's likelihood for evidence that stays put: the spans of one document share its copies.

Eq. 3 draws every observation span's cover independently, with probability pi(lambda, k; L, C)
(Appendix A.1: the copies and the span placed at random). In a document the k copies of the
evidence are placed once, and every span of the problem sees the same ones: the span [s, s + C)
covers a copy starting at a iff s <= a <= s + C - lambda. Under Assumption 1's placement law
(the k non-overlapping copies uniform over their binom(L - k lambda + k, k) placements, the law
pi averages over) the likelihood of a problem's spans with C >= lambda is

    P(x | lambda, k) = binom(L - k lambda + k, k)^-1 sum_A prod_w g_w(cov_w(A)),

    g_w(1) = P_i(O) 1[x_w = 1] + P_i(N) P(x_w|N),
    g_w(0) = P_i(O) q(x_w) 1[x_w != 1] + P_i(N) P(x_w|N)   (q: the not-covered outcome),

over the placements A. It is computed exactly by a forward pass over the copy starts
a = 0 .. L - lambda whose state is (copies placed so far j <= k, distance d from the last copy
start, capped): a span is decided at the last start it contains, e = s + C - lambda, where it is
covered iff j >= 1 and d <= C - lambda (the nearest copy to its left starts inside it); a copy
may start at distance d + 1 >= lambda from the last. Cost per (problem, lambda): (L - lambda + 1)
x (k + 1) x (max C - lambda + 2) per value of P_i(O).

The fit uses it where it is affordable (:data:`BUDGET`), in the posterior only
(:func:`placement_marginals`): P_i(O) is integrated out on a Gauss-Legendre grid (uniform prior),
the task-level P(x|N) and q are the posterior EM's, and the terms below lambda are the
Dirichlet-multinomial of :mod:`raylc.dolce.uncertainty` on the problem's own counts.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

__all__ = ["BUDGET", "GRID", "log_sum_exp", "placement_loglik", "placement_logliks", "placement_work"]

#: Work of one problem's forward passes (sum over its lambdas of positions x (k + 1) x distance
#: states x grid points) above which the fit keeps Eq. 3 alone for it.
BUDGET = 3_000_000
#: Gauss-Legendre nodes of the integral over P_i(O).
GRID = 12


def log_sum_exp(a: np.ndarray, axis: int) -> np.ndarray:
    """log sum exp along ``axis`` (-inf where every term is -inf); numpy alone, without scipy's
    per-call overhead, for the forward pass's many small arrays."""
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(a - top), axis=axis)) + np.squeeze(top, axis=axis)


def _log_placements(L: int, lam: int, k: np.ndarray) -> np.ndarray:
    """log binom(L - k lambda + k, k): Assumption 1's placements (-inf where none)."""
    n = L - k * lam + k
    with np.errstate(invalid="ignore"):
        out = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    return np.where((k >= 1) & (n >= k), out, -np.inf)


def placement_work(L, lam, k_max, c_max, grid: int = GRID):
    """The work of :func:`placement_loglik` for one problem and lambda (for :data:`BUDGET`);
    arrays broadcast."""
    return (L - lam + 1) * (k_max + 1) * (np.maximum(c_max - lam + 1, lam - 1) + 1) * grid


def placement_loglik(L: int, lam: int, k_max: int, start: np.ndarray, C: np.ndarray, lg1: np.ndarray,
                     lg0: np.ndarray) -> np.ndarray:
    """log P(x_w, C_w >= lambda | lambda, k) for k = 1 .. ``k_max`` (module docstring), one row per
    grid point of P_i(O): ``lg1``, ``lg0`` (spans, G) are log g_w(1), log g_w(0) per span and grid
    point; ``start``, ``C`` the spans' starts and lengths (only those with C >= lambda are read).
    Returns (G, k_max); -inf where k lambda > L."""
    return placement_logliks([(L, lam, k_max, start, C, lg1, lg0)])[0]


def placement_logliks(items: list) -> list[np.ndarray]:
    """:func:`placement_loglik` of many (L, lambda, k_max, start, C, lg1, lg0) at once: the
    forward passes of the items with the same number of copy starts L - lambda + 1 run together."""
    out: list = [None] * len(items)
    by_m: dict[int, list[int]] = {}
    for n, item in enumerate(items):
        by_m.setdefault(item[0] - item[1] + 1, []).append(n)
    for M, members in by_m.items():
        for n, res in zip(members, _forward(M, [items[n] for n in members])):
            out[n] = res
    return out


def _forward(M: int, items: list) -> list[np.ndarray]:
    """The forward passes of items sharing M = L - lambda + 1 copy starts (module docstring)."""
    B, G = len(items), items[0][5].shape[1]
    K = max(it[2] for it in items)
    taus, cap = [], 1
    for L, lam, _, _, C, _, _ in items:
        part = (np.asarray(C) >= lam) & (np.asarray(C) < L)
        taus.append(part)
        d_max = int((np.asarray(C)[part] - lam).max(initial=-1))
        cap = max(cap, d_max + 1, lam - 1)
    base = np.zeros((B, M, G))
    gain = np.zeros((B, M, cap + 1, G))
    const = np.zeros((B, G))
    lam_b = np.zeros(B, dtype=np.int64)
    for b, ((L, lam, _, start, C, lg1, lg0), part) in enumerate(zip(items, taus)):
        C, start = np.asarray(C, dtype=np.int64), np.asarray(start, dtype=np.int64)
        lam_b[b] = lam
        const[b] = lg1[C >= L].sum(axis=0)  # a span of the whole context covers every copy
        tau = C[part] - lam  # covered iff the last copy start is within tau of the span's end
        end = start[part] + tau
        np.add.at(base[b], end, lg0[part])
        np.add.at(gain[b], (end, tau), lg1[part] - lg0[part])
    gain = np.flip(np.cumsum(np.flip(gain, axis=2), axis=2), axis=2)  # covered iff d <= tau
    d = np.arange(cap + 1)
    may_start = (d[None, :] + 1 >= lam_b[:, None]) | (d[None, :] == cap)  # (B, cap + 1)
    F = np.full((B, G, K + 1, cap + 1), -np.inf)
    F[:, :, 0, cap] = 0.0  # no copy yet: "far" from any
    for t in range(M):
        moved = np.full_like(F, -np.inf)
        moved[..., 1:] = F[..., :-1]
        moved[..., cap] = np.logaddexp(F[..., cap - 1], F[..., cap])
        placed = log_sum_exp(np.where(may_start[:, None, None, :], F, -np.inf), axis=3)  # (B, G, K + 1)
        moved[:, :, 1:, 0] = placed[:, :, :-1]
        moved[:, :, 0, :] += base[:, t, :, None]
        moved[:, :, 1:, :] += (base[:, t, :, None] + np.swapaxes(gain[:, t], 1, 2))[:, :, None, :]
        F = moved
    total = log_sum_exp(F[:, :, 1:, :], axis=3) + const[:, :, None]  # (B, G, K)
    return [total[b, :, : it[2]] - _log_placements(it[0], it[1], np.arange(1, it[2] + 1))[None, :]
            for b, it in enumerate(items)]
