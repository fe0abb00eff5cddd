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
x (k + 1) x max(max C - lambda + 2, lambda) per value of P_i(O) (:func:`placement_work`).

Past that budget the same likelihood is summed by a chain over the copies
(:func:`few_copies_loglik`), whose work does not grow with the spans' lengths. A span covers
a copy iff its start window [s, s + C - lambda] holds the copy's start; attribute each covered
span to the last copy in its window. For consecutive copies a < b at distance D >= lambda, the
spans attributed to a are those whose window holds a and ends before b: R(a, b) = S(a) - O(a, b),
S(a) the spans whose window holds a, O(a, b) those holding both, which needs C - lambda >= D and
b - (C - lambda) <= s <= a. Within one band of D between consecutive values of C - lambda, O
splits into a part of a and a part of b (prefix sums over starts per length), so each step of
the chain (one copy more) sums over a in a sliding window per band: in exp space by doubling
where the band's terms (per value of P_i(O)) spread by at most :data:`EXP_RANGE` nats, else in
log space (van Herk / Gil-Werman). Cost per (problem, lambda): (L - lambda + 1) x k x (bands) per value of P_i(O); the
chain places at most :data:`FEW_COPIES` copies, and pairs with more are left out there.

The fit uses them where affordable (:data:`BUDGET`, :data:`FEW_BUDGET`), in the posterior only
(:meth:`raylc.dolce.cow.COWFit.posterior_pairs`): P_i(O) is integrated out on a Gauss-Legendre
grid (uniform prior), the task-level P(1|N) on a grid per span class, P(0|N) : P(IDK|N) and q
the posterior EM's, and the terms below
lambda are the Dirichlet-multinomial of :mod:`raylc.dolce.uncertainty` on the problem's own
counts.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

__all__ = ["BUDGET", "FEW_BUDGET", "FEW_COPIES", "GRID", "few_copies_loglik", "few_copies_work", "log_sum_exp",
           "placement_loglik", "placement_logliks", "placement_work"]

#: Work of one problem's forward passes (sum over its lambdas of positions x (k + 1) x distance
#: states x grid points) above which the fit keeps Eq. 3 alone for it.
BUDGET = 3_000_000
#: Work of one problem's chains over the copies (:func:`few_copies_work`) above which it keeps
#: Eq. 3 alone.
FEW_BUDGET = 5_000_000
#: The most copies the chain places (past the forward pass's budget); pairs with more are left out.
FEW_COPIES = 10
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
    arrays broadcast; in float64, since the product of a long document's L and k overflows int64."""
    M = np.asarray(L, dtype=np.float64) - lam + 1
    return M * (k_max + 1) * (np.maximum(c_max - lam + 1, lam - 1) + 1) * grid


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


def few_copies_work(L, lam, k_max, n_lengths, grid: int = GRID):
    """The work of :func:`few_copies_loglik` for one problem and lambda with ``n_lengths``
    distinct partial span lengths (for :data:`FEW_BUDGET`); arrays broadcast; in float64."""
    return (np.asarray(L, dtype=np.float64) - lam + 1) * np.minimum(k_max, FEW_COPIES) * (n_lengths + 2) * grid


def few_copies_loglik(L: int, lam: int, k_max: int, start: np.ndarray, C: np.ndarray, lg1: np.ndarray,
                      lg0: np.ndarray) -> np.ndarray:
    """:func:`placement_loglik` (G, k_max) by the chain over the copies' starts (module
    docstring), in work linear in k and L whatever the spans' lengths."""
    start, C = np.asarray(start, dtype=np.int64), np.asarray(C, dtype=np.int64)
    G, M = lg1.shape[1], L - lam + 1
    out = np.full((G, k_max), -np.inf)
    part = (C >= lam) & (C < L)
    delta = lg1[part] - lg0[part]
    base = lg0[part].sum(axis=0) + lg1[C >= L].sum(axis=0)  # a span of the whole context covers every copy
    T, j = np.unique(C[part] - lam, return_inverse=True)  # tau = C - lambda: covers a iff s <= a <= s + tau
    n = T.size
    pre = np.zeros((n, M + 1, G))
    np.add.at(pre, (j.reshape(-1), start[part] + 1), delta)
    pre = np.cumsum(pre, axis=1)  # pre[j, a]: delta summed over the spans of tau_j starting before a
    a = np.arange(M)
    low = pre[np.arange(n)[:, None], np.maximum(a[None, :] - T[:, None], 0)]  # (n, M, G): before a - tau_j
    S = (pre[:, 1:] - low).sum(axis=0)  # (M, G): the spans covering a copy at a
    # consecutive copies a < b at D = b - a in band t (T[t-1] < D <= T[t]): the spans of tau_j >= D
    # (j >= t) with b - tau_j <= s <= a hold both; R(a, b) = S(a) - left[t](a) + right[t](b)
    zero = np.zeros((1, M, G))
    left = np.concatenate([np.flip(np.cumsum(np.flip(pre[:, 1:], 0), 0), 0), zero])  # sum_{j >= t} pre[j, a + 1]
    right = np.concatenate([np.flip(np.cumsum(np.flip(low, 0), 0), 0), zero])  # sum_{j >= t} pre[j, b - tau_j]
    edges = np.r_[-1, T, M - 1]
    bands = [(t, lo, hi) for t in range(n + 1)
             for lo, hi in [(max(int(edges[t]) + 1, lam), min(int(edges[t + 1]), M - 1))] if lo <= hi]
    last = np.zeros((M, G))  # log sum over the placements of j copies whose last starts at a
    for k in range(1, k_max + 1):
        if k > 1:
            if not bands:
                break
            last = _chain_step(last + S, left, right, bands)
        out[:, k - 1] = base + log_sum_exp(last + S, axis=0) - _log_placements(L, lam, np.array([k]))[0]
    return out


