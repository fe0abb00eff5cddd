"""Scenario selection (Section 3.1, Appendix H), the whole-table DOLCE fit (Section 4) and the
estimator contracts (DolceFit; COWFit and PIGFit as CellFit)."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import polars as pl
import pytest
from dolce_reference import identity_mapper_pickled, scores_task, simulate_cow_task, synth_task
from polars.testing import assert_frame_equal

from raylc.dolce.cells import OBS_COLUMNS, UNCERTAINTY_SCHEMA, CellFit, CellStats
from raylc.dolce.cow import COWFit
from raylc.dolce.fit import (
    PROBLEM_COLUMNS,
    PROBLEM_SCHEMA,
    TASK_COLUMNS,
    TASK_SCHEMA,
    DolceFit,
    ObservationError,
    fit_observations,
    validate_observations,
)
from raylc.dolce.options import FitOptions
from raylc.dolce.pig import PIGFit
from raylc.dolce.scenario import (
    SELECTION_SCHEMA,
    binarize_scores,
    bucketize_scores,
    dip_pvalue,
    histogram_points,
    select_scenarios,
)
from raylc.scoring import OBSERVATION_SCHEMA as OBS_SCHEMA


# ------------------------------------------------------------------------------ dip test
def test_bucketize_bins_of_width_point_one():
    got = bucketize_scores([0.0, 0.0999, 0.1, 0.3, 0.7, 0.95, 1.0, None, float("nan")])
    assert got.tolist() == [0, 0, 1, 3, 7, 9, 9]  # [.9, 1] closed; IDK dropped
    pts = histogram_points([0, 0, 9])
    assert np.allclose(pts, [0.025, 0.075, 0.95])
    with pytest.raises(ValueError):
        bucketize_scores([1.2])


def test_bimodal_scores_reject_unimodality_and_unimodal_scores_do_not():
    rng = np.random.default_rng(3)
    bimodal = np.r_[rng.uniform(0, 0.1, 40), rng.uniform(0.9, 1.0, 40)]
    unimodal = np.clip(rng.normal(0.45, 0.12, 80), 0, 1)
    assert dip_pvalue(bimodal) < 0.05
    assert dip_pvalue(unimodal) > 0.5
    # plain bucket floors are all ties: the dip test would reject unimodality for both
    import diptest

    floors = np.floor(np.clip(unimodal, 0, 0.999) * 10) / 10
    assert diptest.diptest(floors)[1] < 0.5
    assert dip_pvalue([0.2, 0.4, None]) is None  # n <= 3


def test_bimodal_problem_goes_cow_and_unimodal_problem_goes_pig():
    obs = pl.concat([synth_task("qa", 1, 0, seed=2), synth_task("summ", 0, 1, seed=2)])
    sel = select_scenarios(obs)
    assert sel.select("task", "subset", "scenario").rows() == [("qa", "qa", "COW"), ("summ", "summ", "PIG")]
    assert sel["dip_pvalue"][0] < 0.5 <= sel["dip_pvalue"][1]


def test_split_when_both_subsets_have_more_than_ten_problems():
    sel = select_scenarios(synth_task("t", 11, 11, seed=1))
    got = dict(sel.group_by("subset", "scenario").len().sort("subset").select("subset", "len").iter_rows())
    assert got == {"t/COW": 11, "t/PIG": 11}
    cow = sel.filter(pl.col("subset") == "t/COW")
    assert cow["problem_id"].str.contains("-b").all() and cow["scenario"].eq("COW").all()
    assert (cow["dip_pvalue"] < 0.5).all()
    assert (sel.filter(pl.col("subset") == "t/PIG")["dip_pvalue"] >= 0.5).all()


@pytest.mark.parametrize("n_bimodal,n_unimodal", [(11, 10), (10, 11), (20, 3)])
def test_no_split_when_a_side_has_ten_or_fewer_task_level_test_decides(n_bimodal, n_unimodal):
    sel = select_scenarios(synth_task("t", n_bimodal, n_unimodal, seed=1))
    assert sel["subset"].unique().to_list() == ["t"]
    task_p = sel["task_dip_pvalue"][0]
    assert task_p < 0.5 and sel["scenario"].unique().to_list() == ["COW"]
    # the problem-level p-values are still reported and disagree with the whole-task decision
    assert (sel["dip_pvalue"] >= 0.5).sum() == n_unimodal


def test_task_level_test_can_make_a_mixed_task_pig():
    rng = np.random.default_rng(5)
    problems = {f"u{i:02d}": list(np.clip(rng.normal(0.5, 0.1, 60), 0.01, 0.99)) for i in range(20)}
    # three problems with two modes inside the bulk (bins 3 and 6, nothing between)
    problems |= {f"m{i}": [0.33, 0.36, 0.38] * 10 + [0.62, 0.64, 0.67] * 10 for i in range(3)}
    sel = select_scenarios(scores_task("sum", problems))
    assert (sel.filter(pl.col("problem_id").str.starts_with("m"))["dip_pvalue"] < 0.5).all()
    assert sel["task_dip_pvalue"][0] >= 0.5
    assert sel["scenario"].unique().to_list() == ["PIG"] and sel["subset"].unique().to_list() == ["sum"]


def test_accuracy_problems_of_a_small_mixed_task_take_the_task_level_scenario():
    """Appendix H: a task whose COW and PIG sides do not both have more than ten problems is one
    scenario, accuracy-scored problems included; the task-level test sees only the continuous
    metric's scores (the accuracy problems' 0/1 would make any task bimodal)."""
    rng = np.random.default_rng(3)
    f1 = {f"u{i}": list(np.clip(rng.normal(0.5, 0.1, 60), 0.01, 0.99)) for i in range(3)}
    acc = {f"a{i}": [1.0, 0.0] * 30 for i in range(3)}
    obs = pl.concat([scores_task("t", f1, metric="f1"), scores_task("t", acc, metric="accuracy")])
    sel = select_scenarios(obs)
    assert sel.filter(pl.col("problem_id").str.starts_with("a"))["dip_pvalue"].null_count() == 3
    assert sel["task_dip_pvalue"][0] == pytest.approx(dip_pvalue(np.concatenate(list(f1.values()))))
    assert sel["task_dip_pvalue"][0] >= 0.5
    assert sel["scenario"].unique().to_list() == ["PIG"] and sel["subset"].unique().to_list() == ["t"]


def test_unanimous_tasks_and_binary_metrics():
    pig_only = select_scenarios(synth_task("p", 0, 12))
    assert pig_only["scenario"].unique().to_list() == ["PIG"] and pig_only["subset"].unique().to_list() == ["p"]
    acc = synth_task("a", 3, 3).with_columns(
        score=pl.when(pl.col("score") >= 0.5).then(1.0).when(pl.col("score").is_null()).then(None).otherwise(0.0),
        metric=pl.lit("Accuracy"),
    )
    sel = select_scenarios(acc)
    assert sel["scenario"].unique().to_list() == ["COW"]
    assert sel["dip_pvalue"].null_count() == sel.height and sel["task_dip_pvalue"].null_count() == sel.height
    # binary outcomes under a continuous metric are COW too (binarization is lossless)
    binary_f1 = acc.with_columns(metric=pl.lit("f1"))
    assert select_scenarios(binary_f1)["scenario"].unique().to_list() == ["COW"]


def test_forced_scenarios():
    obs = synth_task("t", 11, 11, seed=1)
    for mode in ("cow", "pig"):
        sel = select_scenarios(obs, mode)
        assert sel["scenario"].unique().to_list() == [mode.upper()]
        assert sel["subset"].unique().to_list() == ["t"]
        assert sel["dip_pvalue"].null_count() == 0
    with pytest.raises(ValueError, match="scenario"):
        select_scenarios(obs, "both")


def test_binarize_threshold_applies_to_continuous_metrics_only():
    obs = pl.DataFrame(
        [("t", "p", 10, 1, 0, 0.3, "f1"), ("t", "p", 10, 1, 1, None, "f1"), ("t", "p", 10, 1, 2, 0.5, "f1"),
         ("t", "q", 10, 1, 0, 0.0, "exact_match"), ("t", "q", 10, 1, 1, 1.0, "exact_match")],
        schema=OBS_SCHEMA, orient="row",
    )
    assert binarize_scores(obs, 0.5)["score"].to_list() == [0.0, None, 1.0, 0.0, 1.0]
    assert binarize_scores(obs, 0.25)["score"].to_list() == [1.0, None, 1.0, 0.0, 1.0]
    assert binarize_scores(obs, 0.0)["score"].to_list() == [1.0, None, 1.0, 0.0, 1.0]  # exact match kept
    assert binarize_scores(obs, 1.0)["score"].to_list() == [0.0, None, 0.0, 0.0, 1.0]


# ------------------------------------------------------------------------------ validation
def _good():
    return synth_task("t", 2, 2, seed=0)


BAD_TABLES = {
    "missing column": (lambda o: o.drop("metric"), "metric", None),
    "C > L": (lambda o: o.with_columns(C=pl.when(pl.col("C") == 5).then(99).otherwise(pl.col("C"))), "C", "C=99"),
    "score above 1": (lambda o: o.with_columns(score=pl.when(pl.col("C") == 2).then(1.5).otherwise(pl.col("score"))),
                      "score", "score=1.5"),
    "negative score": (lambda o: o.with_columns(score=pl.when(pl.col("C") == 2).then(-0.1).otherwise(pl.col("score"))),
                       "score", "score=-0.1"),
    "negative L": (lambda o: o.with_columns(
                       L=pl.when(pl.col("problem_id") == "t-u003").then(-4).otherwise(pl.col("L"))),
                   "L", "L=-4"),
    "empty task": (lambda o: o.with_columns(task=pl.when(pl.col("C") == 10).then(pl.lit("")).otherwise(pl.col("task"))),
                   "task", "task=''"),
    "null task": (lambda o: o.with_columns(task=pl.when(pl.col("C") == 10).then(None).otherwise(pl.col("task"))),
                  "task", "task=None"),
    "start past the end": (lambda o: o.with_columns(
                               start=pl.when(pl.col("C") == 20).then(55).otherwise(pl.col("start"))),
                           "start", "start=55"),
    "fractional C": (lambda o: o.with_columns(
                         C=pl.col("C").cast(pl.Float64) + pl.when(pl.col("C") == 5).then(0.5).otherwise(0.0)),
                     "C", "C=5.5"),
    "two lengths": (lambda o: o.with_columns(L=pl.when((pl.col("C") == 0) & (pl.col("problem_id") == "t-b000")).then(70)
                                             .otherwise(pl.col("L"))), "L", "L="),
    "no partial C": (lambda o: o.filter((pl.col("C") == 0) | (pl.col("C") == pl.col("L"))), "C", "task='t'"),
    "binary metric non-binary score": (lambda o: o.with_columns(metric=pl.lit("accuracy")), "score",
                                       "metric='accuracy'"),
    "empty table": (lambda o: o.clear(), "task", None),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_tables_raise_observation_error_naming_column_and_row(case):
    mutate, column, fragment = BAD_TABLES[case]
    with pytest.raises(ObservationError) as info:
        fit_observations(mutate(_good()))
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in msg
    assert f"column '{column}'" in msg, msg
    assert "e.g. row" in msg, msg
    if case != "empty table":
        assert "problem_id='t-" in msg, msg  # an example row is shown
    if fragment:
        assert fragment in msg, msg


def test_validation_normalizes_types():
    obs = _good().with_columns(pl.col("L", "C", "start").cast(pl.Float64), pl.col("task").cast(pl.Categorical))
    out = validate_observations(obs.with_columns(extra=pl.lit(1)))
    assert out.schema == pl.Schema(OBS_SCHEMA)


# ------------------------------------------------------------------------------ fit
@pytest.fixture(scope="module")
def mixed_obs():
    acc = synth_task("acc", 4, 4, seed=7).with_columns(
        score=pl.when(pl.col("score").is_null()).then(None).otherwise((pl.col("score") >= 0.5).cast(pl.Float64)),
        metric=pl.lit("exact_match"),
    )
    return pl.concat([synth_task("mix", 11, 11, seed=1), synth_task("pig", 0, 6, seed=4), acc])


#: the posterior with 20 steps instead of 200 (every column filled, 10x cheaper; the default's
#: posterior is tested in tests/dolce/test_uncertainty.py); POINT: point estimates only, for the
#: tests of routing (the posterior is 20x the point fit's cost on these small tasks)
SHORT = FitOptions(uncertainty_steps=20)
POINT = FitOptions(uncertainty="none")


@pytest.fixture(scope="module")
def mixed_fit(mixed_obs):
    return fit_observations(mixed_obs, SHORT)


@pytest.fixture(scope="module")
def mixed_point_fit(mixed_obs):
    return fit_observations(mixed_obs, POINT)


def test_fit_observations_frames(mixed_obs, mixed_fit):
    problems, tasks = mixed_fit
    assert problems.columns == list(PROBLEM_COLUMNS) and tasks.columns == list(TASK_COLUMNS)
    assert problems.height == mixed_obs["problem_id"].n_unique()
    assert tasks.select("task", "subset", "scenario").rows() == [
        ("acc", "acc", "COW"), ("mix", "mix/COW", "COW"), ("mix", "mix/PIG", "PIG"), ("pig", "pig", "PIG")
    ]
    assert tasks["n_problems"].to_list() == [8, 11, 11, 6]
    shares = tasks.select(pl.sum_horizontal(pl.col("^share_(I|II|III|IV|V)$")))
    assert np.allclose(shares.to_series().to_numpy(), 1.0)
    noise = tasks.select("p_noise_1", "p_noise_0", "p_noise_idk").to_numpy()
    assert np.allclose(noise.sum(axis=1), 1.0) and (noise >= 0).all()
    assert tasks.filter(pl.col("task") == "acc")["dip_pvalue"].is_null().all()
    assert tasks.filter(pl.col("task") == "mix")["dip_pvalue"].to_list() == [0.0, 0.0]
    assert problems.filter(pl.col("task") == "acc")["dip_pvalue"].is_null().all()
    assert problems.filter(pl.col("subset") == "mix/PIG")["scenario"].eq("PIG").all()
    assert set(problems["category"]) <= {"I", "II", "III", "IV", "V"}
    assert (problems["lam"] >= 0).all() and (problems["k"] >= 1).all()


def test_cow_subset_matches_fit_cow_task_on_binarized_scores(mixed_obs, mixed_point_fit):
    from raylc.dolce.cow import fit_cow_task

    problems, tasks = mixed_point_fit
    cow_ids = problems.filter(pl.col("subset") == "mix/COW")["problem_id"]
    direct, info = fit_cow_task(mixed_obs.filter(pl.col("problem_id").is_in(cow_ids.implode())), threshold=0.5)
    got = problems.filter(pl.col("subset") == "mix/COW")
    assert got["lam"].to_list() == direct["lam"].to_list() and got["k"].to_list() == direct["k"].to_list()
    assert tasks.filter(pl.col("subset") == "mix/COW")["p_noise_1"][0] == info["p_noise_1"]


def test_each_problem_reports_its_posteriors_most_probable_category(mixed_fit):
    """One rule for a problem's row (COW and PIG subsets): the category is the posterior's most
    probable and its confidence that probability."""
    from raylc.dolce.categories import CATEGORIES

    problems, _ = mixed_fit
    proba = problems.select(f"p_{c}" for c in CATEGORIES).to_numpy()
    assert problems["category"].to_list() == [CATEGORIES[i] for i in proba.argmax(axis=1)]
    assert np.array_equal(problems["confidence"].to_numpy(), proba.max(axis=1))
    assert (problems["confidence"] >= 0.2).all()


def test_threshold_changes_only_cow_fits_of_continuous_scores(mixed_obs, mixed_point_fit):
    problems, _ = mixed_point_fit
    p1, _ = fit_observations(mixed_obs, FitOptions(uncertainty="none", threshold=0.95))
    unchanged = pl.col("subset").is_in(["acc", "mix/PIG", "pig"])
    # the cut also says which continuous scores are right (answered_right), in both scenarios
    fitted = pl.exclude("answered_right")
    assert_frame_equal(problems.filter(unchanged).select(fitted), p1.filter(unchanged).select(fitted))
    assert not problems.filter(~unchanged).select(fitted).equals(p1.filter(~unchanged).select(fitted))
    assert_frame_equal(problems.filter(pl.col("subset") == "acc"), p1.filter(pl.col("subset") == "acc"))
    with pytest.raises(ValueError, match="threshold"):
        fit_observations(mixed_obs, FitOptions(threshold=1.5))
    with pytest.raises(ValueError, match="threshold"):  # options built without validation are checked by fit
        fit_observations(mixed_obs, FitOptions.model_construct(threshold=1.5))


def test_fake_mapper_gives_identical_frames(mixed_obs, mixed_point_fit):
    calls = []

    def mapper(fn, frames, *args):
        calls.append(len(frames))
        return identity_mapper_pickled(fn, frames, *args)

    problems, tasks = fit_observations(mixed_obs, POINT, mapper=mapper)
    assert calls == [4]
    assert_frame_equal(problems, mixed_point_fit[0])
    assert_frame_equal(tasks, mixed_point_fit[1])


def test_selection_fixes_scenarios(mixed_obs, mixed_point_fit):
    problems, tasks = mixed_point_fit
    p2, t2 = fit_observations(mixed_obs, POINT, selection=problems)
    assert_frame_equal(p2, problems)
    assert_frame_equal(t2, tasks)
    # a fixed selection wins over options.scenario
    p3, _ = fit_observations(mixed_obs, FitOptions(uncertainty="none", scenario="pig"), selection=problems)
    assert_frame_equal(p3, problems)
    with pytest.raises(ObservationError, match="column 'problem_id'"):
        fit_observations(mixed_obs, POINT, selection=problems.filter(pl.col("task") != "pig"))


# ------------------------------------------------------------------------------ estimator contracts
def test_dolce_fit_contract(mixed_obs, mixed_fit):
    """scikit-learn style: hyperparameters in __init__ (stored as given), fit returns self,
    learned attributes end in ``_`` and equal fit_observations' frames."""
    assert list(inspect.signature(DolceFit).parameters) == ["options", "mapper"]
    options = SHORT
    est = DolceFit(options)
    assert est.options is options and est.mapper is None and not [a for a in vars(est) if a.endswith("_")]
    assert est.fit(mixed_obs) is est
    assert sorted(vars(est)) == ["mapper", "options", "problems_", "selection_", "tasks_"]
    assert_frame_equal(est.problems_, mixed_fit[0])
    assert_frame_equal(est.tasks_, mixed_fit[1])
    assert est.problems_.schema == pl.Schema(PROBLEM_SCHEMA) and est.tasks_.schema == pl.Schema(TASK_SCHEMA)
    assert est.selection_.schema == pl.Schema(SELECTION_SCHEMA)
    assert_frame_equal(est.selection_, select_scenarios(mixed_obs))
    assert est.selection_.select("task", "problem_id", "subset", "scenario").equals(
        est.problems_.sort("task", "problem_id").select("task", "problem_id", "subset", "scenario"))
    # a mapper is a hyperparameter too; fit_observations is DolceFit as a function
    calls = []
    cow = FitOptions(scenario="cow", uncertainty="none")
    mapped = DolceFit(cow, mapper=lambda fn, frames, *args: calls.append(args) or
                      identity_mapper_pickled(fn, frames, *args)).fit(mixed_obs)
    assert calls == [(cow,)]  # the options travel whole, as one argument
    assert_frame_equal(mapped.problems_, fit_observations(mixed_obs, cow)[0])
    assert set(mapped.selection_["scenario"]) == {"COW"}


