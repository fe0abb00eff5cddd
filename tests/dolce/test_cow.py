"""COW EM (Algorithm 1) on sufficient statistics, COWFit on a task table (fit_cow_task), and the Figure 1 categories."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from dolce_reference import TIE_RTOL, X_VALUES, counts_from_observations, reference_cow_em, simulate_cow_task
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from raylc.dolce import CellStats, COWFit, assign_categories, category_thresholds, fit_cow_task
from raylc.dolce.cells import UNCERTAINTY_SCHEMA
from raylc.dolce.cow import _add_rows, _by_entry, _jagged_layout


# --------------------------------------------------------------------------- vs literal Algorithm 1
def assert_matches_reference(observations, n_steps=10, not_covered="fitted"):
    ref = reference_cow_em(observations, n_steps=n_steps, not_covered=not_covered)
    fit = COWFit(n_steps=n_steps, not_covered=not_covered).fit_stats(CellStats(*counts_from_observations(observations)))
    assert list(fit.problems_) == ref["problems"]
    assert fit.lam_.dtype == np.int64 and fit.k_.dtype == np.int64
    assert fit.lam_.tolist() == ref["lam"]
    assert fit.k_.tolist() == ref["k"]
    np.testing.assert_allclose(fit.loglik_, ref["loglik"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(fit.noise_, ref["noise"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(fit.prior_oracle_, ref["prior_oracle"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(fit.not_covered_, ref["not_covered"], rtol=0, atol=1e-9)
    assert fit.lam_q_.tolist() == ref["lam_q"]
    return fit


@st.composite
def small_task(draw):
    observations = []
    for i in range(draw(st.integers(1, 3))):
        L = draw(st.integers(1, 20))
        lengths = draw(st.lists(st.integers(0, L), min_size=1, max_size=5, unique=True))
        for _ in range(draw(st.integers(1, 12))):
            observations.append((i, L, draw(st.sampled_from(lengths)), draw(st.sampled_from(X_VALUES))))
    return observations


@settings(max_examples=60, deadline=None)
@given(small_task(), st.integers(1, 10), st.sampled_from(["fitted", "idk"]))
# problem 2 ties lambda = 0 (pi = 1) with lambda = 1, k = 1 (pi = 1/2) in exact arithmetic at
# step 1, through terms computed differently by the fit and the reference (1 ulp apart)
@example([(0, 1, 0, None), (1, 1, 0, None), (2, 2, 1, None), (2, 2, 1, 1)], 1, "idk")
@example([(0, 1, 0, None), (1, 1, 0, None), (2, 2, 1, None), (2, 2, 1, 1)], 2, "idk")
@example([(0, 1, 0, None), (1, 1, 0, None), (2, 2, 1, None), (2, 2, 1, 1)], 2, "fitted")
@example([(0, 2, 0, 1), (0, 2, 1, 0)], 1, "fitted")
def test_matches_literal_algorithm_1(observations, n_steps, not_covered):
    assert_matches_reference(observations, n_steps, not_covered)


@pytest.mark.parametrize("not_covered", ["fitted", "idk"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_literal_algorithm_1_ladders(seed, not_covered):
    rng = np.random.default_rng(seed)
    p_x = rng.dirichlet([1.0, 1.0, 1.0])
    observations = []
    for i in range(4):
        L = int(rng.integers(3, 60))
        ladder = [c for c in (0, 1, 2, 5, 10, 20, 50) if c < L] + [L]
        for _ in range(int(rng.integers(5, 40))):
            x = X_VALUES[rng.choice(3, p=p_x)]
            observations.append((f"q{i}", L, int(rng.choice(ladder)), x))
    assert_matches_reference(observations, not_covered=not_covered)


@pytest.mark.parametrize(
    "observations, n_steps",
    [
        # problem 1: every answer is 1, so lambda = 0 ties exactly with (1, 2) and (2, 1)
        # (P_nonpar = (1, 0, 0) below lambda, pi = 1 above)
        ([(0, 1, 0, 1)] * 4 + [(0, 1, 0, 0)] + [(1, 2, 0, 1)] * 5 + [(1, 2, 1, 1)], 1),
        # (lambda, k) = (0, 4) and (4, 4) tie: the cell at C = 4 < L only holds outcome 0, whose
        # probability does not depend on pi
        ([(0, 17, 17, 0), (0, 17, 16, 1), (0, 17, 16, 1), (0, 17, 16, 0), (0, 17, 16, None), (0, 17, 17, 0),
          (0, 17, 14, 0), (0, 17, 4, 0), (0, 17, 17, 0), (0, 17, 14, 0), (0, 17, 17, None)], 2),
    ],
)
def test_exact_ties_go_to_the_first_pair(observations, n_steps):
    assert_matches_reference(observations, n_steps)


def test_literal_reference_on_simulated_problems():
    obs, _, _ = simulate_cow_task(3, seed=11, L_range=(20, 60), take_every=3)
    observations = [
        (p, L, C, None if score is None else int(score >= 0.5))
        for p, L, C, score in obs.select("problem_id", "L", "C", "score").iter_rows()
    ]
    assert_matches_reference(observations)


# --------------------------------------------------------------------------- COWFit behaviour
def _toy():
    # problem 7: retrieval-like (1s from C = 5 on); problem 3: only the full context answers
    problem = np.array([7, 7, 7, 7, 7, 3, 3, 3, 3, 3])
    L = np.array([40, 40, 40, 40, 40, 30, 30, 30, 30, 30])
    C = np.array([0, 1, 2, 5, 40, 0, 1, 5, 20, 30])
    n1 = np.array([0, 0, 0, 4, 5, 0, 0, 0, 0, 6], dtype=float)
    n0 = np.array([1, 1, 1, 0, 0, 0, 0, 1, 0, 0], dtype=float)
    nidk = np.array([4, 9, 9, 30, 0, 5, 10, 25, 10, 0], dtype=float)
    return problem, L, C, n1, n0, nidk


def test_reference_tie_tolerance_is_the_packages():
    from raylc.dolce.cells import LL_TIE_RTOL

    assert TIE_RTOL == LL_TIE_RTOL


def test_fit_attributes():
    fit = COWFit().fit_stats(CellStats(*_toy()))
    assert fit.problems_.tolist() == [3, 7]
    assert fit.lam_q_.tolist() == [20, 5]
    for name in ("lam_", "k_", "loglik_", "prior_oracle_", "lam_q_"):
        assert getattr(fit, name).shape == (2,)
    assert fit.noise_.shape == (3,) and fit.noise_.sum() == pytest.approx(1.0)
    assert np.all((fit.prior_oracle_ >= 0) & (fit.prior_oracle_ <= 1))
    assert np.all(np.isfinite(fit.loglik_)) and np.all(fit.loglik_ < 0)
    # only the full context answers: lambda = maxC + 1 (ties with L, the first candidate wins), k = 1
    assert (fit.lam_[0], fit.k_[0]) == (21, 1)
    # answers from C = 5 on
    assert fit.lam_[1] == 5


def test_candidates_follow_section_4_literally():
    """K_i = {C_ij} U {0, maxC_i + 1, L_i}: without an observation at C = 1, k = 1 is no
    candidate, so lambda in {maxC_i + 1, L_i} (which needs k = 1) cannot be chosen."""
    problem, L, C, n1, n0, nidk = (a[(_toy()[0] == 3) & (_toy()[2] != 1)] for a in _toy())
    fit = COWFit().fit_stats(CellStats(problem, L, C, n1, n0, nidk))
    assert fit.lam_[0] <= fit.lam_q_[0] == 20


def test_invariant_to_row_order_duplicates_and_empty_cells():
    base = COWFit().fit_stats(CellStats(*_toy()))
    problem, L, C, n1, n0, nidk = _toy()
    perm = np.random.default_rng(0).permutation(problem.size)
    shuffled = COWFit().fit_stats(CellStats(problem[perm], L[perm], C[perm], n1[perm], n0[perm], nidk[perm]))
    # split every cell into two rows and add an empty cell with a new C
    split = COWFit().fit_stats(CellStats(
        np.r_[problem, problem, 7], np.r_[L, L, 40], np.r_[C, C, 11],
        np.r_[n1 / 2, n1 / 2, 0], np.r_[n0 / 2, n0 / 2, 0], np.r_[nidk / 2, nidk / 2, 0],
    ))
    for other in (shuffled, split):
        assert other.lam_.tolist() == base.lam_.tolist() and other.k_.tolist() == base.k_.tolist()
        np.testing.assert_allclose(other.loglik_, base.loglik_, rtol=1e-12)
        np.testing.assert_allclose(other.noise_, base.noise_, rtol=1e-12)


def test_jagged_rows_add_each_group_sequentially():
    """The objective's sums (row by row of a jagged layout) equal a sequential loop per
    group bitwise, so that exact ties stay exact."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 7, 300)
    terms = [rng.normal(size=s) * 10.0 ** rng.integers(-12, 12, s) for s in sizes]
    order, rank, ends = _jagged_layout(sizes)
    assert order.tolist() == sorted(range(sizes.size), key=lambda g: -sizes[g])  # largest first, stable
    assert np.array_equal(rank[order], np.arange(sizes.size))
    rows = [[g for g in order if sizes[g] > j] for j in range(sizes.max())]  # row j: groups with > j terms
    assert ends.tolist() == np.cumsum([len(r) for r in rows]).tolist()
    assert _by_entry(order, ends).tolist() == [g for r in rows for g in r]
    assert _by_entry(order, ends, plus_row=True).tolist() == [g + j for j, r in enumerate(rows) for g in r]
    acc = np.zeros(sizes.size)
    _add_rows(acc, np.array([terms[g][j] for j, r in enumerate(rows) for g in r]), ends)
    expected = np.zeros(sizes.size)
    for g, t in enumerate(terms):
        for x in t:
            expected[g] += x
    assert acc[rank].tobytes() == expected.tobytes()


