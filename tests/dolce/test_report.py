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
    assert matrix.columns == ["task", "subset", "scenario", "n", "I", "II", "III", "IV", "V"]
    assert matrix.rows() == [("qa", "qa", "cow", 4, 0.25, 0.0, 0.5, 0.25, 0.0),
                             ("sum", "sum-pig", "pig", 4, 0.0, 0.0, 0.0, 0.25, 0.75)]


def test_category_matrix_keeps_a_task_named_like_another_tasks_subset_apart():
    other = CATEGORIES_TABLE.filter(pl.col("task") == "sum").with_columns(task=pl.lit("sum-pig"))
    matrix = category_matrix(pl.concat([CATEGORIES_TABLE, other]))
    assert matrix.select("task", "subset", "V").rows() == [("qa", "qa", 0.0), ("sum", "sum-pig", 0.75),
                                                           ("sum-pig", "sum-pig", 0.75)]


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


def test_the_report_page_and_summary_carry_the_probe_check():
    """The probe check of the fit reaches the report tables (``probe``), the printed report, the
    page and summary.md, with its sentence; a table written before it existed has none."""
    from raylc.dolce.report import page
    from raylc.dolce.stages import report

    probe = {"n_closed_book": 10, "idk_closed_book": 0.0, "n_not_covered": 61, "idk_not_covered": 0.0,
             "not_covered": "fitted", "not_covered_wrong": 1.0, "not_covered_idk": 0.0}
    problems = pl.DataFrame({"task": ["t"], "subset": ["t"], "scenario": ["COW"], "problem_id": ["p"],
                             "category": ["III"], "lam": [1], "k": [1]})
    tasks = pl.DataFrame([{"task": "t", "subset": "t", "scenario": "COW", "n_problems": 1,
                           **{f"share_{c}": float(c == "III") for c in ("I", "II", "III", "IV", "V")},
                           **{f"share_{c}_{e}": float(c == "III") for c in ("I", "II", "III", "IV", "V")
                              for e in ("lo", "hi")}, "share_interval": POSTERIOR_INTERVAL, **probe}])
    tables = report(problems, tasks, pl.DataFrame(), pl.DataFrame())
    assert tables["probe"].row(0, named=True)["n_not_covered"] == 61
    out = io.StringIO()
    print_report(tables, Console(file=out, width=200))
    sentence = "t: the probe ignores the IDK instruction and answers wrongly instead"
    assert sentence in out.getvalue()
    assert sentence in markdown(tables, {"run_id": "r"})
    html = page(tables, {"categories.png": b"", "lambda_k.png": b""}, {"run_id": "r"}, tasks).render()
    assert "Probe check" in html and sentence in html
    old = report(problems, tasks.drop("n_not_covered"), pl.DataFrame(), pl.DataFrame())
    assert "probe" not in old