@pytest.mark.parametrize("options", [
    {"em_steps_cow": 2}, {"em_steps_pig": 1}, {"pig_likelihood": "score"}, {"pig_likelihood": "paper"},
    {"pig_hit_rate": "mean"}, {"threshold": 0.95}, {"not_covered": "idk"},
])
def test_each_fit_option_reaches_its_subsets(mixed_obs, mixed_point_fit, options):
    """Each FitOptions field changes the fits of the subsets it concerns, and only those (COW:
    em_steps_cow, threshold, not_covered; PIG: em_steps_pig, pig_likelihood, pig_hit_rate)."""
    problems, _ = fit_observations(mixed_obs, FitOptions(uncertainty="none", **options))
    name = next(iter(options))
    cow = name in ("em_steps_cow", "threshold", "not_covered")
    concerned = pl.col("scenario") == ("COW" if cow else "PIG")
    fitted = pl.all()
    if name == "threshold":  # binary-metric problems are binarized at 0.5 whatever the threshold
        concerned = concerned & (pl.col("task") != "acc")
        fitted = pl.exclude("answered_right")  # the cut says which answers are right in both scenarios
    before = mixed_point_fit[0].select(fitted)
    assert_frame_equal(problems.select(fitted).filter(~concerned), before.filter(~concerned))
    assert not problems.select(fitted).filter(concerned).equals(before.filter(concerned))