def test_scaling_counts_scales_loglik_only():
    problem, L, C, n1, n0, nidk = _toy()
    base = COWFit().fit_stats(CellStats(problem, L, C, n1, n0, nidk))
    double = COWFit().fit_stats(CellStats(problem, L, C, 2 * n1, 2 * n0, 2 * nidk))
    assert double.lam_.tolist() == base.lam_.tolist() and double.k_.tolist() == base.k_.tolist()
    np.testing.assert_allclose(double.loglik_, 2 * base.loglik_, rtol=1e-10)
    np.testing.assert_allclose(double.prior_oracle_, base.prior_oracle_, rtol=1e-10)


def test_closed_book_problem_gets_lambda_zero():
    # correct even without context, at every length: lambda = 0 with the smallest k >= 1 candidate
    fit = COWFit().fit_stats(CellStats(
        np.zeros(4, dtype=int), np.full(4, 50), np.array([0, 5, 20, 50]),
        np.array([9.0, 9, 9, 9]), np.zeros(4), np.zeros(4),
    ))
    assert fit.lam_.tolist() == [0] and fit.k_.tolist() == [5]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.update(C=np.r_[a["C"][:-1], 41]), "exceed"),
        (lambda a: a.update(y0=-a["y0"]), "non-negative"),
        (lambda a: a.update(L=np.r_[a["L"][:-1], 39]), "several context lengths"),
        (lambda a: a.update(C=a["C"][:-1]), "aligned"),
        (lambda a: a.update(y1=np.where(a["problem"] == 3, 0, a["y1"]), nidk=np.where(a["problem"] == 3, 0, a["nidk"]),
                            y0=np.where(a["problem"] == 3, 0, a["y0"])), "no observations"),
        (lambda a: a.update({k: v[:0] for k, v in a.items()}), "empty"),
    ],
)
def test_fit_validation(change, message):
    args = dict(zip(("problem", "L", "C", "y1", "y0", "nidk"), _toy()))
    args["L"] = np.where(args["problem"] == 7, 40, 30)
    change(args)
    with pytest.raises(ValueError, match=message):
        COWFit().fit_stats(CellStats(**args))


