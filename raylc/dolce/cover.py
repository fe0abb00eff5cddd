"""Cover probability pi(lambda, k; L, C) of the COW scenario (DOLCE Assumption 1, Appendix A.1)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, logsumexp

__all__ = ["cow_cover_prob", "log_binom"]


def _as_int_array(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind in "iu":
        out = a.astype(np.int64)
    elif a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.floor(a)):
            raise ValueError(f"{name} must hold integers, got non-integral values")
        out = a.astype(np.int64)
    else:
        raise ValueError(f"{name} must be an integer or integer array, got dtype {a.dtype}")
    if np.any(out < 0):
        raise ValueError(f"{name} must be non-negative")
    return out


def log_binom(n, r) -> np.ndarray:
    """log binom(n, r) via gammaln, with binom(n, r) = 0 (log = -inf) unless 0 <= r <= n."""
    n = np.asarray(n, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    ok = (r >= 0) & (n >= r)
    nn = np.where(ok, n, 0.0)
    rr = np.where(ok, r, 0.0)
    val = gammaln(nn + 1.0) - gammaln(rr + 1.0) - gammaln(nn - rr + 1.0)
    return np.where(ok, val, -np.inf)


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
    sum starts at w + 1, not w), so no correction is needed. The bracket may mix signs, so
    the numerator is a signed log-sum-exp of log-binomials (scipy ``gammaln``) and
    pi = -expm1(log num - log den), clipped to [0, 1]; a non-positive numerator (zero up to
    rounding: every window covers a copy) gives pi = 1. At L ~ 1e6 the absolute error is
    ~1e-9 (gammaln of arguments ~1e6); for L <= 12 it is below 1e-13.

    Conventions: pi = 1 when lambda = 0 (empty evidence; any k >= 0); otherwise pi = 0 when
    k < 1, k lambda > L or C < lambda, and pi = 1 when C >= L (with a valid lambda, k).
    Note pi is non-decreasing in C but not in k in general: L = 12, lambda = 6, C = 8 gives
    pi = 3/7 for k = 1 and 2/5 for k = 2 (packing forces the copies to the ends).

    Parameters broadcast against each other (non-negative integers); returns float64, a
    scalar when all inputs are scalars.
    """
    args = [_as_int_array(a, n) for a, n in zip((lam, k, L, C), ("lam", "k", "L", "C"))]
    scalar = all(a.ndim == 0 for a in args)
    lam_i, k_i, L_i, C_i = np.broadcast_arrays(*args)
    out = np.zeros(lam_i.shape, dtype=np.float64)

    out[lam_i == 0] = 1.0
    valid = (lam_i >= 1) & (k_i >= 1) & (k_i * lam_i <= L_i) & (C_i >= lam_i)
    out[valid & (C_i >= L_i)] = 1.0
    gen = valid & (C_i < L_i)
    if np.any(gen):
        lam_f, k_f, L_f, C_f = (a[gen].astype(np.float64) for a in (lam_i, k_i, L_i, C_i))
        w = L_f - C_f - k_f * lam_f + k_f
        u = np.minimum(C_f, 2.0 * lam_f - 2.0)
        coef = (k_f - 1.0) / (k_f + 1.0) * (2.0 * k_f * lam_f + 2.0 * lam_f + w - 2.0 * k_f - k_f * u - 1.0)
        with np.errstate(divide="ignore"):
            log_terms = np.stack(
                [np.log(2.0) + log_binom(w + lam_f, k_f + 1.0), np.log(np.abs(coef)) + log_binom(w + u, k_f)]
            )
        signs = np.stack([np.ones_like(coef), np.sign(coef)])
        with np.errstate(divide="ignore", invalid="ignore"):
            log_num, sign = logsumexp(log_terms, b=signs, axis=0, return_sign=True)
        log_den = log_binom(L_f - k_f * lam_f + k_f, k_f) + np.log(L_f - C_f + 1.0)
        with np.errstate(invalid="ignore", over="ignore"):
            # sign <= 0: the failure count is 0 (up to rounding), i.e. every window covers a copy
            pi = np.where(sign > 0, -np.expm1(log_num - log_den), 1.0)
        out[gen] = pi
    np.clip(out, 0.0, 1.0, out=out)
    return out[()] if scalar else out