def _binary_task():
    return synth_task("t", 6, 0, seed=3).with_columns(
        score=pl.when(pl.col("score").is_null()).then(None).otherwise((pl.col("score") >= 0.5).cast(pl.Float64)))


def test_cow_and_pig_share_the_cell_fit_interface():
    """COWFit and PIGFit: the same constructor style (keyword hyperparameters with defaults,
    stored as given), fit(task table) -> self, fit_stats(CellStats) -> self, the same learned
    attributes and frames(); both form their cell statistics through cells.cell_statistics."""
    obs = _binary_task()
    fitted_attrs = None
    for cls, params in ((COWFit, {"n_steps": 3, "threshold": 0.4}),
                        (PIGFit, {"n_steps": 2, "likelihood": "binned", "hit_rate": "mean"})):
        assert issubclass(cls, CellFit)
        sig = inspect.signature(cls)
        assert list(sig.parameters)[0] == "n_steps"
        assert all(p.default is not p.empty for p in sig.parameters.values())
        model = cls(**params)
        assert {k: getattr(model, k) for k in params} == params  # hyperparameters stored as given
        assert inspect.signature(cls.fit) == inspect.signature(CellFit.fit)
        assert inspect.signature(cls.fit_stats) == inspect.signature(CellFit.fit_stats)
        assert model.fit(obs) is model
        attrs = {a for a in vars(model) if a.endswith("_")}
        assert {"problems_", "lam_", "k_", "loglik_", "prior_oracle_", "lam_q_", "noise_", "cells_problem_",
                "cells_C_", "task_", "lam_p_", "k_p_", "category_"} <= attrs
        fitted_attrs = attrs if fitted_attrs is None else fitted_attrs & attrs
        problems, info = model.frames()
        assert problems.columns == ["task", "problem_id", "scenario", "lam", "k", "category", "loglik", "prior_oracle",
                                *UNCERTAINTY_SCHEMA]
        assert set(problems["scenario"]) == {cls.scenario}
        assert problems["problem_id"].to_list() == model.problems_.tolist()
        assert (info["lam_p"], info["k_p"]) == (model.lam_p_, model.k_p_)
        assert model.fit_stats(model.cell_stats(obs)) is model  # the statistics fit() used
    # on binary scores the two cell statistics coincide: counts of 1, 0, IDK per (problem, C)
    cow, pig = COWFit().cell_stats(obs), PIGFit(likelihood="paper").cell_stats(obs)
    for field in ("problem", "L", "C", "y1", "y0", "nidk", "n"):
        np.testing.assert_array_equal(getattr(cow, field), getattr(pig, field))
    assert isinstance(cow, CellStats) and cow.score_counts is None


