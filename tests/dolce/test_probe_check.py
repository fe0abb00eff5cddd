"""The probe check (raylc/dolce/probe_check.py) and the fitted not-covered outcome of COW:
what the probe says without its evidence, fitted, measured and said in one sentence."""

from __future__ import annotations

import polars as pl
import pytest
from dolce_reference import COW_GENERATORS, simulate_cow_task, synth_task

from raylc.dolce.cow import COWFit
from raylc.dolce.fit import fit_observations
from raylc.dolce.options import FitOptions
from raylc.dolce.probe_check import probe_check, probe_check_note, probe_check_notes, probe_check_table


def test_the_check_counts_closed_book_spans_and_spans_without_the_evidence():
    """Problem a (lambda 1): its C = 0 span and its answers other than right at 1 <= C < L count;
    problem b (lambda 0) has no span without its evidence."""
    rows = [("a", 4, 0, 0, None), ("a", 4, 1, 0, 1.0), ("a", 4, 1, 1, 0.0), ("a", 4, 1, 2, None), ("a", 4, 1, 3, 0.0),
            ("a", 4, 2, 0, 0.0), ("a", 4, 4, 0, 0.0), ("b", 4, 0, 0, 1.0), ("b", 4, 1, 0, 0.0)]
    obs = pl.DataFrame(rows, schema={"problem_id": pl.String, "L": pl.Int64, "C": pl.Int64, "start": pl.Int64,
                                     "score": pl.Float64}, orient="row")
    fits = pl.DataFrame({"problem_id": ["a", "b"], "lam": [1, 0], "answered_right": [True, True]})
    got = probe_check(obs, fits, pl.col("score") < 0.5, "fitted", (0.75, 0.25))
    assert got == {"n_closed_book": 2, "idk_closed_book": 0.5, "n_not_covered": 4, "idk_not_covered": 0.25,
                   "n_never_right": 0, "not_covered": "fitted", "not_covered_wrong": 0.75, "not_covered_idk": 0.25}


@pytest.mark.parametrize(("generator", "fitted_wrong", "says"), [
    ("fixed", (0.0, 0.1), "follows the IDK instruction"),
    ("wrong 1", (0.9, 1.0), "ignores the IDK instruction and answers wrongly instead"),
])
def test_the_fit_learns_what_the_probe_says_without_its_evidence(generator, fitted_wrong, says):
    """A probe that says IDK on a span missing its copies (the quickstart's oracle) and one that
    answers wrongly there: COW fits q(0) near 0 and near 1, and the task's note says which (the
    point fit: q is the EM's; tests/dolce/test_uncertainty.py covers the posterior)."""
    obs, _, _ = simulate_cow_task(60, 1, **COW_GENERATORS[generator])
    fit = COWFit().fit(obs)
    assert fitted_wrong[0] <= fit.not_covered_[0] <= fitted_wrong[1]
    _, tasks = fit_observations(obs, FitOptions(uncertainty="none"))
    note = probe_check_notes(tasks)[0]
    assert says in note
    if "ignores" in says:
        assert "raylc fitted what the probe answers without the evidence" in note


def test_the_paper_oracle_on_a_probe_that_never_abstains_says_to_refit():
    obs, _, _ = simulate_cow_task(40, 2, **COW_GENERATORS["wrong 1"])
    _, tasks = fit_observations(obs, FitOptions(uncertainty="none", not_covered="idk"))
    row = tasks.row(0, named=True)
    assert (row["not_covered"], row["not_covered_wrong"], row["not_covered_idk"]) == ("idk", 0.0, 1.0)
    assert "refit with fit.not_covered: fitted" in probe_check_note(row)


def test_too_few_spans_and_pig_subsets_get_their_own_sentence():
    base = {"task": "t", "subset": "t", "n_closed_book": 3, "idk_closed_book": 0.0, "not_covered": None,
            "not_covered_wrong": None, "not_covered_idk": None}
    assert "too few spans" in probe_check_note(base | {"scenario": "COW", "n_not_covered": 2, "idk_not_covered": 0.0})
    pig = probe_check_note(base | {"scenario": "PIG", "n_not_covered": 30, "idk_not_covered": 0.0})
    assert "hardly depends on which of the two the probe gives" in pig


def test_old_option_name_of_algorithm_2_reads_as_paper():
    assert FitOptions(pig_likelihood="hit_rate").pig_likelihood == "paper"
    assert FitOptions().pig_likelihood == "binned" and FitOptions().not_covered == "fitted"


@pytest.mark.parametrize("share", [0.4996, 0.49996, 0.499])
def test_a_share_just_under_the_threshold_never_reads_as_the_threshold(share):
    row = {"task": "t", "subset": "t", "scenario": "COW", "n_closed_book": 3, "idk_closed_book": 0.0,
           "n_not_covered": 1000, "idk_not_covered": share, "not_covered": "fitted",
           "not_covered_wrong": 0.5, "not_covered_idk": 0.5}
    note = probe_check_note(row)
    assert "ignores the IDK instruction" in note and "(50% of its 1,000" not in note
    shown = float(note.split("(")[1].split("%")[0])
    assert shown < 50 and abs(shown - 100 * share) < 0.1


@pytest.mark.parametrize("scenario", ["cow", "pig"])
def test_a_wrong_answer_with_a_small_f1_counts_as_wrong_in_both_scenarios(scenario):
    """F1 scores a wrong answer above 0 (here U(0, .12)), and 30% of the misses are IDK: both
    scenarios' checks count those answers as wrong (below the cut), so the IDK share is near 30%,
    not the 100% of counting only exact zeros as wrong."""
    obs = synth_task("t", 12, 0, seed=1)
    _, tasks = fit_observations(obs, FitOptions(scenario=scenario, uncertainty="none"))
    row = tasks.row(0, named=True)
    assert row["scenario"] == scenario.upper() and row["n_not_covered"] >= 100
    assert 0.15 <= row["idk_not_covered"] <= 0.45


@pytest.mark.parametrize("scenario", ["cow", "pig"])
def test_problems_never_answered_right_are_flagged_counted_and_named(scenario):
    """Two problems whose every span is answered wrongly (one with IDK among the wrong answers,
    one with only small F1 scores): answered_right is false for exactly those two, the task
    counts them, and its note says their categories say nothing (the paper's limitation: with all
    outcomes 0 the mixture cannot tell the source); a table written before the count reads."""
    obs = synth_task("t", 8, 8, seed=2)
    never = sorted(obs["problem_id"].unique())[::8][:2]  # one COW-like, one PIG-like problem
    obs = obs.with_columns(score=pl.when(~pl.col("problem_id").is_in(never)).then(pl.col("score"))
                           .when(pl.col("C") % 2 == 1).then(None).otherwise(pl.col("score") * 0.1))
    problems, tasks = fit_observations(obs, FitOptions(scenario=scenario, uncertainty="none"))
    assert sorted(problems.filter(~pl.col("answered_right"))["problem_id"]) == never
    row = tasks.row(0, named=True)
    assert row["n_never_right"] == 2
    assert "2 problems were never answered right at any span" in probe_check_note(row)
    old = tasks.drop("n_never_right")
    assert "n_never_right" not in probe_check_table(old).columns and len(probe_check_table(old)) == 1
    assert "never answered right" not in probe_check_notes(old)[0]
    assert "1 problem was never" in probe_check_note(row | {"n_never_right": 1})
    assert "never answered" not in probe_check_note(row | {"n_never_right": 0})
