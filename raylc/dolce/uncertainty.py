r"""Per-problem uncertainty of a DOLCE fit: the posterior over the candidate pairs (issues 17, 29).

Step (b) of Algorithms 1 and 2 scores every valid pair (lambda, k) of problem i's candidate set
(Section 4) by l_i(lambda, k) = sum_j log[P_ij(x_ij | O; lambda, k) P_i(O) + P(x_ij | N) P_i(N)]
(Eq. 1; Eq. 5 for PIG) and keeps the argmax. The reported (lambda, k) stay that argmax after the
paper's T steps; the posterior only measures how far to trust them.

**Prior** (issue 29). Uniform over problem i's candidate lambdas (Section 4), then uniform
over k given lambda: p(lambda, k) = 1 / (|Lambda_i| n_i(lambda)), n_i(lambda) the scored k at
lambda. A prior uniform over pairs gave a small lambda one share per equivalent k and pushed
closed-book problems (lambda = 0) to confidence ~0.25. Pairs that the data cannot tell apart
(COW: every k at lambda = 0 or lambda > max C, where pi = 1) are scored once by the fit; that
pair carries its lambda's whole mass. The two candidates above max C (max C + 1 and L) keep a
share each (merged into one class, the realistic generator, whose lambda = L problems are
reported at lambda = max C, gave ECE 0.053 instead of 0.044 at a = 1, and the quickstart's
mean confidence fell).

**P_nonpar integrated out** (COW). Below lambda (C_ij < lambda, Eq. 4) an observation's
probability is q(x) = P_nonpar,i(x | O; lambda) P_i(O) + P(x | N) P_i(N), one categorical over
x in {1, 0, IDK} shared by problem i's n = sum_x n_x observations below lambda. With P_nonpar
free this q is (nearly) free, and its plug-in fit, sum_x n_x log q^(x), explains any counts:
candidates with lambda > max C put every partial observation there and tie with the truth.
With a Dirichlet(a, a, a) prior on q the counts' marginal likelihood is

    DirMult(n) = log Gamma(3a) - log Gamma(n + 3a) + sum_x [log Gamma(n_x + a) - log Gamma(a)]

(one ordered sequence; the same for soft counts), the plug-in fit less an Occam term. a = 1/2
(Jeffreys) makes that term about log n nats wherever q^ lies; the uniform a = 1 charges 2 log n
at a vertex, the usual state below lambda (an oracle without its evidence says IDK), and so
pushed planted lambda = 5, 10 problems of the quickstart to lambda = 1 (mean confidence 84.8%
against a recovery of 93.0%; docs/figures.md). So

    m_i(lambda, k) = l_i(lambda, k) - sum_x n_x log q^(x) + DirMult(n_1, n_0, n_IDK),

where the fit gives the plug-in part and the counts below lambda per pair (``below_ll``,
``below_n`` of ``CellFit.pairs_``); pairs without them keep m = l (PIG, the hypothesis tests).
The observations at or above lambda keep Eq. 3 with the EM's P(x | N), P_i(z), except at
lambda = 0 (pi = 1 everywhere): there P_i(O) takes its own best value (``profile_ll``,
(n_1/n - P(1|N)) / (1 - P(1|N)) clipped to [0, 1]) instead of the value the EM fitted for its
chosen pair, which is near 1 when that pair lets P_nonpar absorb the noise.

PIG (Eq. 5) has no split at lambda: its non-parametric part P_{i,C}(y | O) is one hit rate per
(problem, C) cell, shared by every candidate (Section 4), so it gives no candidate a free fit
of the others' data and its Occam term is common to all pairs; only the prior changes.

**Nuisance parameters.** Evaluated after the paper's T steps the posterior is over-confident,
and the EM has more than one fixed point (from the paper's start q_ij(N) = P_i(N) = 0.5 it
often settles, on tasks with little noise, at a noise P(x|N) that is mostly IDK, hundreds of
nats below the fixed point from a low-noise start). The posterior therefore integrates over
theta = (P(x|N), P_i(z), P_nonpar): the EM is run from each start s of
``CellFit._posterior_starts`` (COW: 0.5 and 0.1, ``uncertainty_steps`` shared out), its
step (b) picking the pair of largest p(lambda, k) exp m_i (``CellFit._marginal_argmax``, so
that theta is fitted to the pair the posterior favours), and

    p_i(lambda, k) = sum_s w_s p_i(lambda, k | theta_s),  p_i(. | theta_s) prop. to p(lambda, k) exp m_i(.; theta_s),
    w_s proportional to prod_i sum_(lambda, k) p(lambda, k) exp m_i(lambda, k; theta_s)

(theta's posterior as point masses at the EM's fixed points; their evidences differ by tens to
thousands of nats, so in practice the better one is used). Calibration per generator:
``tests/benchmarks/calibration.py``, docs/figures.md. Summaries:

* ``confidence``: the posterior mass of the reported category (Figure 1);
* ``p_I`` .. ``p_V``: the posterior mass of each category;
* ``lam_low``, ``lam_high``: the hull of the smallest set of candidate lambdas holding at least
  ``level`` of the lambda-marginal, widened down to one above the next smaller candidate (the
  data cannot tell lambda apart between two candidates). ``lam_high`` is open (None) when the
  set holds a lambda above max C: the data then only say lambda > max C.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from raylc.dolce.categories import CATEGORIES, category_codes

__all__ = ["problem_uncertainty", "log_dirichlet_multinomial", "log_pair_prior", "marginal_loglik", "OPEN"]

#: The Dirichlet(alpha, alpha, alpha) prior of the categorical below lambda: Jeffreys' 1/2
#: (module docstring; 1, the uniform prior, measured beside it in docs/figures.md).
DIRICHLET_ALPHA = 0.5

#: ``lam_high`` of an interval open at the top (lambda > max C), before it becomes a null.
OPEN = -1


def _segment_max(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, -np.inf)
    np.maximum.at(out, owner, values)
    return out


def log_dirichlet_multinomial(n: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """log Gamma(K a) - log Gamma(n + K a) + sum_x [log Gamma(n_x + a) - log Gamma(a)]: the marginal
    likelihood of one ordered sequence with counts n_x (last axis, K outcomes; soft counts allowed)
    under a categorical with a Dirichlet(a, ..., a) prior, a = ``alpha`` (default
    :data:`DIRICHLET_ALPHA`; module docstring); 0 for no observations."""
    n = np.asarray(n, dtype=np.float64)
    K = n.shape[-1]
    a = DIRICHLET_ALPHA if alpha is None else float(alpha)
    return gammaln(K * a) - gammaln(n.sum(axis=-1) + K * a) + (gammaln(n + a) - gammaln(a)).sum(axis=-1)


def log_pair_prior(p: np.ndarray, lam: np.ndarray, P: int) -> np.ndarray:
    """log p(lambda, k) per scored pair: uniform over the problem's candidate lambdas, then uniform
    over the scored k at lambda (module docstring)."""
    p, lam = np.asarray(p, dtype=np.int64), np.asarray(lam, dtype=np.int64)
    _, pl_of, n_k = np.unique(p * (int(lam.max(initial=0)) + 1) + lam, return_inverse=True, return_counts=True)
    pl_of = pl_of.reshape(-1)
    n_lam = np.bincount(p[np.unique(pl_of, return_index=True)[1]], minlength=P)  # lambdas per problem
    return -np.log(n_lam[p]) - np.log(n_k[pl_of])


def _softmax(ll: np.ndarray, p: np.ndarray, P: int) -> tuple[np.ndarray, np.ndarray]:
    """p_i(lambda, k | theta) per pair (a softmax per problem; pairs at -inf get weight 0) and
    log sum_(lambda, k) exp l_i(lambda, k) per problem (-inf when every pair is at -inf)."""
    top = _segment_max(ll, p, P)
    top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(ll - top[p])
    z = np.bincount(p, weights=w, minlength=P)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nan_to_num(w / z[p]), top + np.log(z)


def marginal_loglik(pairs: dict) -> np.ndarray:
    """m_i(lambda, k) per pair: the objective with the plug-in fit below lambda replaced by the
    Dirichlet-multinomial marginal of its counts (module docstring), if the pairs carry them
    (``below_ll``, ``below_n``; a pair whose plug-in part is -inf stays at -inf), and at lambda = 0
    the objective at its own best P_i(O) where given (``profile_ll``, NaN elsewhere)."""
    ll = np.asarray(pairs["loglik"], dtype=np.float64)
    if "below_n" not in pairs:
        return ll
    with np.errstate(invalid="ignore"):
        m = ll - np.asarray(pairs["below_ll"], dtype=np.float64) + log_dirichlet_multinomial(pairs["below_n"])
    m = np.where(np.isnan(m), -np.inf, m)
    return np.fmax(m, pairs["profile_ll"]) if "profile_ll" in pairs else m


def problem_uncertainty(pairs, n_problems: int, reported: np.ndarray, lam_p: int, k_p: int,
                        lam_q: np.ndarray, level: float = 0.9) -> dict:
    """Posterior summaries per problem from a fit's scored pairs.

    ``pairs``: :attr:`raylc.dolce.cells.CellFit.pairs_` (problem index, lambda, k, loglik, one
    row per scored pair; optionally ``below_ll`` and ``below_n`` (V, 3) for the marginal below
    lambda), or a list of them, one per EM start (the same rows; the posterior
    integrates over their fixed points, module docstring); ``reported``: the reported category
    per problem ("I" .. "V");
    ``lam_p``, ``k_p``: the task's thresholds; ``lam_q``: max C per problem. Returns
    ``confidence`` (P,), ``proba`` (P, 5, in :data:`CATEGORIES` order), ``lam_low`` and
    ``lam_high`` (P,, int64; ``lam_high`` = :data:`OPEN` when open at the top)."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must lie in (0, 1)")
    runs = [pairs] if isinstance(pairs, dict) else list(pairs)
    p, lam, k = (np.asarray(runs[0][c]) for c in ("problem", "lam", "k"))
    if any(not all(np.array_equal(r[c], runs[0][c]) for c in ("problem", "lam", "k")) for r in runs[1:]):
        raise ValueError("the EM starts must score the same pairs")
    P = int(n_problems)
    if p.size == 0 or np.bincount(p, minlength=P).min() == 0:
        raise ValueError("every problem needs at least one scored pair")
    # p_i(lambda, k | theta_s) per start, and log p(x | theta_s) up to a constant shared by the
    # starts (problems at -inf in every start drop out)
    log_prior = log_pair_prior(p, lam, P)
    post, lse = zip(*(_softmax(marginal_loglik(r) + log_prior, p, P) for r in runs))
    lse = np.array(lse)
    lse = lse[:, np.isfinite(lse).any(axis=0)]
    evidence = lse.sum(axis=1)
    if not np.isfinite(evidence).any():
        evidence = np.zeros(len(runs))
    ws = np.exp(evidence - evidence.max())
    ws /= ws.sum()
    w = sum(a * x for a, x in zip(ws, post))

    proba = np.bincount(p * len(CATEGORIES) + category_codes(lam, k, lam_p, k_p, lam_q[p]), weights=w,
                        minlength=P * len(CATEGORIES)).reshape(P, len(CATEGORIES))
    # the labels sort as CATEGORIES does (I < II < III < IV < V), so searchsorted gives their index
    confidence = proba[np.arange(P), np.searchsorted(np.array(CATEGORIES), np.asarray(reported).astype(str))]

    # the lambda-marginal per problem: one row per distinct (problem, lambda), sorted
    order = np.lexsort((lam, p))
    ps, ls, ws = p[order], lam[order], w[order]
    first = np.r_[True, (ps[1:] != ps[:-1]) | (ls[1:] != ls[:-1])]
    starts = np.flatnonzero(first)
    mp, ml, mw = ps[starts], ls[starts], np.add.reduceat(ws, starts)
    prev = np.where(np.r_[False, mp[1:] == mp[:-1]], np.r_[0, ml[:-1]], -1)  # next smaller candidate
    # the smallest set: candidates by mass (ties: smaller lambda first), kept while the mass
    # before them is below level
    by_mass = np.lexsort((ml, -np.round(mw, 12), mp))  # masses equal to 1e-12 tie (rounding of the sums)
    cum = np.cumsum(mw[by_mass])
    first_of = np.r_[0, np.flatnonzero(mp[by_mass][1:] != mp[by_mass][:-1]) + 1]
    base = np.repeat(cum[first_of] - mw[by_mass][first_of], np.diff(np.r_[first_of, by_mass.size]))
    before = cum - mw[by_mass] - base
    keep = by_mass[before < level - 1e-12]
    low_idx = np.full(P, np.iinfo(np.int64).max)
    np.minimum.at(low_idx, mp[keep], keep)  # rows are sorted by lambda within a problem
    high_idx = np.full(P, -1)
    np.maximum.at(high_idx, mp[keep], keep)
    lam_low = np.where(ml[low_idx] == 0, 0, prev[low_idx] + 1)
    lam_high = np.where(ml[high_idx] > lam_q, OPEN, ml[high_idx])
    return dict(confidence=confidence, proba=proba, lam_low=lam_low.astype(np.int64),
                lam_high=lam_high.astype(np.int64))