def test_cell_stats_checks():
    ok = dict(problem=np.array(["a", "a"]), L=np.array([10, 10]), C=np.array([2, 5]), y1=np.array([1.0, 0.5]),
              y0=np.array([0.0, 0.5]), nidk=np.array([1.0, 0.0]))
    np.testing.assert_array_equal(CellStats(**ok).outcomes(), [[1.0, 0.0, 1.0], [0.5, 0.5, 0.0]])
    for change, message in (({"y1": np.array([1.0])}, "y1 must be a 1-D array aligned"),
                            ({"nidk": np.array([-1.0, 0.0])}, "non-negative"),
                            ({"y0": np.array([np.nan, 0.5])}, "finite"),
                            ({"n": np.array([2.0, 2.0])}, "n must equal")):
        with pytest.raises(ValueError, match=message):
            CellStats(**{**ok, **change}).outcomes()
    with pytest.raises(ValueError, match="must hold integers"):
        COWFit().fit_stats(CellStats(**{**ok, "C": np.array([2.5, 5.0])}))
    assert OBS_COLUMNS == tuple(OBS_SCHEMA)  # one definition: raylc.scoring.OBSERVATION_SCHEMA


@pytest.mark.ray
def test_ray_map_tasks_gives_identical_frames(ray_session, mixed_obs, mixed_fit):
    from raylc.run.tasks import map_tasks

    problems, tasks = fit_observations(mixed_obs, SHORT, mapper=map_tasks)
    assert_frame_equal(problems, mixed_fit[0])
    assert_frame_equal(tasks, mixed_fit[1])


