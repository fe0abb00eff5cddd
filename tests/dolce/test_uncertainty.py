"""Per-problem uncertainty of the DOLCE fit (issue 17 items 1, 2): the posterior over the
candidate pairs against a per-problem reference written here, its calibration on data drawn
from the model (the category shares built from it: tests/dolce/test_shares.py)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from dolce_reference import (
    BOUND_BINS,
    _bounded_posterior,
    _hypotheses_posterior,
    bayes_frame,
    calibration_frame,
    reliability,
    simulate_cow_task,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.dolce.categories import CATEGORIES
from raylc.dolce.cells import UNCERTAINTY_SCHEMA, CellStats
from raylc.dolce.cow import COWFit
from raylc.dolce.fit import DolceFit
from raylc.dolce.options import FitOptions
from raylc.dolce.uncertainty import (
    BEYOND,
    DIRICHLET_ALPHA,
    OPEN,
    class_likelihoods,
    dirichlet_mle,
    gibbs_classes,
    ladder_bucket,
    log_dirichlet_multinomial,
    log_pair_prior,
    problem_uncertainty,
)


def _category(lam, k, lam_p, k_p, lam_q):  # Figure 1, restated
    if lam == 0:
        return "I"
    if lam > lam_q:
        return "V"
    if lam > lam_p:
        return "IV"
    return "II" if k > k_p else "III"


def _prior(rows):
    """p(lambda, k) of one problem's pairs, in plain Python: uniform over the lambdas, then over
    the k at lambda."""
    lams = {lam for lam, _, _ in rows}
    n_k = {lam: sum(1 for a, _, _ in rows if a == lam) for lam in lams}
    return [1.0 / len(lams) / n_k[lam] for lam, _, _ in rows]


def _bucket(lam):
    """The largest of 0, 1, 2, 5, 10, 20, 50, ... at most lam, by listing the ladder."""
    ladder = [0] + [d * 10**e for e in range(19) for d in (1, 2, 5)]
    return max(v for v in ladder if v <= lam)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**17))
def test_ladder_bucket_is_the_next_smaller_ladder_length(lam):
    assert int(ladder_bucket(np.array([lam]))[0]) == _bucket(lam)


def _class_reference(pairs, P, lam_p, k_p, lam_q):
    """Per problem, in plain Python: {class: (log sum_pairs p(lambda, k | g) exp l, category masses
    within the class)}, p(. | g) uniform over the class's lambdas then the k at each; the class
    of lambda is its ladder bucket up to max C, one class above."""
    out = []
    for i in range(P):
        rows = [(lam, k, ll) for p, lam, k, ll in zip(*pairs) if p == i]
        classes: dict[int, list] = {}
        for lam, k, ll in rows:
            classes.setdefault(_bucket(lam) if lam <= lam_q[i] else BEYOND, []).append((lam, k, ll))
        got = {}
        for g, members in classes.items():
            top = max(ll for _, _, ll in members)
            w = [pr * math.exp(ll - top) for pr, (_, _, ll) in zip(_prior(members), members)]
            z = sum(w)
            cats = {c: 0.0 for c in CATEGORIES}
            for (lam, k, _), x in zip(members, w):
                cats[_category(lam, k, lam_p, k_p, lam_q[i])] += x / z
            got[g] = (top + math.log(z), [cats[c] for c in CATEGORIES])
        out.append(got)
    return out


@st.composite
def _fits(draw):
    P = draw(st.integers(1, 4))
    lam_p = k_p = draw(st.sampled_from([1, 2, 5]))
    problem, lam, k, ll, lam_q = [], [], [], [], []
    for i in range(P):
        L = draw(st.integers(12, 40))
        q = draw(st.integers(1, L - 1))
        lam_q.append(q)
        cands = sorted({0, q + 1, L, *draw(st.lists(st.integers(1, q), min_size=1, max_size=4))})
        for a in cands:
            for b in (c for c in cands if c >= 1 and c * a <= L):
                problem.append(i)
                lam.append(a)
                k.append(b)
                ll.append(draw(st.floats(-60.0, 0.0)))
    reported = [draw(st.sampled_from(CATEGORIES)) for _ in range(P)]
    pairs = (np.array(problem), np.array(lam), np.array(k), np.array(ll))
    return pairs, P, reported, lam_p, k_p, np.array(lam_q), draw(st.sampled_from([0.5, 0.9, 0.95]))


@settings(max_examples=150, deadline=None)
@given(_fits())
def test_class_likelihoods_equal_a_per_problem_reference(case):
    pairs, P, _, lam_p, k_p, lam_q, _ = case
    got = class_likelihoods([dict(zip(("problem", "lam", "k", "loglik"), pairs))], P, lam_p, k_p, lam_q)
    classes = list(got["classes"])
    for i, ref in enumerate(_class_reference(pairs, P, lam_p, k_p, lam_q)):
        assert {classes[g] for g in np.flatnonzero(np.isfinite(got["L"][i]))} == set(ref)
        for g, (L, q) in ref.items():
            assert got["L"][i, classes.index(g)] == pytest.approx(L, abs=1e-9)
            assert got["q"][i, classes.index(g)] == pytest.approx(q, abs=1e-12)


def _exact_hierarchy(L, q, a0):
    """Every assignment of classes to problems, pi integrated out in closed form:
    p(g | x) prop. to prod_i exp L[i, g_i] x Gamma(G a0) / Gamma(P + G a0) prod_g Gamma(n_g + a0) / Gamma(a0);
    returns the class marginals (P, G) and the pmf of each category's count (5, P + 1)."""
    import itertools

    P, G = L.shape
    marg = np.zeros((P, G))
    pmf = np.zeros((q.shape[2], P + 1))
    total = 0.0
    for gs in itertools.product(range(G), repeat=P):
        like = sum(L[i, g] for i, g in enumerate(gs))
        if not np.isfinite(like):
            continue
        n = np.bincount(gs, minlength=G)
        w = math.exp(like + sum(math.lgamma(x + a0) - math.lgamma(a0) for x in n))
        total += w
        for i, g in enumerate(gs):
            marg[i, g] += w
        # each problem's category given its class, independently: convolve the per-problem pmfs
        for c in range(q.shape[2]):
            dist = np.zeros(P + 1)
            dist[0] = 1.0
            for i, g in enumerate(gs):
                dist = dist * (1 - q[i, g, c]) + np.r_[0.0, dist[:-1]] * q[i, g, c]
            pmf[c] += w * dist
    return marg / total, pmf / total


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(2, 3), st.randoms(use_true_random=False))
def test_the_gibbs_sampler_matches_the_exact_hierarchical_posterior(P, G, rnd):
    """Class marginals and the category counts' distribution of :func:`gibbs_classes` against the
    closed form over every assignment (pi integrated out), within Monte Carlo error."""
    rng = np.random.default_rng(rnd.randrange(2**32))
    L = rng.normal(0.0, 1.5, (P, G))
    L[rng.random((P, G)) < 0.2] = -np.inf
    L[np.arange(P), rng.integers(0, G, P)] = 0.0  # every problem keeps a class
    q = rng.dirichlet(np.ones(5), (P, G))
    marg, pmf = _exact_hierarchy(L, q, 0.5)
    post, draws = gibbs_classes(L, q, 0.5, sweeps=20000, burn=500, seed=rnd.randrange(100))
    assert post == pytest.approx(marg, abs=0.03)
    for c in range(5):
        got = np.bincount(draws[:, c], minlength=P + 1) / draws.shape[0]
        assert np.abs(got - pmf[c]).sum() <= 0.06


