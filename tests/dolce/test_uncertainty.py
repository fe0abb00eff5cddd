"""Per-problem uncertainty of the DOLCE fit (issue 17 items 1, 2): the posterior over the
candidate pairs against a per-problem reference written here, its calibration on data drawn
from the model (the category shares built from it: tests/dolce/test_shares.py)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from dolce_reference import calibration_frame, reliability, simulate_cow_task
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.dolce.categories import CATEGORIES
from raylc.dolce.cells import UNCERTAINTY_SCHEMA, CellStats
from raylc.dolce.cow import COWFit
from raylc.dolce.fit import DolceFit
from raylc.dolce.options import FitOptions
from raylc.dolce.uncertainty import (
    DIRICHLET_ALPHA,
    OPEN,
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


def _reference(pairs, P, reported, lam_p, k_p, lam_q, level):
    """One problem at a time, in plain Python: prior x likelihood normalized, category masses,
    the smallest lambda set by mass (ties: smaller lambda first) and its hull widened to the
    next smaller candidate."""
    out = []
    for i in range(P):
        rows = [(lam, k, ll) for p, lam, k, ll in zip(*pairs) if p == i]
        top = max(ll for _, _, ll in rows)
        w = [pr * math.exp(ll - top) for pr, (_, _, ll) in zip(_prior(rows), rows)]
        z = sum(w)
        w = [x / z for x in w]
        proba = {c: 0.0 for c in CATEGORIES}
        marg: dict[int, float] = {}
        for (lam, k, _), x in zip(rows, w):
            proba[_category(lam, k, lam_p, k_p, lam_q[i])] += x
            marg[lam] = marg.get(lam, 0.0) + x
        cands = sorted(marg)
        chosen, mass = [], 0.0
        for lam in sorted(cands, key=lambda v: (-round(marg[v], 12), v)):
            if mass >= level - 1e-12:
                break
            chosen.append(lam)
            mass += marg[lam]
        lo, hi = min(chosen), max(chosen)
        low = 0 if lo == 0 else cands[cands.index(lo) - 1] + 1
        high = OPEN if hi > lam_q[i] else hi
        out.append((proba[reported[i]], [proba[c] for c in CATEGORIES], low, high))
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
def test_posterior_summaries_equal_a_per_problem_reference(case):
    pairs, P, reported, lam_p, k_p, lam_q, level = case
    got = problem_uncertainty(dict(zip(("problem", "lam", "k", "loglik"), pairs)), P, np.array(reported), lam_p, k_p,
                              lam_q, level)
    for i, (conf, proba, low, high) in enumerate(_reference(pairs, P, reported, lam_p, k_p, lam_q, level)):
        assert got["confidence"][i] == pytest.approx(conf, abs=1e-12)
        assert got["proba"][i] == pytest.approx(proba, abs=1e-12)
        assert (got["lam_low"][i], got["lam_high"][i]) == (low, high)
    assert np.allclose(got["proba"].sum(axis=1), 1.0)


def test_a_hand_worked_problem():
    """Candidates 0, 2, 5, 6 (max C = 5), one k each: masses 0.05, 0.6, 0.3, 0.05 -> the 90%
    set is {2, 5}: lambda in [1, 5] (1 = one above the candidate 0 below 2); at 99% the set
    reaches 6 > max C and the interval is open."""
    ll = np.log([0.05, 0.6, 0.3, 0.05])
    pairs = {"problem": np.zeros(4, dtype=int), "lam": np.array([0, 2, 5, 6]), "k": np.ones(4, dtype=int), "loglik": ll}
    u = problem_uncertainty(pairs, 1, np.array(["III"]), 2, 2, np.array([5]), level=0.9)
    assert u["proba"][0] == pytest.approx([0.05, 0.0, 0.6, 0.3, 0.05])
    assert u["confidence"][0] == pytest.approx(0.6)
    assert (u["lam_low"][0], u["lam_high"][0]) == (1, 5)
    u = problem_uncertainty(pairs, 1, np.array(["III"]), 2, 2, np.array([5]), level=0.99)
    assert (u["lam_low"][0], u["lam_high"][0]) == (0, OPEN)


def _meets_acceptance_1(frame: pl.DataFrame) -> None:
    table, ece = reliability(frame)
    sure = frame.filter(pl.col("confidence") >= 0.9)
    assert ece <= 0.05, table
    assert sure.height >= 0.70 * frame.height and sure["right"].mean() >= 0.95
    assert frame["covered"].mean() >= 0.88


@pytest.mark.parametrize(("rho_max", "seeds"), [pytest.param(0.1, range(5), marks=pytest.mark.slow), (0.2, range(5)),
                                                (0.1, range(10, 15))])
def test_calibrated_on_cow_data_drawn_from_the_model(rho_max, seeds):
    """Issue 17 acceptance 1 on 5 seeds x 150 problems (every span): ECE <= 0.05, at least 70%
    of problems at confidence >= 0.9 and at least 95% of those right, the 90% lambda interval
    covering the planted lambda for at least 88%. Measured (issue 29's rule; calibration_frame):
    rho_max 0.1 seeds 0-4: ECE 0.004, 0.883, 0.997, 0.996; seeds 10-14: 0.008, 0.860, 0.998,
    0.999; rho_max 0.2 seeds 0-4 (tests/benchmarks/calibration.py): 0.014, 0.875, 0.991, 0.984.
    The posterior of the paper's EM start alone missed on seeds 10-14 at rho_max 0.1 (ECE 0.061,
    0.940 right at >= 0.9; before issue 29). CI runs
    the two groups other than rho_max 0.1 seeds 0-4 (``slow``; RAYLC_SLOW=1 runs it)."""
    _meets_acceptance_1(calibration_frame("COW", seeds, 150, rho_max=rho_max))


@pytest.mark.slow  # the negative control of the seeds 10-14 group above, which fails without the second start
def test_the_papers_start_alone_is_over_confident(monkeypatch):
    """Why the posterior integrates over the EM's starts: from the paper's start alone it is
    over-confident after T = 10 steps (measured ECE 0.078 at rho_max 0.2, seeds 0-4), and at
    rho_max 0.1 still after 200 steps on seeds 10-14 (ECE 0.061), where that start's EM settles
    at a noise P(x|N) that is mostly IDK; with both starts it is calibrated there (above)."""
    monkeypatch.setattr(COWFit, "_posterior_starts", (0.5,))
    assert reliability(calibration_frame("COW", range(5), 150, uncertainty_steps=10))[1] > 0.06
    assert reliability(calibration_frame("COW", range(10, 15), 150, rho_max=0.1))[1] > 0.05


def test_the_posterior_weighs_the_starts_by_their_evidence():
    """Two EM starts scoring the same pairs: p_i = sum_s w_s p_i(. | theta_s), w_s proportional
    to prod_i sum_pairs p(lambda, k) exp l_i(theta_s) (restated here: one k per lambda, so the
    prior is uniform over the pairs); one start alone is its own softmax."""
    base = {"problem": np.array([0, 0, 1, 1]), "lam": np.array([1, 2, 1, 2]), "k": np.ones(4, dtype=int)}
    ll = [np.log([0.2, 0.1, 0.3, 0.3]), np.log([0.05, 0.25, 0.1, 0.2])]
    got = problem_uncertainty([base | {"loglik": x} for x in ll], 2, np.array(["III", "III"]), 1, 1,
                              np.array([5, 5]))
    z = [np.array([x[0] + x[1], x[2] + x[3]]) for x in map(np.exp, ll)]  # per start and problem
    w = np.array([np.prod(zs) for zs in z])
    w /= w.sum()
    p_lam1 = sum(ws * np.exp(x[[0, 2]]) / zs for ws, x, zs in zip(w, ll, z))
    assert got["proba"][:, 2] == pytest.approx(p_lam1)  # lambda = 1 <= lam_p, k = 1: category III
    one = problem_uncertainty(base | {"loglik": ll[1]}, 2, np.array(["III", "III"]), 1, 1, np.array([5, 5]))
    assert one["proba"][:, 2] == pytest.approx(np.exp(ll[1][[0, 2]]) / z[1])
    with pytest.raises(ValueError, match="same pairs"):
        problem_uncertainty([base | {"loglik": ll[0]}, base | {"k": np.full(4, 2), "loglik": ll[1]}], 2,
                            np.array(["III", "III"]), 1, 1, np.array([5, 5]))


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
    assert post.problems_.drop(UNCERTAINTY_SCHEMA).equals(none.problems_.drop(UNCERTAINTY_SCHEMA))  # same fit


def test_the_posterior_runs_its_own_em_from_each_start():
    """The posterior's EM runs (issue 29) pick step (b)'s pair by prior x marginal likelihood, so
    they are never the point fit itself: each start runs its share of uncertainty_steps, or to
    the fit's tolerance; the reported lambda and k stay the point fit's."""
    obs, _, _ = simulate_cow_task(10, seed=3, take_every=6)
    fit = COWFit(n_steps=30, uncertainty_steps=40)
    fit.fit(obs)
    again = COWFit(n_steps=30).fit(obs)
    stats = fit.cell_stats(obs)
    runs = fit._posterior_fits(stats)
    assert [(r._em_start, r.n_iter_, r._marginal_argmax) for r in runs] == [(0.5, 20, True), (0.1, 20, True)]
    assert all(r is not fit for r in runs) and not fit._marginal_argmax
    assert np.array_equal(fit.lam_, again.lam_) and np.array_equal(fit.k_, again.k_)
    tol = COWFit(tol=1e-6, uncertainty_steps=40).fit(obs)
    assert all(r.tol == tol.tol and r is not tol for r in tol._posterior_fits(stats))


# ------------------------------------------------------------------ issue 29: the rule and its guard

@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2]), max_size=40), st.randoms(use_true_random=False),
       st.sampled_from([0.5, 1.0, 2.0]))
def test_the_dirichlet_multinomial_is_the_polya_urn(seq, rnd, a):
    """log Gamma(3a) - log Gamma(n + 3a) + sum_x [log Gamma(n_x + a) - log Gamma(a)] against the
    sequential predictive of Dirichlet(a, a, a) (an urn: P(x_t) = (n_x before t + a) / (t + 3a)),
    in any order."""
    rnd.shuffle(seq)
    seen, brute = [0, 0, 0], 0.0
    for t, x in enumerate(seq):
        brute += math.log((seen[x] + a) / (t + 3 * a))
        seen[x] += 1
    assert log_dirichlet_multinomial(np.array(seen), a) == pytest.approx(brute, abs=1e-9)
    if a == DIRICHLET_ALPHA:
        assert log_dirichlet_multinomial(np.array(seen)) == pytest.approx(brute, abs=1e-9)


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
    """``below_n`` counts the outcomes with C < lambda; ``below_ll`` is their plug-in term and
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
        sel = (np.array(problem) == pr["problem"][j]) & (np.array(C) < pr["lam"][j])
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
    generator on seeds 2-4, 100 problems each. Measured: mix ECE 0.070, closed-book problems
    reported in category I at mean confidence 0.96, fixed ECE 0.010; the rule before issue 29
    (prior uniform over pairs, P_nonpar plugged in) gave mix ECE 0.18 and those problems 0.16
    (they tie with lambda > max C), and fixed ECE 0.027 (that bound alone does not tell the rules
    apart; 5 x 150 problems: tests/benchmarks/calibration.py)."""
    mix = calibration_frame("COW", range(3), 100, generator="mix")
    closed = mix.filter((pl.col("truth") == "I") & (pl.col("category") == "I"))
    assert closed.height >= 20 and closed["confidence"].mean() >= 0.8
    fixed = calibration_frame("COW", range(2, 5), 100, generator="fixed")
    for frame, bound in ((mix, 0.09), (fixed, 0.05)):
        table, ece = reliability(frame)
        assert ece <= bound, table
        assert frame["covered"].mean() >= 0.88