# ------------------------------------------------------------------------------ convergence (issue 17 item 3)
@pytest.mark.parametrize("estimator", [COWFit, PIGFit])
def test_fixed_steps_are_the_default_and_report_their_last_change(estimator):
    """The paper's fixed T stays the default; the fit reports the steps run and the last step's
    change of the summed objective, equal to the difference of the T and T - 1 step fits."""
    obs, _, _ = simulate_cow_task(30, seed=3, take_every=3)
    T = estimator().n_steps
    fit = estimator().fit(obs)
    assert fit.n_iter_ == T
    before = estimator(n_steps=T - 1).fit(obs)
    total = float(np.sum(fit.loglik_[np.isfinite(fit.loglik_)]))
    prev = float(np.sum(before.loglik_[np.isfinite(before.loglik_)]))
    assert fit.ll_change_ == pytest.approx(total - prev, rel=1e-12, abs=1e-9)
    assert np.isnan(estimator(n_steps=1).fit(obs).ll_change_)


@pytest.mark.parametrize("estimator", [COWFit, functools.partial(PIGFit, likelihood="paper")])
def test_a_tolerance_runs_until_the_change_is_below_it(estimator):
    """With ``tol`` > 0 the EM stops at the first step whose change is at most tol (or at
    max_steps), and that fit is the fixed-step fit with T = the steps it ran."""
    obs, _, _ = simulate_cow_task(12, seed=4, take_every=6)  # converges within 200 steps at 1e-2 (COW 119, PIG 52)
    tight = estimator(tol=1e-2, max_steps=200).fit(obs)
    assert 2 < tight.n_iter_ < 200  # converged, after more than two steps
    assert abs(tight.ll_change_) <= 1e-2
    same = estimator(n_steps=tight.n_iter_).fit(obs)
    assert np.array_equal(same.lam_, tight.lam_) and np.array_equal(same.k_, tight.k_)
    assert abs(estimator(n_steps=tight.n_iter_ - 1).fit(obs).ll_change_) > 1e-2  # the step before had not
    capped = estimator(tol=1e-300, max_steps=3).fit(obs)
    assert capped.n_iter_ == 3


def test_the_tasks_table_carries_the_diagnostic_and_the_options_reach_the_estimator():
    obs, _, _ = simulate_cow_task(25, seed=5, take_every=4)
    # the point fit's EM: the diagnostic is the same with the posterior (8.6 s here against 0.12 s)
    fixed = DolceFit(FitOptions(scenario="cow", uncertainty="none")).fit(obs)
    assert fixed.tasks_["em_steps"].to_list() == [10] and fixed.tasks_["em_ll_change"].is_not_nan().all()
    tol = DolceFit(FitOptions(scenario="cow", em_tol=1e-3, em_max_steps=50, uncertainty="none")).fit(obs)
    steps = tol.tasks_["em_steps"][0]
    assert 1 < steps <= 50 and (steps == 50 or abs(tol.tasks_["em_ll_change"][0]) <= 1e-3)
    one = DolceFit(FitOptions(scenario="cow", em_steps_cow=1, uncertainty="none")).fit(obs)
    assert one.tasks_["em_steps"].to_list() == [1] and one.tasks_["em_ll_change"].to_list() == [None]  # not NaN
    with pytest.raises(ValueError):
        FitOptions(em_tol=-1.0)