def test_a_hand_worked_problem():
    """Candidates 0, 2, 5, 6 (max C = 5), one k each, each its own class: one problem alone has
    E[pi_g] = 1/4, so its posterior is its likelihood normalised: 0.04, 0.62, 0.30, 0.04 -> the
    90% set is {2, 5}: lambda in [1, 5] (1 = one above the candidate 0 below 2); at 99% the set
    reaches 6 > max C and the interval is open."""
    ll = np.log([0.04, 0.62, 0.30, 0.04])
    pairs = {"problem": np.zeros(4, dtype=int), "lam": np.array([0, 2, 5, 6]), "k": np.ones(4, dtype=int), "loglik": ll}
    u = problem_uncertainty(pairs, 1, 2, 2, np.array([5]), level=0.9)
    assert u["proba"][0] == pytest.approx([0.04, 0.0, 0.62, 0.30, 0.04], abs=0.04)  # Monte Carlo sd 0.01
    # reported: the most probable category (III) and its most probable pair (lambda 2)
    assert u["category"][0] == 2 and u["confidence"][0] == u["proba"][0, 2] == u["proba"][0].max()
    assert u["pair"][0] == 1
    assert (u["lam_low"][0], u["lam_high"][0]) == (1, 5)
    u = problem_uncertainty(pairs, 1, 2, 2, np.array([5]), level=0.99)
    assert (u["lam_low"][0], u["lam_high"][0]) == (0, OPEN)