# --------------------------------------------------------------------------- parameter recovery
def _recovery(seeds, n_problems, n_steps=10, **kw):
    fitted = []
    for seed in seeds:
        obs, planted, _ = simulate_cow_task(n_problems, seed=seed, **kw)
        problems, info = fit_cow_task(obs, n_steps=n_steps)
        lam_q = obs.filter(pl.col("C") < pl.col("L")).group_by("problem_id").agg(lam_q=pl.col("C").max())
        df = problems.join(planted, on="problem_id").join(lam_q, on="problem_id")
        planted_cat = assign_categories(
            df["planted_lam"].to_numpy(), df["planted_k"].to_numpy(), info["lam_p"], info["k_p"], df["lam_q"].to_numpy()
        )
        fitted.append(df.with_columns(planted_category=pl.Series(planted_cat, dtype=pl.String)))
    df = pl.concat(fitted)
    recovered = float((df["category"] == df["planted_category"]).mean())
    rho = float(spearmanr(df["planted_lam"], df["lam"]).statistic)
    return recovered, rho, df


def test_parameter_recovery_planted_copies():
    """Copies planted once per problem, every span start enumerated (the realistic design; the
    data then depart from Eq. 3, which averages over placements).

    Measured on 5 groups of 6 seeds x 80 problems with the paper's T = 10: category recovery
    0.89-0.91 and Spearman(lambda) 0.94-0.96; with T = 100: 0.91-0.92 and 0.92-0.94 (the
    realized coverage of one placement is not pi, so more EM steps fit it more closely, not
    the planted lambda). The asserted floors sit below the T = 10 figures.
    """
    recovered, rho, df = _recovery(range(6), 80)
    print(f"planted copies: category recovery {recovered:.3f}, Spearman(lambda) {rho:.3f}, n={df.height}")
    assert df.height == 480
    assert recovered >= 0.85
    assert rho >= 0.90


