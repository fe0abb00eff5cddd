"""The DOLCE report (:mod:`raylc.dolce.report`): the category matrix, ``summary.md`` and the
printed tables, on a hand-made categories table."""

from __future__ import annotations

import io

import polars as pl
from rich.console import Console

from raylc.dolce.report import category_matrix, markdown, print_report
from raylc.dolce.shares import POSTERIOR_INTERVAL

CATEGORIES_TABLE = pl.DataFrame({
    "task": ["qa"] * 5 + ["sum"] * 5,
    "subset": ["qa"] * 5 + ["sum-pig"] * 5,
    "scenario": ["cow"] * 5 + ["pig"] * 5,
    "category": ["I", "II", "III", "IV", "V"] * 2,
    "n": [1, 0, 2, 1, 0, 0, 0, 0, 1, 3],
    "n_problems": [4] * 10,
    "share": [0.25, 0.0, 0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.25, 0.75],
    "share_lo": [0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
    "share_hi": [0.5, 0.0, 0.75, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0],
    "interval": [POSTERIOR_INTERVAL] * 10,
})


def test_category_matrix_is_one_row_per_subset_with_n():
    matrix = category_matrix(CATEGORIES_TABLE)
    assert matrix.columns == ["subset", "scenario", "n", "I", "II", "III", "IV", "V"]
    assert matrix.rows() == [("qa", "cow", 4, 0.25, 0.0, 0.5, 0.25, 0.0),
                             ("sum-pig", "pig", 4, 0.0, 0.0, 0.0, 0.25, 0.75)]


def test_category_matrix_fills_categories_no_problem_has():
    matrix = category_matrix(CATEGORIES_TABLE.filter(pl.col("category").is_in(["III", "V"])))
    assert matrix["I"].to_list() == [0.0, 0.0] and matrix["n"].to_list() == [2, 3]


def test_summary_markdown_has_the_legend_the_shares_and_recovery():
    recovery = pl.DataFrame({"task": ["qa", "(all)"], "n_problems": [4, 4], "recovered": [3, 3],
                             "recovery": [0.75, 0.75]})
    text = markdown({"categories": CATEGORIES_TABLE, "recovery": recovery},
                    {"run_id": "r1", "job": {"name": "quick"}, "seed": 7, "fingerprint": "abc"})
    assert text.startswith("# raylc report: r1\n") and "Job `quick`, seed 7, fingerprint `abc`." in text
    assert "V: holistic understanding" in text and "III: retrieval" in text
    assert "| qa | cow | 4 | 25.0% | 0.0% | 50.0% | 25.0% | 0.0% |" in text
    assert "## Planted-category recovery" in text and "| (all) | 4 | 3 | 75.0% |" in text


def test_printed_report_shows_every_subset():
    out = io.StringIO()
    print_report({"categories": CATEGORIES_TABLE}, Console(file=out, width=120))
    text = out.getvalue()
    assert "DOLCE focus categories" in text and "sum-pig" in text and "75.0%" in text and "Planted" not in text


def test_em_note_says_what_ran_and_never_calls_the_default_fit_unconverged():
    from raylc.dolce.report import em_note

    paper = em_note({"em_steps_cow": 10, "em_steps_pig": 5, "em_tol": 0.0})
    assert "fixed T steps" in paper and "10 for COW" in paper and "5 for PIG" in paper
    assert "had not converged" not in paper and "warning" not in paper.lower()
    tol = em_note({"em_tol": 1e-6, "em_max_steps": 200})
    assert "|em_ll_change| <= 1e-06" in tol and "at most 200 steps" in tol
    assert em_note({}) == paper  # the defaults are the paper's