def test_problems_borrow_the_tasks_lambda_distribution():
    """Forty problems clearly at lambda = 2 and one that cannot tell 2 from 20: the task's
    distribution puts the undecided problem at 2 (40.5 / 41 under pi's posterior), where a
    prior fixed per problem would say 1/2; the shares' draws move with it."""
    P = 41
    problem = np.repeat(np.arange(P), 2)
    lam = np.tile([2, 20], P)
    ll = np.tile([0.0, -30.0], P)
    ll[-2:] = 0.0  # the last problem: both fit alike
    pairs = {"problem": problem, "lam": lam, "k": np.ones(2 * P, dtype=int), "loglik": ll}
    u = problem_uncertainty(pairs, P, 5, 5, np.full(P, 50))
    assert u["proba"][-1, 2] == pytest.approx(40.5 / 41, abs=0.02)  # III (lambda 2 <= lam_p 5)
    assert u["share_draws"].sum(axis=1).tolist() == [P] * u["share_draws"].shape[0]
    again = problem_uncertainty(pairs, P, 5, 5, np.full(P, 50))
    assert np.array_equal(u["share_draws"], again["share_draws"])  # seeded: the same numbers


def _meets_acceptance_1(frame: pl.DataFrame) -> None:
    table, ece = reliability(frame)
    sure = frame.filter(pl.col("confidence") >= 0.9)
    assert ece <= 0.05, table
    assert sure.height >= 0.70 * frame.height and sure["right"].mean() >= 0.95
    assert frame["covered"].mean() >= 0.88


@pytest.mark.parametrize(("rho_max", "seeds"), [pytest.param(0.1, range(5), marks=pytest.mark.slow),
                                                pytest.param(0.2, range(5), marks=pytest.mark.slow),
                                                (0.1, range(10, 15))])
def test_calibrated_on_cow_data_drawn_from_the_model(rho_max, seeds):
    """Issue 17 acceptance 1 on 5 seeds x 150 problems (every span): ECE <= 0.05, at least 70%
    of problems at confidence >= 0.9 and at least 95% of those right, the 90% lambda interval
    covering the planted lambda for at least 88%. Measured (issue 29's hierarchical rule;
    calibration_frame, 2026-11-28): rho_max 0.1 seeds 10-14: ECE 0.007, 0.972, 1.000, 1.000;
    rho_max 0.2 seeds 0-4: 0.010, 0.961, 0.993, 0.993 (earlier rules: rho_max 0.1 seeds 0-4
    0.006, 0.893, 0.997, 0.997). The
    posterior of the paper's EM start alone missed on seeds 10-14 at rho_max 0.1 (ECE 0.059,
    0.943 right at >= 0.9; test below). CI runs the group of seeds 10-14, the one that needs the
    second start (the other two are ``slow``; RAYLC_SLOW=1 runs them)."""
    _meets_acceptance_1(calibration_frame("COW", seeds, 150, rho_max=rho_max))


