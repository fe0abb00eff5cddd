"""The length-sweep report (:mod:`raylc.sweep.report`): LongScore tables and figures written
whole, and the printed tables with the suite's own sections."""

from __future__ import annotations

import io

import polars as pl
import pytest
from rich.console import Console

from raylc.io.store import Store
from raylc.sweep.longscore import longscore
from raylc.sweep.report import print_length_report, write_longscore_result

SCORES = pl.DataFrame({"model": ["m"] * 6, "task": ["a", "a", "a", "b", "b", "b"],
                       "length": [1024, 2048, 4096] * 2, "score": [0.8, 0.6, 0.4, 0.5, 0.5, 0.25]})


def test_longscore_result_tables_and_figures_are_written(tmp_path):
    result = longscore(SCORES, [1024])
    write_longscore_result(result, Store(str(tmp_path)))
    assert {p.name for p in tmp_path.iterdir()} == {"per_length.parquet", "summary.parquet", "score_vs_length.png",
                                                    "longscore_vs_length.png"}
    summary = pl.read_parquet(tmp_path / "summary.parquet").filter(pl.col("task") != "overall").sort("task")
    assert summary["avg_lc"].to_list() == pytest.approx([100 * (0.5 - 0.8) / 0.8, 100 * (0.375 - 0.5) / 0.5])


def test_a_figure_that_fails_leaves_nothing_written(tmp_path, monkeypatch):
    from raylc.sweep import plots

    def broken(*args, **kwargs):
        raise RuntimeError("no figure")

    monkeypatch.setattr(plots, "plot_longscore_vs_length", broken)
    with pytest.raises(RuntimeError, match="no figure"):
        write_longscore_result(longscore(SCORES, [1024]), Store(str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def test_printed_report_has_the_scores_longscore_and_the_suites_sections():
    result = longscore(SCORES, [1024])
    per = SCORES.group_by("task", "length").agg(n=pl.len(), score=pl.col("score").mean(),
                                                context_tokens=pl.col("length"))
    extra = pl.DataFrame({"task": ["a"], "samples": [3], "dropped": [1]})
    out = io.StringIO()
    print_length_report({"per_task_length": per.sort("task", "length"), **result, "prior_knowledge": extra},
                        Console(file=out, width=160), headings={"prior_knowledge": "QA prior-knowledge filter"})
    text = out.getvalue()
    assert "Mean score per task and length" in text and "LongScore" in text
    assert "QA prior-knowledge filter" in text and "dropped" in text and "per_length" not in text


def test_truncated_samples_are_flagged_per_row_and_counted_in_the_report(tmp_path, monkeypatch):
    """A sample whose context the backend cut to fit the window (``truncated_tokens`` of its
    first call) is flagged in scores.parquet, with the length the model saw, and the report
    shows the visible length next to the target and how many samples were cut."""
    from raylc.io.parallel import in_process
    from raylc.run.folder import RunFolder
    from raylc.run.manifest import Manifest
    from raylc.run.runner import Run
    from raylc.spec import parse_job
    from raylc.sweep import stages
    from raylc.sweep.report import write_length_report

    job = parse_job({"name": "t", "store": {"path": str(tmp_path)}, "suite": {
        "kind": "helmet_recall", "tasks": ["json_kv"], "lengths": [200, 700], "base_lengths": [200],
        "samples_per_length": 2, "depths": 2}})
    samples = stages.build_samples(job)
    first = samples.select("task", "sample_id", "length", completion="gold").with_columns(
        error=pl.lit(None, pl.String), truncated_tokens=pl.when(pl.col("length") == 700).then(50).otherwise(0))
    final = stages.final_completions(samples, first, first.clear())
    scores = job.suite.kept(stages.with_visibility(stages.score_samples(final)))
    assert scores.filter(pl.col("truncated"))["length"].unique().to_list() == [700]
    want = scores.select(pl.col("context_tokens") - pl.when(pl.col("length") == 700).then(50).otherwise(0))
    assert scores["visible_tokens"].to_list() == want.to_series().to_list()
    run = Run(RunFolder(str(tmp_path), "r"), job, Manifest(run_id="r", job=job.resolved()))
    monkeypatch.setattr(run, "mapper", lambda: in_process)
    per = write_length_report(run, job, scores, n_boot=0)["per_task_length"]
    assert per.select("length", "truncated").rows() == [(200, 0), (700, 2)]
    assert per["visible_tokens"].to_list() == (per["context_tokens"] - pl.Series([0, 50])).to_list()
    summary = (tmp_path / "r" / "report" / "summary.md").read_text()
    assert "visible_tokens" in summary and "truncated" in summary