@pytest.mark.parametrize(
    "n_steps,min_recovered,min_rho",
    [
        # the paper's T = 10: measured 0.844-0.904 / 0.970-0.984 on 5 groups of 6 seeds; the
        # EM has not converged (k exact for 0.46-0.51 of the problems; k of sparse category
        # III still inflated, e.g. 2 fitted as 5), so the 0.90 category target is missed
        (10, 0.82, 0.95),
        # the off-by-default option, more EM steps (raylc fit --em-steps-cow 100): measured
        # 0.912-0.958 / 0.985-0.991 (k exact for 0.83-0.93): the 0.90 / 0.95 targets
        (100, 0.90, 0.95),
    ],
)
def test_parameter_recovery_on_model_data(n_steps, min_recovered, min_rho):
    """Data drawn from the model itself: copies re-placed for every span, so P(1 | O) is
    exactly pi as Eq. 3 assumes (seeds 0-5 x 80 problems, every span, noise prior <= 0.2)."""
    recovered, rho, df = _recovery(range(6), 80, n_steps=n_steps, replant_each_observation=True)
    print(f"model data, T = {n_steps}: category recovery {recovered:.3f}, Spearman(lambda) {rho:.3f}, n={df.height}")
    assert df.height == 480
    assert recovered >= min_recovered
    assert rho >= min_rho


# --------------------------------------------------------------------------- fit_cow_task
def _obs_frame():
    rows = []
    for pid, L, cells in (
        ("b", 40, {0: [None] * 3, 2: [None, 0.1, None, None], 5: [1.0, None, 0.7, None], 40: [1.0, 0.9]}),
        ("a", 30, {0: [None, 0.0], 5: [None] * 6, 20: [None, None, 0.2], 30: [1.0, 0.6, 0.55]}),
    ):
        for C, scores in cells.items():
            for s, score in enumerate(scores):
                rows.append({"task": "T", "problem_id": pid, "L": L, "C": C, "start": min(s, L - C),
                             "score": score, "metric": "f1"})
    return pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                      "start": pl.Int64, "score": pl.Float64, "metric": pl.String})