@pytest.mark.slow  # the negative control of the seeds 10-14 group above, which fails without the second start
def test_the_papers_start_alone_is_over_confident(monkeypatch):
    """Why the posterior integrates over the EM's starts: from the paper's start alone it is
    over-confident after T = 10 steps (measured ECE 0.062 at rho_max 0.2, seeds 0-4), and at
    rho_max 0.1 still after 200 steps on seeds 10-14 (ECE 0.059), where that start's EM settles
    at a noise P(x|N) that is mostly IDK; with both starts it is calibrated there (above)."""
    monkeypatch.setattr(COWFit, "_posterior_starts", (0.5,))
    assert reliability(calibration_frame("COW", range(5), 150, uncertainty_steps=10))[1] > 0.06
    assert reliability(calibration_frame("COW", range(10, 15), 150, rho_max=0.1))[1] > 0.05


def test_the_starts_are_weighed_by_their_evidence():
    """Two EM starts scoring the same pairs: L_i(g) = log sum_s w_s exp L_i(g; theta_s), w_s
    proportional to prod_i (1/|G_i|) sum_g exp L_i(g; theta_s) (restated here: one k per lambda,
    one lambda per class); one start alone is its own."""
    base = {"problem": np.array([0, 0, 1, 1]), "lam": np.array([1, 2, 1, 2]), "k": np.ones(4, dtype=int)}
    ll = [np.log([0.2, 0.1, 0.3, 0.3]), np.log([0.05, 0.25, 0.1, 0.2])]
    got = class_likelihoods([base | {"loglik": x} for x in ll], 2, 1, 1, np.array([5, 5]))
    z = [np.array([x[0] + x[1], x[2] + x[3]]) / 2 for x in map(np.exp, ll)]  # per start and problem
    w = np.array([np.prod(zs) for zs in z])
    w /= w.sum()
    assert got["start_weights"] == pytest.approx(w)
    want = np.log(sum(ws * np.exp(x).reshape(2, 2) for ws, x in zip(w, ll)))
    assert got["L"] == pytest.approx(want)
    one = class_likelihoods([base | {"loglik": ll[1]}], 2, 1, 1, np.array([5, 5]))
    assert one["L"] == pytest.approx(ll[1].reshape(2, 2))
    with pytest.raises(ValueError, match="same pairs"):
        problem_uncertainty([base | {"loglik": ll[0]}, base | {"k": np.full(4, 2), "loglik": ll[1]}], 2,
                            1, 1, np.array([5, 5]))


def test_calibrated_on_pig_data_with_the_binned_likelihood():
    """Issue 17 acceptance 2 (ECE <= 0.08) on seeds 0-1 x 40 problems; seeds 0-19: README."""
    _, ece = reliability(calibration_frame("PIG", range(2), 40, likelihood="binned"))
    assert ece <= 0.08


def test_without_uncertainty_the_columns_are_null_and_the_intervals_wilson():
    obs, _, _ = simulate_cow_task(20, seed=2, take_every=4)
    none = DolceFit(FitOptions(scenario="cow", uncertainty="none")).fit(obs)
    assert none.problems_.select(list(UNCERTAINTY_SCHEMA)).null_count().row(0) == (none.problems_.height,) * 8
    n = none.problems_.height
    for c in CATEGORIES:  # the Wilson interval of the count share (categories.wilson)
        k = int((none.problems_["category"] == c).sum())
        lo, hi = none.tasks_[f"share_{c}_lo"][0], none.tasks_[f"share_{c}_hi"][0]
        assert lo <= k / n <= hi and (k > 0 or lo == 0.0)
    post = DolceFit(FitOptions(scenario="cow")).fit(obs)
    assert post.problems_["confidence"].is_between(0.0, 1.0).all()
    assert post.problems_.select(pl.sum_horizontal(f"p_{c}" for c in CATEGORIES)).to_series().to_numpy() == \
        pytest.approx(np.ones(post.problems_.height))
    # the same point fit; the posterior chooses the reported pair (and so lam, k, category, loglik)
    reported = [*UNCERTAINTY_SCHEMA, "lam", "k", "category", "loglik"]
    assert post.problems_.drop(reported).equals(none.problems_.drop(reported))