#: The widest spread (nats) of one band's terms that :func:`_chain_step` sums in exp space.
EXP_RANGE = 700.0


def _chain_step(v: np.ndarray, left: np.ndarray, right: np.ndarray, bands: list) -> np.ndarray:
    """One more copy: out[b] = log sum_t exp(right[t](b)) sum_{a = b - hi_t .. b - lo_t}
    exp(v(a) - left[t](a)) over the ``bands`` (t, lo_t, hi_t); ``v`` (M, G). Per band and column,
    terms that spread by at most :data:`EXP_RANGE` nats are summed in exp space below their
    largest (:func:`_window_sum`), wider ones in log space (:func:`_window_lse`)."""
    M = v.shape[0]
    parts = []  # per band: sums in exp space (1 where exact) and their log scale
    for t, lo, hi in bands:
        u = v[:M - lo] - left[t][:M - lo]
        top = u.max(axis=0)
        wide = top - np.where(np.isfinite(u), u, np.inf).min(axis=0) > EXP_RANGE
        top = np.where(np.isfinite(top), top, 0.0)
        e = np.zeros_like(v)
        np.exp(u - top, out=e[:M - lo])
        s = _window_sum(e, lo, hi)  # every finite term is >= exp(-EXP_RANGE): s > 0 iff a term is finite
        scale = np.where(s > 0, right[t] + top, -np.inf)
        if wide.any():
            s[:, wide] = 1.0
            scale[:, wide] = right[t][:, wide] + _window_lse(v[:, wide] - left[t][:, wide], lo, hi)
        parts.append((s, scale))
    ref = np.max([scale for _, scale in parts], axis=0)
    ref = np.where(np.isfinite(ref), ref, 0.0)
    total = sum(s * np.exp(scale - ref) for s, scale in parts)
    with np.errstate(divide="ignore"):
        return np.log(total) + ref


def _window_sum(e: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """out[y] = sum e[y - hi .. y - lo] (indices below 0 left out) for y = 0 .. M - 1, ``e`` (M, G)
    >= 0: sums of 2^j neighbours by doubling, added per bit of the window's width (sums of
    nonnegative terms only: nothing cancels)."""
    M, G = e.shape
    w, n = hi - lo + 1, M - lo
    out = np.zeros((M, G))
    if n <= 0:
        return out
    d = np.zeros((w - 1 + M, G))
    d[w - 1:] = e  # the window ending at x = y - lo is d[x .. x + w - 1]
    acc, off, width, rem = out[lo:], 0, 1, w
    while True:
        if rem & 1:
            acc += d[off:off + n]
            off += width
        rem >>= 1
        if not rem:
            return out
        d = d[:-width] + d[width:]  # d[x] now sums 2 width terms from x
        width *= 2


def _window_lse(u: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """out[y] = log sum exp u[y - hi .. y - lo] (indices below 0 left out) for y = 0 .. M - 1,
    ``u`` (M, G): van Herk / Gil-Werman runs forward and back within blocks of the window's
    width, summed in exp space below each block's largest term (in log space where a block
    spans more than 700 nats, which exp would lose)."""
    M, G = u.shape
    w, n = hi - lo + 1, M - lo
    out = np.full((M, G), -np.inf)
    if n <= 0:
        return out
    nb = -(-(n + 2 * w - 1) // w)
    blocks = np.full((nb * w, G), -np.inf)
    blocks[w - 1:w - 1 + n] = u[:n]  # the window ending at x = y - lo is blocks[x .. x + w - 1]
    blocks = blocks.reshape(nb, w, G)
    top = blocks.max(axis=1)
    live = np.isfinite(top)
    top[~live] = 0.0
    x = np.arange(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.any(top - np.where(np.isfinite(blocks), blocks, np.inf).min(axis=1) > 700.0):
            run = np.logaddexp.accumulate(blocks, axis=1).reshape(-1, G)
            back = np.logaddexp.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].reshape(-1, G)
        else:
            e = np.exp(blocks - top[:, None, :])
            run = (np.log(np.cumsum(e, axis=1)) + top[:, None, :]).reshape(-1, G)
            back = (np.log(np.cumsum(e[:, ::-1], axis=1)[:, ::-1]) + top[:, None, :]).reshape(-1, G)
        out[lo:] = np.where((x % w == 0)[:, None], back[x], np.logaddexp(back[x], run[x + w - 1]))
    return out
