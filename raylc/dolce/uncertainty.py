r"""Per-problem uncertainty of a DOLCE fit: a posterior over the candidate pairs (issues 17, 29).

Step (b) of Algorithms 1 and 2 scores every valid pair (lambda, k) of problem i's candidate set
(Section 4) by l_i(lambda, k) = sum_j log[P_ij(x_ij | O; lambda, k) P_i(O) + P(x_ij | N) P_i(N)]
(Eq. 1; Eq. 5 for PIG) and keeps the argmax. The posterior weighs every pair instead, and a
fit with it reports its most probable category and (lambda, k) in place of the paper's argmax
after T steps, with the confidence in them, and gives the category shares their intervals
(:mod:`raylc.dolce.shares`).

**P_nonpar integrated out** (COW). Below lambda (C_ij < lambda, Eq. 4) an observation's
probability is q(x) = P_nonpar,i(x | O; lambda) P_i(O) + P(x | N) P_i(N), one categorical over
x in {1, 0, IDK} shared by problem i's n = sum_x n_x observations below lambda. With P_nonpar
free, its plug-in fit sum_x n_x log q^(x) explains any counts: candidates with lambda > max C
put every partial observation there and tie with the truth. With a Dirichlet(a_1, a_0, a_IDK)
prior on q the counts' marginal likelihood is

    DirMult(n; a) = log Gamma(A) - log Gamma(n + A) + sum_x [log Gamma(n_x + a_x) - log Gamma(a_x)],  A = sum_x a_x

(one ordered sequence; the same for soft counts), and

    m_i(lambda, k) = l_i(lambda, k) - sum_x n_x log q^(x) + DirMult(n_1, n_0, n_IDK; a),

where the fit gives the plug-in part and the counts below lambda per pair (``below_ll``,
``below_n`` of ``CellFit.pairs_``); pairs without them keep m = l (PIG, whose non-parametric
part is one hit rate per (problem, C) cell shared by every candidate). The prior a is the
task's (empirical Bayes, :func:`dirichlet_mle`): in each step of the posterior's EM runs, the
Dirichlet-multinomial fitted by maximum marginal likelihood to the counts below lambda at every
problem's chosen pair, and used to score the next step (``below_prior`` of the pairs). What an
oracle does without its evidence is a property of the task and the probe (mostly "I don't
know"), so data below a long lambda cost what they cost any problem of the task. A fixed symmetric
a = 1/2 (the rule before) charged about log n nats to every candidate with n observations below
it, enough to pull problems planted at lambda = 5 to lambda <= 2 when the take-every spans of
C = 1, 2 were all IDK (the quickstart's category-III share 3 points high). At lambda = 0
(pi = 1 everywhere) P_i(O) takes its own best value (``profile_ll``, (n_1/n - P(1|N)) /
(1 - P(1|N)) clipped to [0, 1]) instead of the value the EM fitted for its chosen pair.

**Nuisance parameters.** The EM has more than one fixed point (from the paper's start
q_ij(N) = P_i(N) = 0.5 it often settles, on tasks with little noise, at a noise P(x|N) that is
mostly IDK, hundreds of nats below the fixed point from a low-noise start). It is therefore run
from each start s of ``CellFit._posterior_starts`` (COW: 0.5 and 0.1, ``uncertainty_steps``
shared out), its step (b) picking the pair of largest p(lambda, k) exp m_i
(:func:`log_pair_prior`: uniform over lambda, then k; ``CellFit._marginal_argmax``), and the
starts are mixed by their evidence under a uniform class prior (their evidences differ by tens
to thousands of nats, so in practice the better one is used).

**The task's lambda distribution** (hierarchical prior). A problem's category is read off its
lambda class g: lambda = 0, each length of the exponential ladder 0, 1, 2, 5, 10, .. (Section
4; a partial length off the ladder joins the ladder's next smaller length, so problems whose
observation lengths differ still share classes), or "beyond its max C" (the candidates
max C + 1 and L: the data only say lambda > max C). Within a class the prior is
uniform over the problem's candidate lambdas, then over the scored k at each
(:func:`class_likelihoods`). The classes are drawn from the task's distribution pi,

    g_i | pi ~ Categorical(pi) (likelihood 0 outside problem i's candidates),  pi ~ Dirichlet(a0, .., a0),  a0 = 1/2,

so a problem borrows from the others where its own data cannot decide, e.g. lambda = max C,
k = 1 (category IV) against lambda > max C (V), which differ only in whether one of a few
strided spans at max C hit the single copy. A prior fixed per problem (uniform over lambda, the
rule before) put a third of such a problem on IV whatever the task looked like, and the
quickstart's category-V share came out 3 points low at every size. The posterior is sampled by
Gibbs (:func:`gibbs_classes`: g_i given pi, pi given the g's; :data:`GIBBS_SWEEPS` sweeps after
:data:`GIBBS_BURN`, seeded, so the same fit gives the same numbers); p_i(g) is the mean over the
sweeps of its conditional (Rao-Blackwell), and each sweep also draws every problem's category,
so the shares' interval carries the dependence between problems that pi's uncertainty induces
(:mod:`raylc.dolce.shares`). Calibration per generator: ``tests/benchmarks/calibration.py``;
share coverage: ``tests/benchmarks/share_coverage.py`` (docs/figures.md). Summaries:

* ``category`` and ``confidence``: the most probable category (Figure 1) and its posterior
  mass: what a fit with the posterior reports, with the most probable (lambda, k) in it;
* ``p_I`` .. ``p_V``: the posterior mass of each category;
* ``lam_low``, ``lam_high``: the hull of the smallest set of candidate lambdas holding at least
  ``level`` of the lambda-marginal, widened down to one above the next smaller candidate (the
  data cannot tell lambda apart between two candidates). ``lam_high`` is open (None) when the
  set holds a lambda above max C: the data then only say lambda > max C;
* ``share_draws``: (sweeps, 5) category counts of the task's problems, one row per sweep.
"""