def test_the_posterior_runs_its_own_em_from_each_start():
    """The posterior's EM runs (issue 29) pick step (b)'s pair by prior x marginal likelihood, so
    they are never the point fit itself: each start runs its share of uncertainty_steps, or to
    the fit's tolerance; the point fit's nuisance parameters stay its own."""
    obs, _, _ = simulate_cow_task(10, seed=3, take_every=6)
    fit = COWFit(n_steps=30, uncertainty_steps=40)
    fit.fit(obs)
    again = COWFit(n_steps=30).fit(obs)
    stats = fit.cell_stats(obs)
    runs = fit._posterior_fits(stats)
    assert [(r._em_start, r.n_iter_, r._marginal_argmax) for r in runs] == [(0.5, 20, True), (0.1, 20, True)]
    assert all(r is not fit for r in runs) and not fit._marginal_argmax
    assert np.array_equal(fit.prior_oracle_, again.prior_oracle_) and np.array_equal(fit.noise_, again.noise_)
    tol = COWFit(tol=1e-6, uncertainty_steps=40).fit(obs)
    assert all(r.tol == tol.tol and r is not tol for r in tol._posterior_fits(stats))


# ------------------------------------------------------------------ issue 29: the rule and its guard

@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2]), max_size=40), st.randoms(use_true_random=False),
       st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.tuples(*[st.floats(0.01, 50.0)] * 3)))
def test_the_dirichlet_multinomial_is_the_polya_urn(seq, rnd, a):
    """log Gamma(A) - log Gamma(n + A) + sum_x [log Gamma(n_x + a_x) - log Gamma(a_x)] against the
    sequential predictive of Dirichlet(a) (an urn: P(x_t) = (n_x before t + a_x) / (t + A)), in
    any order, for a symmetric and an asymmetric a."""
    rnd.shuffle(seq)
    av = np.broadcast_to(np.asarray(a, dtype=float), (3,))
    seen, brute = [0, 0, 0], 0.0
    for t, x in enumerate(seq):
        brute += math.log((seen[x] + av[x]) / (t + av.sum()))
        seen[x] += 1
    assert log_dirichlet_multinomial(np.array(seen), a) == pytest.approx(brute, abs=1e-9)
    if a == DIRICHLET_ALPHA:
        assert log_dirichlet_multinomial(np.array(seen)) == pytest.approx(brute, abs=1e-9)


def test_the_tasks_dirichlet_below_lambda_is_its_maximum_marginal_likelihood():
    """:func:`dirichlet_mle` recovers a Dirichlet-multinomial's a from 3,000 problems (30 counts
    each) and is a maximum: no step of 5% in any direction raises the summed marginal; rows
    without counts are left out; no counts at all give None."""
    rng = np.random.default_rng(7)
    truth = np.array([0.4, 1.5, 20.0])
    n = np.array([rng.multinomial(30, rng.dirichlet(truth)) for _ in range(3000)], dtype=float)
    got = dirichlet_mle(np.vstack([n, np.zeros((5, 3))]))
    assert got == pytest.approx(truth, rel=0.25)
    best = log_dirichlet_multinomial(n, got).sum()
    for d in np.vstack([np.eye(3), -np.eye(3)]):
        assert log_dirichlet_multinomial(n, got * np.exp(0.05 * d)).sum() <= best + 1e-6
    assert dirichlet_mle(np.zeros((4, 3))) is None


@settings(max_examples=100, deadline=None)
@given(_fits())
def test_the_pair_prior_is_uniform_over_lambda_then_k(case):
    (problem, lam, k, ll), P, _, _, _, lam_q, _ = case
    got = np.exp(log_pair_prior(problem, lam, P))
    for i in range(P):
        rows = [(a, b, 0.0) for p, a, b in zip(problem, lam, k) if p == i]
        assert got[problem == i] == pytest.approx(_prior(rows), rel=1e-12)
    assert np.bincount(problem, weights=got, minlength=P) == pytest.approx(np.ones(P))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2), st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3), st.integers(0, 4)),
                                   min_size=1, max_size=6))
