r"""DOLCE partial-point-in-grading (PIG) scenario (Sections 3.3-3.4, Appendix B, Algorithm 2).

Notation follows the paper: a problem's context has L units, an observation span has C
consecutive units, lambda aspect groups each have k unit-length members (Assumption 2), and
an observation is awarded the partial point s = m / lambda when it covers exactly m groups.

* :func:`pig_cover_pmf`   - the discrete cover pmf rho~ of Appendix B.1 (corrected closed form);
* :func:`pig_density`     - the continuous rho of Appendix B.2 (Eq. 6);
* :class:`PIGFit`         - EM-based MLE of (lambda_i, k_i) for one task (Algorithm 2);
* :func:`fit_pig_task`    - the same from an observation table (one polars group_by).
"""

from __future__ import annotations

from typing import get_args

import numpy as np
import polars as pl
from scipy.special import expit, logsumexp

from raylc.dolce.cells import CellFit, CellStats, cell_statistics, first_near_max, segment_positions
from raylc.dolce.numeric import as_int, lgamma_diff, log_binom
from raylc.dolce.options import FitOptions
from raylc.dolce.scenario import N_BINS, bucketize_scores
from raylc.dolce.uncertainty import log_pair_prior

__all__ = [
    "PIG_HIT_RATES",
    "PIG_LIKELIHOODS",
    "PIG_OUTCOMES",
    "PIGFit",
    "fit_pig_task",
    "pig_cover_logpmf",
    "pig_cover_pmf",
    "pig_bin_density",
    "pig_density",
    "pig_pmf_mode",
]

#: Sub-unit outcome order y in {1, 0, IDK} used for sufficient statistics and ``PIGFit.noise_``.
PIG_OUTCOMES = ("1", "0", "IDK")

#: The signed log-sum-exp is accepted when sum|terms| / |sum| <= this (at most ~3 digits lost).
_MAX_CANCELLATION = 1e3
#: ... and when its estimated relative rounding error stays below this.
_LSE_RTOL = 1e-10
#: Numerical-tie tolerance of the pmf: values within a relative _MODE_TIE_RTOL of the maximum
#: tie (smallest m wins). Log-likelihood ties: :data:`raylc.dolce.cells.LL_TIE_RTOL`.
_MODE_TIE_RTOL = 1e-9
#: PIGFit options: ``likelihood`` ("binned" first, the default; "paper" is Algorithm 2's) and
#: ``hit_rate`` ("mode" first), the choices of FitOptions.pig_likelihood / pig_hit_rate.
PIG_LIKELIHOODS = get_args(FitOptions.model_fields["pig_likelihood"].annotation)
PIG_HIT_RATES = get_args(FitOptions.model_fields["pig_hit_rate"].annotation)
_CHUNK = 1 << 21  # max elements of the (entries x terms) work arrays


# =============================================================================== helpers
def _chunks(order: np.ndarray, widths_sorted: np.ndarray):
    """Split ``order`` (sorted by width) into chunks with rows * max width <= _CHUNK."""
    pos, n = 0, order.size
    while pos < n:
        w = np.maximum(widths_sorted[pos:], 1)
        cost = np.arange(1, w.size + 1) * w  # non-decreasing
        take = max(1, int(np.searchsorted(cost, _CHUNK, side="right")))
        yield order[pos : pos + take]
        pos += take


