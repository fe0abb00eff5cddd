r"""Per-problem uncertainty of a DOLCE fit: the posterior over the candidate pairs (issue 17).

Step (b) of Algorithms 1 and 2 scores every valid pair (lambda, k) of problem i's candidate set
(Section 4) by l_i(lambda, k) = sum_j log[P_ij(x_ij | O; lambda, k) P_i(O) + P(x_ij | N) P_i(N)]
(Eq. 1; Eq. 5 for PIG) and keeps the argmax. With a uniform prior over the scored pairs and
the nuisance parameters (P(x | N), P_i(z), P_nonpar) held at the EM's values, the posterior is

    p_i(lambda, k) = exp l_i(lambda, k) / sum_(lambda', k') exp l_i(lambda', k').

Evaluated after the paper's T steps it is over-confident (the EM has not converged, so its
nuisance parameters, and with them the likelihood surface, are still off); evaluated after
the EM has run on (``uncertainty_steps``, default 200) it is calibrated on data drawn from
the model (README, "Measured figures"; ``tests/benchmarks/calibration.py``). The reported
(lambda, k) stay those of the paper's T steps; the posterior only measures how much to trust
them:

* ``confidence``: the posterior mass of the reported category (Figure 1);
* ``p_I`` .. ``p_V``: the posterior mass of each category;
* ``lam_low``, ``lam_high``: the hull of the smallest set of candidate lambdas holding at least
  ``level`` of the lambda-marginal, widened down to one above the next smaller candidate (the
  data cannot tell lambda apart between two candidates). ``lam_high`` is open (None) when the
  set holds a lambda above max C: the data then only say lambda > max C.

Pairs that the data cannot tell apart (COW: every k at lambda = 0 or lambda > max C, where pi = 1)
are scored once by the fit and so count once.
"""

from __future__ import annotations

import numpy as np

from raylc.dolce.categories import CATEGORIES, category_codes

__all__ = ["problem_uncertainty", "OPEN"]

#: ``lam_high`` of an interval open at the top (lambda > max C), before it becomes a null.
OPEN = -1


def _segment_max(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, -np.inf)
    np.maximum.at(out, owner, values)
    return out


def problem_uncertainty(pairs: dict, n_problems: int, reported: np.ndarray, lam_p: int, k_p: int,
                        lam_q: np.ndarray, level: float = 0.9) -> dict:
    """Posterior summaries per problem from a fit's scored pairs.

    ``pairs``: :attr:`raylc.dolce.cells.CellFit.pairs_` (problem index, lambda, k, loglik, one
    row per scored pair); ``reported``: the reported category per problem ("I" .. "V");
    ``lam_p``, ``k_p``: the task's thresholds; ``lam_q``: max C per problem. Returns
    ``confidence`` (P,), ``proba`` (P, 5, in :data:`CATEGORIES` order), ``lam_low`` and
    ``lam_high`` (P,, int64; ``lam_high`` = :data:`OPEN` when open at the top)."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must lie in (0, 1)")
    p, lam, k, ll = (np.asarray(pairs[c]) for c in ("problem", "lam", "k", "loglik"))
    P = int(n_problems)
    if p.size == 0 or np.bincount(p, minlength=P).min() == 0:
        raise ValueError("every problem needs at least one scored pair")
    # p_i(lambda, k): a softmax per problem (pairs at -inf get weight 0)
    top = _segment_max(ll, p, P)
    if not np.all(np.isfinite(top)):
        top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(ll - top[p])
    w /= np.bincount(p, weights=w, minlength=P)[p]
    w = np.nan_to_num(w)

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
    by_mass = np.lexsort((ml, -mw, mp))
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