def test_the_cow_pairs_carry_their_counts_below_lambda_and_the_lambda0_profile(seed, cells):
    """``below_n`` counts the outcomes with C < lambda but a right one at C = 0 (with q fitted the
    oracle never answers closed-book right under lambda >= 1); ``below_ll`` is their plug-in term and
    ``loglik`` - ``below_ll`` does not depend on the counts below; at lambda = 0 ``profile_ll``
    is the objective at its best P_i(O) (closed form against a grid, with the fit's P(x|N))."""
    rng = np.random.default_rng(seed)
    L, ladder = 30, (0, 2, 5, 10, 30)
    problem, C, x = [], [], []
    for i, (n1, n0, ni) in enumerate(cells):
        for c in ladder:
            out = [1] * (n1 + (c == 30)) + [0] * n0 + [2] * ni
            problem += [i] * len(out)
            C += [c] * len(out)
            x += list(rng.permutation(out))
    x = np.array(x)
    stats = CellStats(np.array(problem), np.full(len(x), L), np.array(C), (x == 1) * 1.0, (x == 0) * 1.0,
                      (x == 2) * 1.0)
    fit = COWFit(n_steps=3)
    fit._marginal_argmax = True
    fit.fit_stats(stats)
    pr = fit.pairs_
    for j in range(pr["problem"].size):
        sel = (np.array(problem) == pr["problem"][j]) & (np.array(C) < pr["lam"][j]) & ((np.array(C) > 0) | (x != 1))
        assert pr["below_n"][j] == pytest.approx([np.sum(x[sel] == o) for o in (1, 0, 2)])
    lam0 = np.flatnonzero(pr["lam"] == 0)
    grid = np.linspace(0.0, 1.0, 20001)[:, None]
    for j in lam0:
        sel = np.array(problem) == pr["problem"][j]
        n = np.array([np.sum(x[sel] == o) for o in (1, 0, 2)], dtype=float)
        nu = fit.noise_
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.stack([grid[:, 0] + (1 - grid[:, 0]) * nu[0], (1 - grid[:, 0]) * nu[1], (1 - grid[:, 0]) * nu[2]], 1)
            brute = np.where(n > 0, n * np.log(q), 0.0).sum(axis=1).max()
        assert brute - 1e-6 <= pr["profile_ll"][j] <= brute + 1e-3 * (1 + abs(brute))
        assert pr["profile_ll"][j] >= pr["loglik"][j] - 1e-9 * (1 + abs(pr["loglik"][j]))
    assert np.isnan(pr["profile_ll"][pr["lam"] > 0]).all()


def test_calibrated_on_fixed_copies_and_closed_book_problems():
    """Issue 29 guard, bounded: the "mix" generator (copies fixed per problem, 15% closed-book
    problems, IDK-heavy noise, take-every strides, L 50-1,000) on seeds 0-2 and the fixed-copy
    generator on seed 2, 100 problems each. Measured (the hierarchical rule, the chain over
    the copies for documents past the forward pass's budget): mix ECE 0.028, its closed-book
    problems reported in category I at mean confidence 0.983, fixed ECE 0.014 (seed 2; seeds 2-4:
    0.011; 0.033 without the chain).
    Before: a prior fixed per problem with a symmetric Dirichlet(1/2) below lambda gave mix ECE
    0.070 and fixed 0.010; the rule before that (prior uniform over pairs, P_nonpar plugged in)
    mix 0.18 with those problems at 0.16 (they tie with lambda > max C). 5 x 150 problems:
    tests/benchmarks/calibration.py."""
    mix = calibration_frame("COW", range(3), 100, generator="mix")
    closed = mix.filter((pl.col("truth") == "I") & (pl.col("category") == "I"))
    assert closed.height >= 20 and closed["confidence"].mean() >= 0.8
    fixed = calibration_frame("COW", [2], 100, generator="fixed")
    for frame, bound in ((mix, 0.05), (fixed, 0.05)):
        table, ece = reliability(frame)
        assert ece <= bound, table
        assert frame["covered"].mean() >= 0.88