def test_fit_cow_task_output_and_consistency_with_cowfit():
    obs = _obs_frame()
    problems, info = fit_cow_task(obs, n_steps=7, threshold=0.6)
    assert problems.columns == ["task", "problem_id", "scenario", "lam", "k", "category", "loglik", "prior_oracle",
                                *UNCERTAINTY_SCHEMA]
    assert problems["problem_id"].to_list() == ["a", "b"]
    assert problems["scenario"].to_list() == ["COW", "COW"] and problems["task"].to_list() == ["T", "T"]
    assert problems.schema["lam"] == pl.Int64 and problems.schema["k"] == pl.Int64
    assert set(info) == {"p_noise_1", "p_noise_0", "p_noise_idk", "lam_p", "k_p", "em_steps", "em_ll_change",
                         "share_draws"}
    assert (info["lam_p"], info["k_p"]) == category_thresholds([2, 5, 20])  # distinct 0 < C < L
    # same counts by hand: score >= 0.6 -> 1, < 0.6 -> 0, null -> IDK
    x = obs.with_columns(
        x=pl.when(pl.col("score").is_null()).then(2).when(pl.col("score") >= 0.6).then(0).otherwise(1)
    )
    cells = x.group_by("problem_id", "L", "C").agg([(pl.col("x") == v).sum().alias(f"n{v}") for v in range(3)])
    fit = COWFit(n_steps=7).fit_stats(CellStats(
        cells["problem_id"].to_numpy(), cells["L"].to_numpy(), cells["C"].to_numpy(),
        cells["n0"].to_numpy(), cells["n1"].to_numpy(), cells["n2"].to_numpy(),
    ))
    assert problems["lam"].to_list() == fit.lam_.tolist() and problems["k"].to_list() == fit.k_.tolist()
    np.testing.assert_allclose(problems["loglik"].to_numpy(), fit.loglik_)
    np.testing.assert_allclose(problems["prior_oracle"].to_numpy(), fit.prior_oracle_)
    np.testing.assert_allclose([info["p_noise_1"], info["p_noise_0"], info["p_noise_idk"]], fit.noise_)
    cats = assign_categories(fit.lam_, fit.k_, info["lam_p"], info["k_p"], fit.lam_q_)
    assert problems["category"].to_list() == cats.tolist()


def test_cowfit_fits_a_task_table():
    """COWFit.fit(obs): the CellFit contract on one task's table (fit_cow_task is its frames())."""
    obs = _obs_frame()
    model = COWFit(n_steps=7, threshold=0.6)
    assert model.fit(obs) is model
    problems, info = fit_cow_task(obs, n_steps=7, threshold=0.6)
    got_problems, got_info = model.frames()
    assert got_problems.equals(problems) and got_info == info
    assert model.task_ == "T" and (model.lam_p_, model.k_p_) == (info["lam_p"], info["k_p"])
    assert model.problems_.tolist() == ["a", "b"] and model.category_.tolist() == problems["category"].to_list()
    # its cell statistics: the counts of outcomes 1 / 0 / IDK per (problem, C) of the binarized scores
    stats = model.cell_stats(obs)
    rows = sorted(zip(stats.problem, stats.C, stats.y1, stats.y0, stats.nidk, stats.n))
    assert rows[:4] == [("a", 0, 0, 1, 1, 2), ("a", 5, 0, 0, 6, 6), ("a", 20, 0, 1, 2, 3), ("a", 30, 2, 1, 0, 3)]
    refit = COWFit(n_steps=7).fit_stats(stats)
    assert refit.lam_.tolist() == model.lam_.tolist() and refit.loglik_.tolist() == model.loglik_.tolist()


def test_cowfit_keeps_binary_metrics_at_one_half():
    """The threshold binarizes continuous metrics only (raylc.dolce.scenario.binarize_scores):
    threshold 0 does not turn the wrong answers of an exact-match task into correct ones."""
    obs = _obs_frame().with_columns(score=(pl.col("score") >= 0.6).cast(pl.Float64), metric=pl.lit("exact_match"))
    (zero, zero_info), (half, half_info) = (COWFit(threshold=t).fit(obs).frames() for t in (0.0, 0.5))
    assert zero.equals(half) and zero_info == half_info and zero_info["p_noise_0"] > 0
    assert COWFit(threshold=0.0).fit(obs.with_columns(metric=pl.lit("f1"))).noise_[1] == 0.0  # f1: every score >= 0