from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln

from raylc.dolce.categories import CATEGORIES, category_codes

__all__ = ["OPEN", "class_likelihoods", "dirichlet_mle", "gibbs_classes", "ladder_bucket", "lambda_classes",
           "log_dirichlet_multinomial", "log_pair_prior", "marginal_from_parts", "marginal_loglik",
           "problem_uncertainty"]

#: The symmetric Dirichlet(a, a, a) below lambda where no task-level prior is fitted: the EM's
#: step (b) in the posterior runs (``CellFit._marginal_argmax``) and tasks without any count
#: below lambda (Jeffreys' 1/2).
DIRICHLET_ALPHA = 0.5
#: a0 of the Dirichlet over the task's lambda classes (Jeffreys' 1/2; module docstring).
CLASS_ALPHA = 0.5
#: Gibbs sweeps kept, sweeps discarded first, and the generator's seed (:func:`gibbs_classes`).
GIBBS_SWEEPS = 2000
GIBBS_BURN = 500
GIBBS_SEED = 0

#: ``lam_high`` of an interval open at the top (lambda > max C), before it becomes a null.
OPEN = -1
#: The class key of the candidates above max C (module docstring).
BEYOND = -1


def _segment_max(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, -np.inf)
    np.maximum.at(out, owner, values)
    return out