@pytest.mark.parametrize("kind", ["COW", "PIG"])
def test_the_reported_pair_is_the_most_probable_of_the_most_probable_category(kind):
    """A fit with the posterior reports the most probable category, its probability as the
    confidence, and the most probable (lambda, k) within it; the objective is the point fit's at
    that pair."""
    from pig_reference import simulate_pig_task

    from raylc.dolce.categories import assign_categories
    from raylc.dolce.pig import PIGFit

    if kind == "COW":
        obs, _, _ = simulate_cow_task(40, 3, L_range=(40, 120))
        fit = COWFit(uncertainty_steps=40).fit(obs)
    else:
        obs, _ = simulate_pig_task(12, 3, rho_max=0.2, noise_kind="uniform")
        fit = PIGFit(uncertainty_steps=20, likelihood="binned").fit(obs)
    u = fit.uncertainty_
    assert np.array_equal(u["category"], u["proba"].argmax(axis=1))
    assert fit.category_.tolist() == [CATEGORIES[c] for c in u["category"]]
    assert np.array_equal(fit.category_, assign_categories(fit.lam_, fit.k_, fit.lam_p_, fit.k_p_, fit.lam_q_))
    pairs = fit.pairs_
    for i in range(fit.problems_.size):
        rows = np.flatnonzero(pairs["problem"] == i)
        assert u["pair"][i] in rows
        assert (pairs["lam"][u["pair"][i]], pairs["k"][u["pair"][i]]) == (fit.lam_[i], fit.k_[i])
        assert pairs["loglik"][u["pair"][i]] == fit.loglik_[i]


def test_calibrated_on_a_probe_that_answers_wrongly_without_its_evidence():
    """Guard, bounded: the "wrong 1" generator (copies fixed, 15% closed-book problems, the
    probe answers wrongly instead of IDK on a span missing the copies), seed 0 x 80 problems.
    Measured: fitted not-covered outcome, accuracy 0.988, ECE 0.012 (seeds 0-1 alike); Eq. 3's IDK
    (``not_covered="idk"``; seeds 0-1, before the chain), accuracy 0.775, ECE 0.205."""
    table, ece = reliability(frame := calibration_frame("COW", range(1), 80, generator="wrong 1"))
    assert ece <= 0.03 and frame["right"].mean() >= 0.95, table


def test_short_documents_with_every_length_sampled_are_decided():
    """Guard, bounded: the same documents with every span length sampled ("short every"), seeds
    2-3 x 100 problems, reach confidence 0.9 for most problems and are right there (the
    benchmark's four groups: sure 0.836, right 0.995, ECE 0.024), where the exponential ladder
    leaves about a third of them below it (docs/dolce.md)."""
    frame = calibration_frame("COW", range(2, 4), 100, generator="short every")
    table, ece = reliability(frame)
    sure = frame.filter(pl.col("confidence") >= 0.9)
    assert sure.height >= 0.75 * frame.height and sure["right"].mean() >= 0.97 and ece <= 0.045, table


def test_calibrated_on_short_documents_and_short_of_the_bayes_optimal_bound():
    """Guard, bounded: the "short" generator (documents of 5-12 units, copies fixed, 15%
    closed-book problems), seeds 0-1 x 150 problems, where the posterior scores a document's
    spans under evidence that stays put (raylc/dolce/placement.py); measured 2026-11-29: ECE
    0.035, accuracy 0.880 (seeds 0-1 x 100: 0.043 and 0.900; with Eq. 3 alone, ``cow.BUDGET = 0``,
    0.053 and 0.820). ``bayes_frame``, the reference of tests/benchmarks/calibration_bound.py, on the
    same problems: with the generator's own priors it is calibrated and right at least as often
    (ECE 0.035, accuracy 0.907, sure 0.813 against raylc's 0.650); with P_i(O) uniform
    (``rho_prior=1``, sure 0.693) fewer problems reach confidence 0.9. It refuses documents it
    cannot enumerate."""
    fitted = calibration_frame("COW", range(2), 150, generator="short")
    table, ece = reliability(fitted)
    assert ece <= 0.045 and fitted["right"].mean() >= 0.86, table
    exact = bayes_frame("short", range(2), 150)
    vague = bayes_frame("short", range(2), 150, rho_prior=1.0)
    table, ece = reliability(exact)
    assert ece <= 0.045 and exact["right"].mean() >= fitted["right"].mean(), table
    assert (vague["confidence"] >= 0.9).sum() < (exact["confidence"] >= 0.9).sum()
    with pytest.raises(ValueError, match="L <= 16"):
        bayes_frame("fixed", range(1), 2)