def test_fit_cow_task_threshold_binarizes_scores():
    obs = _obs_frame()
    for threshold in (0.05, 0.6, 1.0):
        binary = obs.with_columns(score=(pl.col("score") >= threshold).cast(pl.Float64))
        got, info = fit_cow_task(obs, threshold=threshold)
        want, info_want = fit_cow_task(binary, threshold=0.5)
        assert got.equals(want) and info == info_want
    # a lower threshold turns the 0.1 / 0.2 scores into correct answers
    assert fit_cow_task(obs, threshold=0.05)[1]["p_noise_0"] < fit_cow_task(obs, threshold=0.6)[1]["p_noise_0"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda o: o.drop("metric"), "missing column"),
        (lambda o: o.head(0), "empty"),
        (lambda o: o.with_columns(C=pl.when(pl.col("C") == 20).then(35).otherwise(pl.col("C"))), "C > L"),
        (lambda o: o.with_columns(C=pl.col("C") - 1), "non-negative"),
        (lambda o: o.with_columns(start=pl.col("start") - 5), "non-negative"),
        (lambda o: o.with_columns(start=pl.col("start") + 3), r"start \+ C > L"),
        (lambda o: o.with_columns(score=pl.col("score") * 2), r"outside \[0, 1\]"),
        (lambda o: o.with_columns(task=pl.col("problem_id")), "exactly one task"),
        (lambda o: o.with_columns(L=pl.col("L").cast(pl.Float64)), "integer"),
    ],
)
def test_fit_cow_task_validation(mutate, message):
    with pytest.raises(ValueError, match=message):
        fit_cow_task(mutate(_obs_frame()))


def test_fit_cow_task_needs_partial_lengths():
    obs = _obs_frame().filter((pl.col("C") == 0) | (pl.col("C") == pl.col("L")))
    with pytest.raises(ValueError, match="no partial observation length"):
        fit_cow_task(obs)


# --------------------------------------------------------------------------- categories
@pytest.mark.parametrize(
    "ladder, expected",
    [
        ([1, 2, 5, 10, 20, 50, 100, 200], 2),  # N = 8, p = 2
        ([200, 1, 50, 2, 5, 10, 20, 100, 500], 5),  # unsorted, N = 9, p = 3
        ([1, 2], 1),  # p = max(1, 0)
        ([7], 7),
        ([0, 5, 5, 10, 20], 5),  # 0 dropped, duplicates merged: N = 3, p = 1
        (np.array([10, 20, 50, 100, 200, 500]), 20),
    ],
)
def test_category_thresholds(ladder, expected):
    assert category_thresholds(ladder) == (expected, expected)


@pytest.mark.parametrize("ladder", [[], [0], [-1, 2], [1.5, 2]])
def test_category_thresholds_rejects(ladder):
    with pytest.raises(ValueError):
        category_thresholds(ladder)


def test_assign_categories_table():
    lam_p = k_p = 2
    cases = [  # lam, k, lam_q, expected
        (0, 1, 100, "I"),
        (0, 50, 100, "I"),
        (1, 5, 100, "II"),
        (2, 3, 100, "II"),
        (2, 2, 100, "III"),
        (1, 1, 100, "III"),
        (5, 10, 100, "IV"),
        (100, 1, 100, "IV"),
        (101, 1, 100, "V"),
        (300, 1, 200, "V"),
        (2, 1, 1, "V"),  # lam_q < lam_p: V takes precedence over III
    ]
    lam, k, lam_q, expected = map(np.array, zip(*cases))
    got = assign_categories(lam, k, lam_p, k_p, lam_q)
    assert got.tolist() == expected.tolist()
    assert assign_categories(5, 1, 2, 2, 20).tolist() == "IV"
    per_task = assign_categories(lam, k, np.full(lam.size, 2), np.full(lam.size, 2), lam_q)
    assert per_task.tolist() == expected.tolist()
