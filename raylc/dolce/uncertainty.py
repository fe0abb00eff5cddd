r"""Per-problem uncertainty of a DOLCE fit: the posterior over the candidate pairs (issue 17).

Step (b) of Algorithms 1 and 2 scores every valid pair (lambda, k) of problem i's candidate set
(Section 4) by l_i(lambda, k) = sum_j log[P_ij(x_ij | O; lambda, k) P_i(O) + P(x_ij | N) P_i(N)]
(Eq. 1; Eq. 5 for PIG) and keeps the argmax. With a uniform prior over the scored pairs and
the nuisance parameters (P(x | N), P_i(z), P_nonpar) held at the EM's values, the posterior is

    p_i(lambda, k | theta) = exp l_i(lambda, k) / sum_(lambda', k') exp l_i(lambda', k').

Evaluated after the paper's T steps it is over-confident (the EM has not converged, so its
nuisance parameters theta, and with them the likelihood surface, are still off). The EM also
has more than one fixed point: from the paper's start (q_ij(N) = P_i(N) = 0.5) it often
settles, on tasks with little noise, where the task's noise P(x|N) is mostly IDK and P_i(N)
several times too large, hundreds of nats of Eq. 1 below the fixed point reached from a
low-noise start, and the posterior there is confidently wrong (e.g. lambda = 2, k = 5 for a
planted k = 2). The posterior therefore integrates over theta: the EM is run from each start
s of ``CellFit._posterior_starts`` (COW: 0.5 and 0.1, ``uncertainty_steps`` shared out among
them; a second start of 0.02 or 0.25 gave the same calibration), and with a uniform prior
over the starts' fixed points theta_s and over the pairs

    p_i(lambda, k) = sum_s w_s p_i(lambda, k | theta_s),
    w_s proportional to p(x | theta_s) = prod_i mean_(lambda, k) exp l_i(lambda, k; theta_s)

(theta's posterior taken as point masses at the EM's fixed points; their evidences differ by
tens to thousands of nats, so in practice the better fixed point is used). It is calibrated
on data drawn from the model (``tests/benchmarks/calibration.py``). The reported (lambda, k)
stay those of the paper's T steps; the posterior only measures how much to trust them:

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


def _softmax(ll: np.ndarray, p: np.ndarray, P: int) -> tuple[np.ndarray, np.ndarray]:
    """p_i(lambda, k | theta) per pair (a softmax per problem; pairs at -inf get weight 0) and
    log sum_(lambda, k) exp l_i(lambda, k) per problem (-inf when every pair is at -inf)."""
    top = _segment_max(ll, p, P)
    top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(ll - top[p])
    z = np.bincount(p, weights=w, minlength=P)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nan_to_num(w / z[p]), top + np.log(z)


def problem_uncertainty(pairs, n_problems: int, reported: np.ndarray, lam_p: int, k_p: int,
                        lam_q: np.ndarray, level: float = 0.9) -> dict:
    """Posterior summaries per problem from a fit's scored pairs.

    ``pairs``: :attr:`raylc.dolce.cells.CellFit.pairs_` (problem index, lambda, k, loglik, one
    row per scored pair), or a list of them, one per EM start (the same rows; the posterior
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
    post, lse = zip(*(_softmax(np.asarray(r["loglik"], dtype=np.float64), p, P) for r in runs))
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