def test_the_learned_reference_priors_are_their_empirical_bayes_fixed_points():
    """``bayes_frame(pairs="learned", rho_prior="learned")``'s EM on problems whose answer is
    known. Pairs: 80 problems decide for key a, 21 cannot tell a from b, one offers only b. With
    pseudo-count 1/2, pi_a = (0.5 + 80 + 21 pi_a) / 103, so pi_a = 80.5 / 82, the posterior of
    an undecided problem; the one-key problem stays on b. rho's two nodes: 70 problems sit on
    node 0, 30 on node 1 and one can sit on either (key a at node 0, b at node 1): the masses are
    0.7 and 0.3, and that problem's posterior follows them (0.5 each with the weights fixed)."""
    decided, undecided, only_b = np.array([[0.0], [-60.0]]), np.zeros((2, 1)), np.zeros((1, 1))
    post = _hypotheses_posterior([["a", "b"]] * 101 + [["b"]], [decided] * 80 + [undecided] * 21 + [only_b],
                                 np.zeros(1), learn_pairs=True, learn_rho=False)
    assert np.exp(post[90] - np.logaddexp(*post[90]))[0] == pytest.approx(80.5 / 82, abs=1e-5)
    assert post[-1].shape == (1,)
    node = {0: np.array([[0.0, -60.0]]), 1: np.array([[-60.0, 0.0]])}
    log_w = np.log([0.5, 0.5])
    either = np.array([[0.0, -60.0], [-60.0, 0.0]])  # key a only at node 0, key b only at node 1
    post = _hypotheses_posterior([["a"]] * 100 + [["a", "b"]], [node[0]] * 70 + [node[1]] * 30 + [either],
                                 log_w, learn_pairs=False, learn_rho=True)
    assert np.exp(post[-1] - np.logaddexp(*post[-1])) == pytest.approx([0.7, 0.3], abs=1e-4)
    fixed = _hypotheses_posterior([["a", "b"]], [either], log_w, learn_pairs=False, learn_rho=False)
    assert np.exp(fixed[0] - np.logaddexp(*fixed[0])) == pytest.approx([0.5, 0.5])


def test_the_bounded_reference_prior_takes_the_smallest_bound_that_holds_the_task():
    """``bayes_frame(rho_prior="bound")``: P_i(N) ~ U(0, r) with r of largest marginal likelihood.
    100 problems possible only at rho < 0.18: the evidence (bins below 0.18) / (bins below r) is
    largest at r = 0.2 of the grid. A problem whose key a needs rho = 0.5 and key b rho = 0.05
    (0.5 each under the uniform prior) is then on b."""
    mids = (np.arange(BOUND_BINS) + 0.5) / BOUND_BINS
    low = np.where(mids < 0.18, 0.0, -60.0)[None, :]
    a_or_b = np.where(np.isclose(mids[None, :], [[mids[30]], [mids[3]]]), 0.0, -60.0)  # a at 0.508, b at 0.058
    post = _bounded_posterior([["a"]] * 100 + [["a", "b"]], [low] * 100 + [a_or_b], None, False, False)
    assert np.exp(post[-1] - np.logaddexp(*post[-1])) == pytest.approx([0.0, 1.0], abs=1e-6)
    uniform = _hypotheses_posterior([["a", "b"]], [a_or_b], np.full(BOUND_BINS, -np.log(BOUND_BINS)), False, False)
    assert np.exp(uniform[0] - np.logaddexp(*uniform[0])) == pytest.approx([0.5, 0.5])