def _segment_logsumexp(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """log sum exp of ``values`` per owner (-inf for an owner without a finite value)."""
    top = _segment_max(values, owner, n)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return top + np.log(np.bincount(owner, weights=np.exp(values - top[owner]), minlength=n))


def log_dirichlet_multinomial(n: np.ndarray, alpha=None) -> np.ndarray:
    """log Gamma(A) - log Gamma(n + A) + sum_x [log Gamma(n_x + a_x) - log Gamma(a_x)], A = sum_x a_x:
    the marginal likelihood of one ordered sequence with counts n_x (last axis, K outcomes; soft
    counts allowed) under a categorical with a Dirichlet(a) prior; ``alpha`` a scalar (symmetric)
    or K values (default :data:`DIRICHLET_ALPHA`); 0 for no observations."""
    n = np.asarray(n, dtype=np.float64)
    a = np.broadcast_to(np.asarray(DIRICHLET_ALPHA if alpha is None else alpha, dtype=np.float64), n.shape[-1:])
    return gammaln(a.sum()) - gammaln(n.sum(axis=-1) + a.sum()) + (gammaln(n + a) - gammaln(a)).sum(axis=-1)


def dirichlet_mle(n: np.ndarray, start=None) -> np.ndarray | None:
    """The task's Dirichlet a below lambda (module docstring): the maximum of sum_i DirMult(n_i; a)
    over the rows of ``n`` (counts of 1, 0, IDK below each problem's lambda) that hold any count,
    by L-BFGS-B on log a within [1e-3, 1e4] from ``start`` (default :data:`DIRICHLET_ALPHA`), with
    the gradient sum_i [psi(A) - psi(n_i + A) + psi(n_ix + a_x) - psi(a_x)] a_x. None without counts.
    scipy.optimize is imported here (about 0.3 s), not by every process that loads the fit."""
    from scipy.optimize import minimize

    n = np.asarray(n, dtype=np.float64)
    n = n[n.sum(axis=1) > 0]
    if n.shape[0] == 0:
        return None
    n, w = np.unique(n, axis=0, return_counts=True)  # rows repeat: each distinct one once, weighted
    rows, tot, wc = w.sum(), n.sum(axis=1), w[:, None]

    def loss(t):
        a = np.exp(t)
        A = a.sum()
        f = gammaln(A) * rows - w @ gammaln(tot + A) + (wc * (gammaln(n + a) - gammaln(a))).sum()
        g = (digamma(A) * rows - w @ digamma(tot + A) + (wc * (digamma(n + a) - digamma(a))).sum(axis=0)) * a
        return -f, -g

    t0 = np.log(np.full(n.shape[1], DIRICHLET_ALPHA) if start is None else np.asarray(start, dtype=np.float64))
    res = minimize(loss, t0, jac=True, method="L-BFGS-B", bounds=[(np.log(1e-3), np.log(1e4))] * n.shape[1])
    return np.exp(res.x)


def log_pair_prior(p: np.ndarray, lam: np.ndarray, P: int) -> np.ndarray:
    """log p(lambda, k) per scored pair: uniform over the candidate lambdas of its group ``p``
    (of ``P``; a problem in the EM's step (b) of the posterior runs, a (problem, lambda class) in
    :func:`class_likelihoods`), then uniform over the scored k at lambda."""
    p, lam = np.asarray(p, dtype=np.int64), np.asarray(lam, dtype=np.int64)
    _, pl_of, n_k = np.unique(p * (int(lam.max(initial=0)) + 1) + lam, return_inverse=True, return_counts=True)
    pl_of = pl_of.reshape(-1)
    n_lam = np.bincount(p[np.unique(pl_of, return_index=True)[1]], minlength=P)  # lambdas per problem
    return -np.log(n_lam[p]) - np.log(n_k[pl_of])


def marginal_from_parts(ll, below_ll, dm, profile=None) -> np.ndarray:
    """m = l - (the plug-in part below lambda) + DirMult(the counts below lambda), per pair (module
    docstring): -inf where the plug-in part is -inf, and at lambda = 0 the larger of that and the
    objective at its own best P_i(O) (``profile``, NaN elsewhere)."""
    with np.errstate(invalid="ignore"):
        m = np.asarray(ll, dtype=np.float64) - np.asarray(below_ll, dtype=np.float64) + dm
    m = np.where(np.isnan(m), -np.inf, m)
    return m if profile is None else np.fmax(m, profile)


def marginal_loglik(pairs: dict) -> np.ndarray:
    """m_i(lambda, k) per pair (:func:`marginal_from_parts`) from a run's pairs: the counts below
    lambda under the run's ``below_prior`` (default :data:`DIRICHLET_ALPHA`), if the pairs carry
    them (``below_ll``, ``below_n``, ``profile_ll``); else the objective itself; and where the
    pairs carry ``placement_ll`` (the marginal under evidence that stays put,
    :mod:`raylc.dolce.placement`; NaN where not computed), that."""
    ll = np.asarray(pairs["loglik"], dtype=np.float64)
    if "below_n" not in pairs:
        return ll
    dm = log_dirichlet_multinomial(pairs["below_n"], pairs.get("below_prior"))
    m = marginal_from_parts(ll, pairs["below_ll"], dm, pairs.get("profile_ll"))
    fixed = pairs.get("placement_ll")
    if fixed is None:
        return m
    return np.where(np.isnan(fixed), m, fixed)


def ladder_bucket(lam: np.ndarray) -> np.ndarray:
    """The largest value of the exponential ladder 0, 1, 2, 5, 10, 20, 50, .. (Section 4) at most
    ``lam``: lambda itself on that ladder, a shared bucket for lengths off it."""
    lam = np.asarray(lam, dtype=np.int64)
    x = np.maximum(lam, 1)
    e = np.floor(np.log10(x)).astype(np.int64)
    e = np.where(10 ** (e + 1) <= x, e + 1, np.where(10**e > x, e - 1, e))  # log10's rounding
    head = x // 10**e
    return np.where(lam <= 0, 0, np.where(head >= 5, 5, np.where(head >= 2, 2, 1)) * 10**e)


def lambda_classes(p: np.ndarray, lam: np.ndarray, lam_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class keys, class index per pair): for lambda <= max C its bucket on the exponential
    ladder (:func:`ladder_bucket`: lambda itself for the ladder's lengths, so that problems of
    other L or with other partial lengths still share classes), :data:`BEYOND` above max C."""
    key = np.where(lam > np.asarray(lam_q)[p], BEYOND, ladder_bucket(lam))
    classes, g = np.unique(key, return_inverse=True)
    return classes, g.reshape(-1)


def class_likelihoods(runs: list, n_problems: int, lam_p: int, k_p: int, lam_q: np.ndarray) -> dict:
    """Per problem and lambda class (:func:`lambda_classes`): ``L`` (P, G), log sum over the class's
    pairs of p(lambda, k | g) exp m_i(lambda, k), p(. | g) uniform over the problem's lambdas in
    the class then over the k at each; ``q`` (P, G, 5), the category masses within the class;
    ``within`` (per pair), its mass within its class; ``pair_class`` (per pair); ``classes``;
    ``start_weights`` (per run).
    Several EM starts (``runs``) are mixed by their evidence under a uniform class prior
    (module docstring). L = -inf where the problem has no pair in the class."""
    P = int(n_problems)
    p, lam, k = (np.asarray(runs[0][c]) for c in ("problem", "lam", "k"))
    classes, g = lambda_classes(p, lam, lam_q)
    G = classes.size
    pg = p * G + g
    log_within = log_pair_prior(pg, lam, P * G)  # uniform over lambda, then k, within each (problem, class)
    xs = [marginal_loglik(r) + log_within for r in runs]
    # a problem every start rules out everywhere keeps the prior alone
    dead = ~np.isin(np.arange(P), p[np.isfinite(np.array(xs)).any(axis=0)])
    xs = [np.where(dead[p], log_within, x) for x in xs]
    Ls = np.array([_segment_logsumexp(x, pg, P * G) for x in xs])  # (S, P * G)
    present = np.bincount(pg, minlength=P * G).reshape(P, G) > 0
    with np.errstate(divide="ignore"):
        per = np.logaddexp.reduce(Ls.reshape(len(runs), P, G), axis=2) - np.log(present.sum(axis=1))
    evidence = np.where(np.isfinite(per), per, 0.0).sum(axis=1)
    ws = np.exp(evidence - evidence.max())
    ws /= ws.sum()
    with np.errstate(divide="ignore"):
        L = np.logaddexp.reduce(Ls + np.log(ws)[:, None], axis=0)
    Lv = np.where(np.isfinite(L), L, 0.0)[pg]
    with np.errstate(divide="ignore"):  # a start of weight 0 adds exp(-inf) = 0; every exponent is <= 0
        within = sum(np.exp(lw + x - Lv) for lw, x in zip(np.log(ws), xs))
    cat = category_codes(lam, k, lam_p, k_p, np.asarray(lam_q)[p])
    q = np.bincount(pg * len(CATEGORIES) + cat, weights=within, minlength=P * G * len(CATEGORIES))
    q = q.reshape(P, G, len(CATEGORIES))
    mass = q.sum(axis=2, keepdims=True)
    q = q / np.where(mass > 0, mass, 1.0)  # sums of 1 up to rounding made exact
    return dict(L=L.reshape(P, G), q=q, within=within, pair_class=g, classes=classes,
                start_weights=ws)


def gibbs_classes(L: np.ndarray, q: np.ndarray, a0: float = CLASS_ALPHA, sweeps: int = GIBBS_SWEEPS,
                  burn: int = GIBBS_BURN, seed: int = GIBBS_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Gibbs sampler of the hierarchical model (module docstring): g_i | pi, x prop. to
    pi_g exp L[i, g]; pi | g ~ Dirichlet(a0 + class counts). Returns the Rao-Blackwell class
    posterior (P, G), the mean over the kept sweeps of each sweep's conditional, and the
    category counts (sweeps, 5) of each kept sweep (every problem's category drawn from
    ``q[i, g_i]``)."""
    P, G = L.shape
    rng = np.random.default_rng(seed)
    top = np.max(L, axis=1, keepdims=True)
    like = np.exp(L - np.where(np.isfinite(top), top, 0.0))  # 0 outside the problem's classes
    qc = np.cumsum(q, axis=2)
    qc /= np.where(qc[:, :, -1:] > 0, qc[:, :, -1:], 1.0)
    rows = np.arange(P)
    pi = np.full(G, 1.0 / G)
    r_sum = np.zeros((P, G))
    draws = np.zeros((sweeps, q.shape[2]), dtype=np.int64)
    for t in range(burn + sweeps):
        r = like * np.maximum(pi, np.finfo(float).tiny)
        r /= r.sum(axis=1, keepdims=True)
        z = np.minimum((np.cumsum(r, axis=1) < rng.random(P)[:, None]).sum(axis=1), G - 1)
        pi = rng.dirichlet(a0 + np.bincount(z, minlength=G))
        if t >= burn:
            r_sum += r
            c = np.minimum((qc[rows, z] < rng.random(P)[:, None]).sum(axis=1), q.shape[2] - 1)
            draws[t - burn] = np.bincount(c, minlength=q.shape[2])
    return r_sum / sweeps, draws


def problem_uncertainty(pairs, n_problems: int, lam_p: int, k_p: int, lam_q: np.ndarray, level: float = 0.9,
                        seed: int = GIBBS_SEED) -> dict:
    """Posterior summaries per problem, its reported category and pair, and the task's share draws,
    from a fit's scored pairs.

    ``pairs``: :attr:`raylc.dolce.cells.CellFit.pairs_` (problem index, lambda, k, loglik, one
    row per scored pair; optionally ``below_ll`` and ``below_n`` (V, 3) for the marginal below
    lambda), or a list of them, one per EM start (the same rows); ``lam_p``, ``k_p``: the task's
    thresholds; ``lam_q``: max C per problem. Returns ``proba`` (P, 5, in :data:`CATEGORIES`
    order); ``category`` (P,, codes): the most probable category (ties: the first), the one a
    fit reports; ``confidence`` (P,): its probability; ``pair`` (P,): the row of the most probable
    pair within that category (ties: the first row), whose lambda and k a fit reports;
    ``lam_low`` and ``lam_high`` (P,, int64; ``lam_high`` = :data:`OPEN` when open at the top) and
    ``share_draws`` (sweeps, 5: category counts; module docstring)."""
    if not 0.0 < level < 1.0:
        raise ValueError("level must lie in (0, 1)")
    runs = [pairs] if isinstance(pairs, dict) else list(pairs)
    p, lam, k = (np.asarray(runs[0][c]) for c in ("problem", "lam", "k"))
    if any(not all(np.array_equal(r[c], runs[0][c]) for c in ("problem", "lam", "k")) for r in runs[1:]):
        raise ValueError("the EM starts must score the same pairs")
    P = int(n_problems)
    lam_q = np.asarray(lam_q)
    if p.size == 0 or np.bincount(p, minlength=P).min() == 0:
        raise ValueError("every problem needs at least one scored pair")
    cl = class_likelihoods(runs, P, lam_p, k_p, lam_q)
    post, draws = gibbs_classes(cl["L"], cl["q"], seed=seed)
    proba = np.clip(np.einsum("pg,pgc->pc", post, cl["q"]), 0.0, 1.0)
    w = post[p, cl["pair_class"]] * cl["within"]  # per pair
    category = np.argmax(proba, axis=1)
    confidence = proba[np.arange(P), category]
    # the reported pair: the most probable of the reported category (rows are sorted by problem)
    in_cat = category_codes(lam, k, lam_p, k_p, lam_q[p]) == category[p]
    score = np.where(in_cat, w, -1.0)
    best = _segment_max(score, p, P)
    row = np.arange(p.size)
    pair = np.full(P, p.size)
    np.minimum.at(pair, p, np.where(score >= best[p], row, p.size))

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
    return dict(category=category, confidence=confidence, proba=proba, pair=pair, lam_low=lam_low.astype(np.int64),
                lam_high=lam_high.astype(np.int64), share_draws=draws)