def _row_terms_lse(log_terms_fn, n_terms: np.ndarray, signed: bool):
    """Row-wise (signed) log-sum-exp of ``log_terms_fn(rows, i)`` over i < n_terms[row].

    Rows are processed in chunks sorted by term count so the padded work arrays stay small.
    Returns (log|sum|, sign, log sum|terms|).
    """
    n = n_terms.size
    out = np.full(n, -np.inf)
    sgn = np.zeros(n)
    out_abs = np.full(n, -np.inf)
    order = np.argsort(n_terms, kind="stable")
    for rows in _chunks(order, n_terms[order]):
        width = int(n_terms[rows].max())
        i = np.arange(width, dtype=np.float64)[None, :]
        mask = i < n_terms[rows][:, None]
        with np.errstate(invalid="ignore"):
            lt = np.where(mask, log_terms_fn(rows, i), -np.inf)
        if signed:
            b = np.where(mask, 1.0 - 2.0 * (i % 2), 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                v, s = logsumexp(lt, b=b, axis=1, return_sign=True)
        else:
            with np.errstate(divide="ignore"):
                v = logsumexp(lt, axis=1)
            s = np.where(np.isfinite(v), 1.0, 0.0)
        with np.errstate(divide="ignore"):
            out_abs[rows] = logsumexp(lt, axis=1)
        out[rows] = v
        sgn[rows] = s
    return out, sgn, out_abs


# ---------------------------------------------------------------- Cauchy-integral coefficients
def _clog1p(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(1 + x + iy), accurate for small |x + iy| (real part via log1p)."""
    return 0.5 * np.log1p(x * (2.0 + x) + y * y) + 1j * np.arctan2(y, 1.0 + x)


def _scale(c: np.ndarray, z: np.ndarray) -> np.ndarray:
    """c * z for real c and complex z, with infinities kept out of the other part."""
    return c * z.real + 1j * (c * z.imag)


def _log_g(A: np.ndarray) -> np.ndarray:
    """log(e^A - 1) for complex A = k log(1 + z) (any branch: only exp(m * .) is used)."""
    big = A.real > 1.0
    Ab = np.where(big, A, 0.0)
    As = np.where(big, 1.0, A)
    e = np.exp(-Ab)
    out_big = Ab + _clog1p(-e.real, -e.imag)
    half = np.sin(As.imag / 2.0)
    w = np.expm1(As.real) * np.cos(As.imag) - 2.0 * half * half + 1j * np.exp(As.real) * np.sin(As.imag)
    with np.errstate(divide="ignore"):
        out_small = np.log(w)
    return np.where(big, out_big, out_small)


def _log_g_real(a: np.ndarray) -> np.ndarray:
    """log(e^a - 1) for real a > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 1.0, a + np.log1p(-np.exp(-np.where(a > 1.0, a, 1.0))),
                        np.log(np.expm1(np.minimum(a, 1.0))))


def _log_coeff_fourier(n0, k, m, C, n_points=None) -> np.ndarray:
    r"""log [x^C] (1 + x)^{n0} ((1 + x)^k - 1)^m by the discrete Cauchy integral.

    The generating function F has non-negative coefficients and degree n0 + m k; on the circle
    |x| = r through the saddle point (r F'(r) / F(r) = C) the N-point trapezoid rule returns
    sum_j a_{C + jN} r^{jN} / r^0 (exactly a_C when N > deg F); the summands are bounded by
    F(r) r^{-C} without cancellation, so the relative error is ~eps * sqrt(var) instead of the
    inclusion-exclusion's eps * sum|terms| / a_C. N = min(deg + 1, 40 sigma + 64) (sigma^2 the
    variance of the r-tilted coefficient distribution, which is log-concave, so the aliased
    coefficients a_{C +- N} are ~e^{-40} smaller). Requires m >= 1, k >= 1, m < C < deg.
    """
    n0, k, m, C = (np.asarray(a, dtype=np.float64) for a in (n0, k, m, C))
    deg = n0 + m * k
    lo = np.full(C.shape, -80.0)
    hi = np.full(C.shape, 80.0)

    def mean_count(u):
        s = expit(u)
        q1 = -np.expm1(-k * np.logaddexp(0.0, u))  # 1 - (1 + r)^-k
        return n0 * s + m * k * s / q1

    for _ in range(90):  # bisection on u = log r; mean_count is increasing in u
        u = 0.5 * (lo + hi)
        below = mean_count(u) < C
        lo = np.where(below, u, lo)
        hi = np.where(below, hi, u)
    u = 0.5 * (lo + hi)
    s = expit(u)
    a = k * np.logaddexp(0.0, u)
    q1 = -np.expm1(-a)
    var = n0 * s * (1.0 - s) + m * (k * s * (1.0 - s) / q1 - (k * s) ** 2 * (1.0 - q1) / q1**2)
    sigma = np.sqrt(np.maximum(var, 0.0))
    if n_points is None:
        N = np.minimum(deg + 1.0, np.ceil(40.0 * sigma + 64.0))
    else:
        N = np.broadcast_to(np.asarray(n_points, dtype=np.float64), C.shape)
    phi0 = n0 * np.logaddexp(0.0, u) + m * _log_g_real(a)
    out = np.empty(C.shape)
    # bucket by the next power of two of N (any N' >= N is at least as accurate)
    bucket = np.ceil(np.log2(np.maximum(N, 2.0))).astype(np.int64)
    r = np.exp(u)
    Ci = C.astype(np.int64)
    for b in np.unique(bucket):
        idx = np.flatnonzero(bucket == b)
        Nb = 1 << int(b)
        j = np.arange(Nb // 2 + 1)
        w = np.where((j == 0) | (j == Nb // 2), 1.0, 2.0)
        step = max(1, _CHUNK // (Nb // 2 + 1))
        for start in range(0, idx.size, step):
            ii = idx[start : start + step]
            theta = 2.0 * np.pi * j[None, :] / Nb
            x = r[ii, None] * np.cos(theta)
            y = r[ii, None] * np.sin(theta)
            with np.errstate(divide="ignore", invalid="ignore"):
                lz = _clog1p(x, y)  # -inf + i pi at x = -1 (r = 1, theta = pi): F(-1) = 0 if n0 > 0
                # real * complex scaled part by part: numpy's complex product turns 3 * (-inf + i pi)
                # into -inf + i nan (0 * inf), which poisoned the point theta = pi when r = 1
                phi = np.where(n0[ii, None] > 0, _scale(n0[ii, None], lz), 0.0) + _scale(
                    m[ii, None], _log_g(_scale(k[ii, None], lz)))
            phase = 2.0 * np.pi * ((Ci[ii, None] * j[None, :]) % Nb) / Nb  # C theta mod 2 pi, exact
            with np.errstate(invalid="ignore"):
                z = np.exp(phi.real - phi0[ii, None]) * np.cos(phi.imag - phase)
            z = np.where(np.isnan(z) & np.isneginf(phi.real), 0.0, z)
            mean = (z * w[None, :]).sum(axis=1) / Nb
            with np.errstate(divide="ignore", invalid="ignore"):
                out[ii] = phi0[ii] - C[ii] * u[ii] + np.log(mean)
    return out


# =============================================================================== rho~ (B.1)
def _log_pmf_flat(m, lam, k, L, C, method: str) -> np.ndarray:
    """log rho~ on flat int64 arrays (see :func:`pig_cover_pmf`)."""
    out = np.full(m.shape, -np.inf)
    valid = (k >= 1) & (lam >= 0) & (L >= 0) & (C >= 0) & (C <= L) & (k * lam <= L)
    out[valid & (lam == 0) & (m == 0)] = 0.0
    kk = np.where(valid, k, 1)
    # support: m <= min(lam, C) (one window unit per covered group) and the lam - m uncovered
    # groups must fit outside the window: (lam - m) k <= L - C
    lo = np.maximum(0, lam - (L - C) // kk)
    sup = valid & (lam > 0) & (m >= lo) & (m <= np.minimum(lam, C))
    if not sup.any():
        return out
    idx = np.flatnonzero(sup)
    mm, lm, kv, Lv, Cv = (a[idx] for a in (m, lam, k, L, C))
    n0 = Lv - kv * lm  # units not holding any member
    deg = n0 + mm * kv  # degree of (1 + x)^n0 ((1 + x)^k - 1)^m
    logS = np.full(idx.size, np.nan)  # log S(m), S = sum_i (-1)^i binom(m, i) binom(n0 + (m - i) k, C)

    if method == "lse":
        todo = np.ones(idx.size, dtype=bool)
    else:
        # exact positive closed forms
        e0 = mm == 0
        logS[e0] = log_binom(n0[e0], Cv[e0])
        e1 = ~e0 & (kv == 1)  # [x^C] (1+x)^n0 x^m
        logS[e1] = log_binom(n0[e1], Cv[e1] - mm[e1])
        rest = ~(e0 | e1)
        eC = rest & (Cv == mm)  # one member of each covered group: k^m
        logS[eC] = mm[eC] * np.log(kv[eC].astype(np.float64))
        eD = rest & ~eC & (Cv == deg)  # leading coefficient
        logS[eD] = 0.0
        rest &= ~(eC | eD)
        e2 = rest & (kv == 2)  # (2x + x^2)^m: sum_t binom(m, t) 2^(m - t) binom(n0, C - m - t)
        if e2.any():
            i2 = np.flatnonzero(e2)
            t0 = np.maximum(0, Cv[i2] - mm[i2] - n0[i2])
            t1 = np.minimum(mm[i2], Cv[i2] - mm[i2])
            mf, n0f, Cf, t0f = (a.astype(np.float64) for a in (mm[i2], n0[i2], Cv[i2], t0))

            def terms2(rows, i):
                t = t0f[rows, None] + i
                return (
                    log_binom(mf[rows, None], t)
                    + (mf[rows, None] - t) * np.log(2.0)
                    + log_binom(n0f[rows, None], Cf[rows, None] - mf[rows, None] - t)
                )

            v, _, _ = _row_terms_lse(terms2, np.maximum(t1 - t0 + 1, 1), signed=False)
            logS[i2] = v
            rest &= ~e2
        todo = rest
        if method == "fourier":
            if todo.any():
                it = np.flatnonzero(todo)
                logS[it] = _log_coeff_fourier(n0[it], kv[it], mm[it], Cv[it])
            todo = np.zeros(idx.size, dtype=bool)

    if todo.any():
        it = np.flatnonzero(todo)
        # inclusion-exclusion (Appendix B.1, sign restored): i runs to floor(min(m, d)),
        # d = (L - C)/k - (lam - m); later terms vanish (binom(n, C) = 0 for n < C). Terms are
        # taken relative to i = 0: T_i / T_0 = binom(m, i) binom(N - ik, C) / binom(N, C),
        # N = L - k(lam - m), with the log-ratio from accurate lgamma differences, so rounding
        # is relative to each term and not to lgamma(L) (matters for L >> 1e3).
        d = (Lv[it] - Cv[it]) // kv[it] - (lm[it] - mm[it])
        n_terms = np.minimum(mm[it], d) + 1
        mf, kf, Cf = (a[it].astype(np.float64) for a in (mm, kv, Cv))
        Nf = (n0[it] + mm[it] * kv[it]).astype(np.float64)

        def terms(rows, i):
            ik = i * kf[rows, None]
            N = Nf[rows, None]
            return (
                log_binom(mf[rows, None], i)
                + lgamma_diff(N - ik - Cf[rows, None] + 1.0, ik)
                - lgamma_diff(N - ik + 1.0, ik)
            )

        v, sgn, vabs = _row_terms_lse(terms, n_terms, signed=True)
        v = v + log_binom(Nf, Cf)
        vabs = vabs + log_binom(Nf, Cf)
        if method == "lse":
            logS[it] = np.where(sgn > 0, v, -np.inf)
        else:
            # rounding of each log-term ~ eps * magnitude, amplified by sum|T| / |sum T|
            mag = 1.0 + mf * np.log(2.0) + 2.0 * (n_terms - 1) * kf * np.log(Lv[it] + 2.0)
            with np.errstate(invalid="ignore"):
                log_ratio = vabs - v
                ok = (sgn > 0) & (log_ratio <= np.log(_MAX_CANCELLATION)) & (
                    log_ratio + np.log(4.0 * np.finfo(float).eps * mag) <= np.log(_LSE_RTOL)
                )
            logS[it[ok]] = v[ok]
            bad = it[~ok]
            if bad.size:
                logS[bad] = _log_coeff_fourier(n0[bad], kv[bad], mm[bad], Cv[bad])

    val = log_binom(lm, mm) - log_binom(Lv, Cv) + logS
    out[idx] = np.minimum(np.where(np.isnan(val), -np.inf, val), 0.0)
    return out


def pig_cover_logpmf(m, lam, k, L, C, *, method: str = "auto"):
    """log rho~(m / lambda, lambda, k; L, C); -inf where rho~ = 0. See :func:`pig_cover_pmf`."""
    if method not in ("auto", "lse", "fourier"):
        raise ValueError("method must be 'auto', 'lse' or 'fourier'")
    args = [as_int(a, n) for a, n in zip((m, lam, k, L, C), ("m", "lam", "k", "L", "C"))]
    scalar = all(a.ndim == 0 for a in args)
    arrs = np.broadcast_arrays(*args)
    shape = arrs[0].shape
    out = _log_pmf_flat(*(a.ravel() for a in arrs), method=method).reshape(shape)
    return out[()] if scalar else out


def pig_cover_pmf(m, lam, k, L, C, *, method: str = "auto"):
    r"""Discrete cover pmf rho~(s = m / lambda, lambda, k; L, C) of Assumption 2 (Appendix B.1).

    lambda groups of k unit-length members occupy k lambda distinct units of the L-unit
    context, uniformly at random; the observation is a window of C consecutive units (by
    exchangeability its position is irrelevant); a group is covered when at least one member
    lies in the window. rho~ is the probability that exactly m groups are covered. Closed form
    (inclusion-exclusion over the covered groups that still miss the window):

        rho~ = binom(lambda, m) / binom(L, C)
               * sum_{i=0}^{floor(min(m, d))} (-1)^i binom(m, i) binom(L - k(lambda - m) - i k, C),
        d = (L - C) / k - (lambda - m),

    i.e. binom(lambda, m) [x^C] (1 + x)^{L - k lambda} ((1 + x)^k - 1)^m / binom(L, C).
    Corrections to the paper (verified against brute-force enumeration, tests/pig_reference.py):

    * the final printed expression of B.1 drops the alternating sign (-1)^i (the first display
      of B.1 and the derivation keep it); without it the values do not sum to 1;
    * the derivation's total count binom(lambda, k lambda) (k lambda)! / (k!)^lambda should
      read binom(L, k lambda) (k lambda)! / (k!)^lambda;
    * rho~ = 0 outside max(0, lambda - floor((L - C) / k)) <= m <= min(lambda, C) (d < 0 or
      m > C), which the sum yields but we short-circuit.

    Conventions: 0 for all m when the parameters are invalid (k < 1, k lambda > L, C outside
    [0, L], lambda < 0); lambda = 0 gives rho~ = 1 at m = 0; m outside [0, lambda] gives 0.

    Numerics (log space, scipy ``gammaln``): ``method="auto"`` uses exact positive forms where
    they exist (m = 0: binom(L - k lambda, C); k = 1: hypergeometric binom(L - lambda, C - m);
    k = 2: sum_t binom(m, t) 2^(m - t) binom(L - 2 lambda, C - m - t); C = m: k^m;
    C = L - k(lambda - m): 1), otherwise the signed log-sum-exp of the sum above, and falls
    back to the discrete Cauchy integral of the positive generating function on the
    saddle-point circle when the alternating sum loses more than 3 digits
    (sum|terms| > 1e3 |sum|: large m with small per-group cover probability, where the terms
    reach 2^m times the result). ``"lse"`` forces the signed sum for every case (negative
    results -> 0) and ``"fourier"`` the Cauchy integral for every case without a positive
    closed form (k >= 3); both exist for tests. Relative accuracy ~1e-12 for L in
    the hundreds, ~1e-9 at L ~ 1e6 (gammaln of arguments ~1e6).

    All arguments broadcast (integers); returns float64 (a scalar for scalar inputs).
    """
    lp = pig_cover_logpmf(m, lam, k, L, C, method=method)
    return np.exp(lp)


def pig_pmf_mode(lam, k, L, C) -> np.ndarray:
    """argmax_m rho~(m / lambda, lambda, k; L, C) (smallest m among numerical ties), vectorized.

    Used by Algorithm 2 line 1114 (argmax_s rho = mode / lambda: rho is the piecewise-linear
    interpolation of (lambda + 1) rho~, so its maximum is at a grid point). Returns -1 where
    the parameters are invalid and 0 for lambda = 0.
    """
    args = [as_int(a, n) for a, n in zip((lam, k, L, C), ("lam", "k", "L", "C"))]
    scalar = all(a.ndim == 0 for a in args)
    lam_a, k_a, L_a, C_a = (a.ravel() for a in np.broadcast_arrays(*args))
    shape = np.broadcast_shapes(*(a.shape for a in args))
    out = np.full(lam_a.shape, -1, dtype=np.int64)
    valid = (k_a >= 1) & (lam_a >= 0) & (C_a >= 0) & (C_a <= L_a) & (k_a * lam_a <= L_a)
    out[valid & (lam_a == 0)] = 0
    g = np.flatnonzero(valid & (lam_a > 0))
    if g.size:
        lo = np.maximum(0, lam_a[g] - (L_a[g] - C_a[g]) // k_a[g])
        hi = np.minimum(lam_a[g], C_a[g])
        width = hi - lo + 1
        order = np.argsort(width, kind="stable")
        for rows in _chunks(order, width[order]):
            W = int(width[rows].max())
            mgrid = lo[rows, None] + np.arange(W)[None, :]
            inside = mgrid <= hi[rows, None]
            lp = np.full(mgrid.shape, -np.inf)
            sel = np.nonzero(inside)
            lp[sel] = _log_pmf_flat(
                mgrid[sel], lam_a[g][rows][sel[0]], k_a[g][rows][sel[0]], L_a[g][rows][sel[0]], C_a[g][rows][sel[0]],
                "auto"
            )
            mx = lp.max(axis=1, keepdims=True)
            first = np.argmax(lp >= mx + np.log1p(-_MODE_TIE_RTOL), axis=1)
            out[g[rows]] = lo[rows] + first
    out = out.reshape(shape)
    return out[()] if scalar else out


# =============================================================================== rho (B.2)
def pig_density(s, lam, k, L, C):
    r"""Continuous rho(s, lambda, k; L, C) of Appendix B.2 (the oracle density of Eq. 6).

        rho = (lambda + 1) rho~(s)                                          if s in N / lambda
        rho = (lambda^2 + lambda) [(b - s) rho~(a) + (s - a) rho~(b)]        otherwise,
        a = floor(s lambda) / lambda,  b = ceil(s lambda) / lambda,

    (rho~ evaluated at m = a lambda, b lambda), i.e. (lambda + 1) times the linear
    interpolation of rho~ between neighbouring multiples of 1/lambda. The two branches agree
    at the grid points ((lambda^2 + lambda)(b - a) = lambda + 1), so rho is continuous and no
    correction is needed; the text's "we simply multiply pi by lambda + 1" means rho~. The
    factor lambda + 1 is the paper's approximate normalization (uniform prior: the pmf of the
    discrete uniform on lambda + 1 points and the continuous uniform density differ by that
    factor); rho does not integrate exactly to 1 (the trapezoid integral is
    (lambda + 1)/lambda [1 - (rho~(0) + rho~(1)) / 2]).

    Conventions: lambda = 0 (valid k >= 1, 0 <= C <= L) gives rho = 1 on [0, 1] (every s
    satisfies s lambda = 0 and rho~(m = 0) = 1, times lambda + 1 = 1): the oracle's partial
    point carries no information about the context. Invalid parameters (k < 1, k lambda > L)
    and s outside [0, 1] give 0; NaN s gives NaN. Vectorized; all arguments broadcast.
    """
    s_a = np.asarray(s, dtype=np.float64)
    args = [as_int(a, n) for a, n in zip((lam, k, L, C), ("lam", "k", "L", "C"))]
    scalar = s_a.ndim == 0 and all(a.ndim == 0 for a in args)
    s_b, lam_b, k_b, L_b, C_b = np.broadcast_arrays(s_a, *args)
    shape = s_b.shape
    s_f, lam_f, k_f, L_f, C_f = (a.ravel() for a in (s_b, lam_b, k_b, L_b, C_b))
    out = np.zeros(s_f.shape)
    valid = (k_f >= 1) & (lam_f >= 0) & (C_f >= 0) & (C_f <= L_f) & (k_f * lam_f <= L_f)
    inrange = (s_f >= 0.0) & (s_f <= 1.0)
    out[valid & inrange & (lam_f == 0)] = 1.0
    g = np.flatnonzero(valid & inrange & (lam_f > 0))
    if g.size:
        t = s_f[g] * lam_f[g]
        a = np.minimum(np.floor(t), lam_f[g]).astype(np.int64)
        frac = t - a
        b = np.minimum(a + 1, lam_f[g])
        pa = np.exp(_log_pmf_flat(a, lam_f[g], k_f[g], L_f[g], C_f[g], "auto"))
        need_b = frac > 0
        pb = np.zeros(g.size)
        if need_b.any():
            nb = np.flatnonzero(need_b)
            pb[nb] = np.exp(_log_pmf_flat(b[nb], lam_f[g][nb], k_f[g][nb], L_f[g][nb], C_f[g][nb], "auto"))
        out[g] = (lam_f[g] + 1.0) * ((1.0 - frac) * pa + frac * pb)
    out[np.isnan(s_f)] = np.nan
    out = out.reshape(shape)
    return out[()] if scalar else out


def pig_bin_density(b, lam, k, L, C):
    r"""Oracle density of score bin b, for the ``likelihood="binned"`` option of :class:`PIGFit`.

        rho_bin(b, lambda, k; L, C) = N_BINS * sum_{m : bin(m / lambda) = b} rho~(m; lambda, k, L, C)

    with the bins of :func:`raylc.dolce.scenario.bucketize_scores` (width w = 1 / N_BINS =
    0.1, Section 3.1; [b w, (b + 1) w), the last one closed), i.e. P(s in bin b | O) / w. The
    oracle's partial point s = m / lambda is discrete while the noise is the uniform density
    p(s|N) = 1 (Eq. 5); this compares both at the resolution of the bins, where Eq. 6's
    (lambda + 1) rho~ (a density on lambda + 1 atoms) rewards large lambda at every score. The
    bins partition [0, 1], so w sum_b rho_bin = sum_m rho~ = 1. m is in bin b < N_BINS - 1 iff
    ceil(b lambda / N_BINS) <= m <= ceil((b + 1) lambda / N_BINS) - 1 (integer arithmetic, as
    bucketize_scores bins m / lambda for lambda < 1e9); the last bin ends at m = lambda.

    lambda = 0 gives 1 (uninformative, as :func:`pig_density`); invalid parameters (k < 1,
    k lambda > L, C > L) give 0. Cost: one rho~ per m in the bin. Vectorized; all arguments
    broadcast (non-negative integers, 0 <= b < N_BINS).
    """
    args = [as_int(a, n) for a, n in zip((b, lam, k, L, C), ("b", "lam", "k", "L", "C"))]
    scalar = all(a.ndim == 0 for a in args)
    b_a, lam_a, k_a, L_a, C_a = (a.ravel() for a in np.broadcast_arrays(*args))
    shape = np.broadcast_shapes(*(a.shape for a in args))
    if np.any((b_a < 0) | (b_a >= N_BINS)):
        raise ValueError(f"bin b must lie in 0 .. {N_BINS - 1}")
    out = np.zeros(lam_a.shape)
    valid = (k_a >= 1) & (lam_a >= 0) & (C_a >= 0) & (C_a <= L_a) & (k_a * lam_a <= L_a)
    out[valid & (lam_a == 0)] = 1.0
    g = np.flatnonzero(valid & (lam_a > 0))
    lam_g, b_g = lam_a[g], b_a[g]
    lo = -(-b_g * lam_g // N_BINS)
    hi = np.where(b_g < N_BINS - 1, -(-(b_g + 1) * lam_g // N_BINS) - 1, lam_g)
    sizes = np.maximum(hi - lo + 1, 0)
    mass = np.zeros(g.size)
    ends = np.cumsum(sizes)
    start = 0
    while start < g.size:  # pieces of about _CHUNK (entry, m) terms
        stop = int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _CHUNK, side="right"))
        stop = max(stop, start + 1)
        local = np.repeat(np.arange(stop - start), sizes[start:stop])  # entry of each term
        m = lo[start + local] + segment_positions(local, stop - start)[0]
        gi = g[start + local]
        pmf = pig_cover_pmf(m, lam_a[gi], k_a[gi], L_a[gi], C_a[gi])
        mass[start:stop] = np.bincount(local, weights=pmf, minlength=stop - start)
        start = stop
    out[g] = mass * N_BINS
    return float(out[0]) if scalar else out.reshape(shape)


# =============================================================================== EM (Algorithm 2)
class PIGFit(CellFit):
    r"""Per-problem (lambda_i, k_i) of one task by EM over the PIG mixture (Algorithm 2).

    Model (Section 3.3): every sub-unit outcome y_ijl in {1, 0, IDK} comes from the noise
    component N (one P(y|N) per task) with prior P_i(N), or from the oracle O with prior
    P_i(O) and per-(problem, C) hit rates P_{i,C}(y|O) (Section 4). The observation-level
    likelihood (Eq. 5) uses p(x|N) = 1 (uniform density) and p(x|O) = rho(P_{i,C}(y = 1|O),
    lambda, k; L_i, C) (Eq. 6, :func:`pig_density`). Initialisation (lines 1090-1097):
    y_ij(1) = s_ij, y_ij(0) = 1 - s_ij, y_ij(IDK) = 0 (IDK: 0, 0, 1); q_ij(z|y) = 0.5; P_i(z)
    = 0.5. Each of the ``n_steps`` = T iterations runs, in Algorithm 2's order:

      (a) M-step noise (line 1100): P(y|N) = sum_ij q_ij(N|y) y_ij(y) / sum_ij,y' (...);
      (b) M-step oracle (line 1105): P_{i,c}(y|O) = sum_j q_ij(O|y) y_ij(y) [C_ij = c] /
          sum_j,y' (...) - line 1104 loops over lambda, but the expression does not involve
          lambda (Section 4: shared by all samples with the same length), so it is computed once;
          (lambda_i*, k_i*) = argmax over valid pairs of
          sum_j log[rho(P_{i,C_ij}(1|O), lambda, k; L_i, C_ij) P_i(O) + 1 * P_i(N)]
          (lines 1108-1112; every observation of a cell, IDK included, contributes the same
          factor; P_i(z) from the previous iteration); ties within 1e-10 (1 + |max|)
          go to the first pair in (lambda ascending, k ascending) order;
          then (lines 1113-1117) P_{i,c}(1|O) = argmax_s rho(s, lambda*, k*; L_i, c) = the mode
          of rho~ / lambda* (``hit_rate="mode"``, the paper's choice: the most probable oracle
          partial point s_O for span length c, a coherent point estimate of s_O,ij under Eq. 6;
          the expected fraction is the other coherent choice, offered as an option below),
          and P_{i,c}(y|O) for y in {0, IDK} rescaled to the remaining mass 1 - P_{i,c}(1|O);
      (c) M-step priors (line 1122): P_i(z) = sum_j sum_y q_ij(z|y) y_ij(y) / |J_i| (the
          printed y_ij(y) inside sum_y' is a typo for y_ij(y'));
      (d) E-step (lines 1125-1126, y-level): q_ij(z|y) = P(y|z) P_i(z) / sum_z' P(y|z') P_i(z')
          with P(y|O) = P_{i,C_ij}(y|O) from (b).

    Candidates (Section 4): Lambda_i = K_i = {C_ij}_j U {0, maxC_i + 1, L_i}, maxC_i the
    largest C_ij < L_i (0 if none); pairs with k < 1 or k lambda > L_i are excluded. For
    lambda = 0, rho = 1 for every s and k (:func:`pig_density`): the first valid k is kept
    and, rho being flat, every s is an argmax of line 1114, so the M-step value of (b) is kept.

    Guards (exact-arithmetic corner cases): 0/0 in (a) gives 1/3; 0/0 in (b) (no oracle
    responsibility in a cell) gives the cell's unweighted y-shares (q = the initial 0.5); a
    zero denominator in line 1116 (no 0/IDK mass) puts 1 - P(1|O) on y = 0; a zero E-step
    denominator gives the prior q_ij(z|y) = P_i(z). Mode ties within a relative 1e-9 go to
    the smallest m.

    Likelihoods (``likelihood``; measured side by side in tests/dolce/test_pig.py and
    tests/benchmarks/pig_recovery_over_seeds.py): ``"paper"`` is Algorithm 2's line 1108 above;
    ``"binned"``, the default, and ``"score"`` are not in the paper. Option ``hit_rate="mean"``
    (off by default) sets line 1114's hit rate to the expected
    covered fraction E[m]/lambda* = 1 - binom(L - k*, c) / binom(L, c) (the model's marginal
    probability that a sub-unit is hit) instead of the mode. ``likelihood="score"`` replaces
    line 1108's rho(P_{i,C_ij}(1|O), ...) by rho(s_ij, ...) at each observed score (IDK read as
    s = 0), i.e. the plain mixture p(s_ij) = rho(s_ij) P_i(O) + 1 * P_i(N) of Eq. 5. The
    paper's cell-level form identifies lambda only through the concentration of rho~ at the
    mean covered fraction, which depends on k alone (E[m]/lambda = 1 - binom(L - k, C) /
    binom(L, C)), so it drifts to large lambda; the option needs counts per distinct score.
    ``likelihood="binned"`` compares oracle and noise per score bin of width 0.1 (the bins of
    Section 3.1): the observation's oracle density is :func:`pig_bin_density`, P(s in its bin
    | O) / 0.1, against p(s|N) = 1. Eq. 6's (lambda + 1) rho~ is a density on lambda + 1 atoms
    and so favours large lambda at every score (exact zeros included); the bin masses do not,
    which is why "binned" is the default (recovery and calibration: docs/figures.md).

    All y-level quantities depend on an observation only through (problem, C), so the EM
    runs on sufficient statistics per (problem, C) cell: n (count), sum y(1) = sum s,
    sum y(0) = sum (1 - s) and the IDK count. rho is evaluated for every (problem, lambda,
    k, cell) on padded arrays; there is no Python loop over observations or problems.

    The :class:`~raylc.dolce.cells.CellFit` contract: hyperparameters ``n_steps`` (T),
    ``likelihood`` and ``hit_rate``; :meth:`fit` takes one task's observation table (its
    statistics per (problem, C), and per distinct score for the options), :meth:`fit_stats`
    :class:`~raylc.dolce.cells.CellStats` (``CellStats.from_scores`` builds them from one row
    per observation). ``loglik_`` is the objective of (b) at the final pair (last step),
    ``prior_oracle_`` P_i(O) from the last (c), ``noise_`` P(y|N) from the last (a); besides
    the shared attributes, ``hit_rate_`` is P_{i,c}(y = 1|O) after the last (b) per cell
    (``cells_problem_``, ``cells_C_``).
    """

    scenario = "PIG"

    def __init__(self, n_steps: int = 5, likelihood: str = "binned", hit_rate: str = "mode", tol: float = 0.0,
                 max_steps: int = 1000, uncertainty_steps: int = 0):
        super().__init__(n_steps, tol, max_steps, uncertainty_steps)
        self.likelihood = likelihood
        self.hit_rate = hit_rate

    def _check_params(self) -> None:
        super()._check_params()
        if self.hit_rate not in PIG_HIT_RATES:
            raise ValueError("hit_rate must be 'mode' (paper) or 'mean'")
        if self.likelihood not in PIG_LIKELIHOODS:
            raise ValueError("likelihood must be 'binned', 'paper' (Algorithm 2) or 'score'")

    def cell_stats(self, obs: pl.DataFrame) -> CellStats:
        """Statistics per (problem, C) cell - n, sum s, sum (1 - s) over non-IDK, IDK count -
        and, for the ``likelihood`` options, per distinct score."""
        return cell_statistics(obs, by_score=self.likelihood != "paper")

    def _prepare_scores(self, d: dict, problem, C, s, count) -> None:
        """Density entries (problem, lambda, k, distinct (C, s)) for ``likelihood="score"``; for
        ``"binned"`` s is replaced by its bin (:func:`raylc.dolce.scenario.bucketize_scores`)."""
        problem = np.asarray(problem)
        C_a = as_int(C, "C")
        s_a = np.asarray(s, dtype=np.float64)
        w = np.asarray(count, dtype=np.float64)
        if not (problem.shape == C_a.shape == s_a.shape == w.shape) or problem.ndim != 1:
            raise ValueError("score_counts arrays must be 1-D and aligned")
        s_a = np.where(np.isnan(s_a), 0.0, s_a)  # the oracle answers IDK when it covers no aspect
        if self.likelihood == "binned":
            s_a = bucketize_scores(s_a).astype(np.float64)
        pos = np.searchsorted(d["problems"], problem)
        if (np.any(pos >= d["problems"].size)
                or np.any(d["problems"][np.minimum(pos, d["problems"].size - 1)] != problem)):
            raise ValueError("score_counts holds a problem without statistics")
        keys = np.stack([pos.astype(np.float64), C_a.astype(np.float64), s_a], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        gw = np.bincount(inv.reshape(-1), weights=w, minlength=uniq.shape[0])
        g_p, g_C, g_s = uniq[:, 0].astype(np.int64), uniq[:, 1].astype(np.int64), uniq[:, 2]
        P, M = d["P"], d["M"]
        n_groups = np.bincount(g_p, minlength=P)
        g_first = np.concatenate([[0], np.cumsum(n_groups)[:-1]])
        v_p, v_l, v_k = np.nonzero(d["valid"])
        reps = n_groups[v_p]
        e_pair = np.repeat(np.arange(v_p.size), reps)
        offs = np.arange(e_pair.size) - np.repeat(np.cumsum(reps) - reps, reps)
        e_g = g_first[v_p[e_pair]] + offs
        e_p = v_p[e_pair]
        density = pig_bin_density if self.likelihood == "binned" else pig_density
        rho = density(g_s[e_g], d["cand"][e_p, v_l[e_pair]], d["cand"][e_p, v_k[e_pair]], d["Lp"][e_p], g_C[e_g])
        d.update(
            s_e_p=e_p, s_e_flat=(e_p * M + v_l[e_pair]) * M + v_k[e_pair], s_e_w=gw[e_g], s_e_rho=rho,
        )

    @staticmethod
    def _prepare(g: dict) -> dict:
        P, M, Mc, Lp, maxC, Cpad = g["P"], g["M"], g["Mc"], g["Lp"], g["maxC"], g["Cpad"]
        problems, Ypad, cellmask, cand, valid = g["problems"], g["stats"], g["cellmask"], g["cand"], g["valid"]

        # every (problem, lambda, k, cell) entry whose rho enters the objective
        e_p, e_l, e_k, e_c = np.nonzero(valid[:, :, :, None] & cellmask[:, None, None, :])
        return dict(
            problems=problems, P=P, M=M, Mc=Mc, Lp=Lp, maxC=maxC, Cpad=Cpad, Ypad=Ypad, cellmask=cellmask,
            ncell=Ypad.sum(axis=2), cand=cand, valid=valid, totals=Ypad.sum(axis=(1, 2)),
            e_p=e_p, e_c=e_c, e_flat=(e_p * M + e_l) * M + e_k,
            e_lam=cand[e_p, e_l], e_k=cand[e_p, e_k], e_L=Lp[e_p], e_C=Cpad[e_p, e_c],
        )

    # ------------------------------------------------------------------ EM
    def _em(self, stats: CellStats, grid: dict) -> None:
        if self.likelihood != "paper" and stats.score_counts is None:
            raise ValueError(f"likelihood={self.likelihood!r} needs per-score counts: use fit(), "
                             "CellStats.from_scores or pass score_counts")
        d = self._prepare(grid)
        if self.likelihood != "paper":
            self._prepare_scores(d, *stats.score_counts)
        P, M = d["P"], d["M"]
        Y, cellmask, ncell = d["Ypad"], d["cellmask"], d["ncell"]
        ar = np.arange(P)
        valid_flat = d["valid"].reshape(P, M * M)
        qN = np.full(Y.shape, 0.5)  # q_ij(N | y), identical within a (problem, C) cell
        qO = np.full(Y.shape, 0.5)
        prior_N = np.full(P, 0.5)
        prior_O = np.full(P, 0.5)
        n_safe = np.where(cellmask, ncell, 1.0)[:, :, None]
        vp, vf = np.nonzero(valid_flat)
        shift = np.zeros(valid_flat.shape)
        if self._marginal_argmax:  # the posterior's runs: argmax of log prior + objective (module uncertainty)
            shift[vp, vf] = log_pair_prior(vp, d["cand"][vp, vf // M], P)
        for step in range(self._steps()):
            # (a) M-step: noise P(y | N), shared by the task
            wN = Y * qN
            den = wN.sum()
            noise = wN.sum(axis=(0, 1)) / den if den > 0 else np.full(3, 1.0 / 3.0)

            # (b) M-step: oracle P_{i,c}(y | O) per cell
            wO = Y * qO
            cden = wO.sum(axis=2, keepdims=True)
            p_oracle = np.where(cden > 0, wO / np.where(cden > 0, cden, 1.0), Y / n_safe)
            hit = p_oracle[:, :, 0]

            if self.likelihood == "paper":  # line 1108: rho at the cell's hit rate
                rho = pig_density(hit[d["e_p"], d["e_c"]], d["e_lam"], d["e_k"], d["e_L"], d["e_C"])
                e_p, e_flat, e_w = d["e_p"], d["e_flat"], ncell[d["e_p"], d["e_c"]]
            else:  # option: rho at each observed score
                rho, e_p, e_flat, e_w = d["s_e_rho"], d["s_e_p"], d["s_e_flat"], d["s_e_w"]
            with np.errstate(divide="ignore", invalid="ignore"):
                contrib = np.where(e_w > 0, e_w * np.log(rho * prior_O[e_p] + prior_N[e_p]), 0.0)
            ll = np.bincount(e_flat, weights=contrib, minlength=P * M * M).reshape(P, M * M)
            ll = np.where(valid_flat, ll, -np.inf)
            best = first_near_max(ll + shift, valid_flat)
            loglik = ll[ar, best]
            lam_star = d["cand"][ar, best // M]
            k_star = d["cand"][ar, best % M]

            # lines 1113-1117: model hit rate at (lambda*, k*); lambda* = 0 keeps the M-step value
            lam_c = np.broadcast_to(lam_star[:, None], cellmask.shape)
            k_c = np.broadcast_to(k_star[:, None], cellmask.shape)
            L_c = np.broadcast_to(d["Lp"][:, None], cellmask.shape)
            upd = cellmask & (lam_c > 0)
            if upd.any():
                h = np.zeros(cellmask.shape)
                if self.hit_rate == "mode":
                    h[upd] = pig_pmf_mode(lam_c[upd], k_c[upd], L_c[upd], d["Cpad"][upd]) / lam_c[upd]
                else:
                    h[upd] = 1.0 - pig_cover_pmf(0, 1, k_c[upd], L_c[upd], d["Cpad"][upd])
                rest = p_oracle[:, :, 1] + p_oracle[:, :, 2]
                safe = np.where(rest > 0, rest, 1.0)
                new = np.stack(
                    [
                        h,
                        np.where(rest > 0, (1.0 - h) * p_oracle[:, :, 1] / safe, 1.0 - h),
                        np.where(rest > 0, (1.0 - h) * p_oracle[:, :, 2] / safe, 0.0),
                    ],
                    axis=2,
                )
                p_oracle = np.where(upd[:, :, None], new, p_oracle)

            # (c) M-step: priors P_i(z)
            prior_N = (Y * qN).sum(axis=(1, 2)) / d["totals"]
            prior_O = (Y * qO).sum(axis=(1, 2)) / d["totals"]

            # (d) E-step: q(z | y)
            a = noise[None, None, :] * prior_N[:, None, None]
            b = p_oracle * prior_O[:, None, None]
            den = a + b
            pos = den > 0
            safe = np.where(pos, den, 1.0)
            qN = np.where(pos, a / safe, prior_N[:, None, None])
            qO = np.where(pos, b / safe, prior_O[:, None, None])
            if self._step_done(step, loglik):
                break

        self._set_fit(grid, lam_star, k_star, loglik, prior_O, noise)
        self._set_pairs(vp, d["cand"][vp, vf // M], d["cand"][vp, vf % M], ll[vp, vf])
        cp, cc = np.nonzero(cellmask)
        self.hit_rate_ = p_oracle[cp, cc, 0]


def fit_pig_task(
    obs: pl.DataFrame, n_steps: int = 5, *, hit_rate: str = "mode", likelihood: str = "binned"
) -> tuple[pl.DataFrame, dict]:
    """``PIGFit(n_steps, likelihood, hit_rate).fit(obs).frames()``: the PIG model
    (Algorithm 2) of one task's observation table as (problems, info)
    (:meth:`raylc.dolce.cells.CellFit.frames`; scenario "PIG"; categories with lambda_p = k_p
    of the task's partial lengths)."""
    return PIGFit(n_steps=n_steps, likelihood=likelihood, hit_rate=hit_rate).fit(obs).frames()
