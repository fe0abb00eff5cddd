"""The report of a length-sweep run: mean score per task and axis point, LongScore (100-LongBench
Eq. 1-2) with bootstrap CIs, the suite's own sections, figures and ``summary.md``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import polars as pl
from rich.console import Console

from raylc.io.figures import png_bytes
from raylc.io.store import Store
from raylc.io.tables import console as screen
from raylc.io.tables import markdown_table, rich_table
from raylc.sweep.longscore import longscore
from raylc.sweep.stages import scores_for_longscore

if TYPE_CHECKING:
    from raylc.run.skeleton import Run
    from raylc.spec import Job

REPORT_TABLES = ("per_task_length", "summary")  # plus the suite's sections (report_sections)


def write_length_report(run: Run, job: Job, scores: pl.DataFrame, n_boot: int = 200) -> dict[str, pl.DataFrame]:
    """The report of a length-controlled run under ``<run>/report/``: mean score per task and
    axis point, LongScore tables and figures (when the suite has base and long points; bootstrap
    CIs over samples, per (model, task) as Ray tasks), the suite's sections, ``summary.md``."""
    suite = job.suite
    store = Store(run.store.uri(run.run_id, "report"))
    kept = scores.filter(pl.col("kept"))
    axis = suite.axis
    tables: dict[str, pl.DataFrame] = {
        "per_task_length": kept.group_by("task", axis).agg(
            n=pl.len(), score=pl.col("score").mean(), context_tokens=pl.col("context_tokens").mean().round(0),
            **({"visible_tokens": pl.col("visible_tokens").mean().round(0),
                "truncated": pl.col("truncated").sum().cast(pl.Int64)} if "truncated" in kept.columns else {}),
        ).sort("task", axis),
    }
    md = [f"# raylc report: {run.run_id}", "", f"Job `{job.name}` ({suite.kind}), model `{job.model_name()}`, "
          f"seed {job.seed}, fingerprint `{job.fingerprint()}`.", "", "## Mean score per task and length", "",
          markdown_table(tables["per_task_length"].with_columns(pl.col("score").round(4)))]
    base = suite.longscore_base()
    lc_input = scores_for_longscore(kept, job.model_name(), axis) if base else None
    if lc_input is not None and lc_input["length"].is_in(base).any() and (~lc_input["length"].is_in(base)).any():
        result = longscore(lc_input, base, n_boot=n_boot, seed=job.seed, mapper=run.mapper())
        result = {name: frame.select(pl.lit(run.run_id).alias("run_id"), pl.all()) if "model" in frame.columns else frame
                  for name, frame in result.items()}  # every summary table names its run (raylc compare)
        tables.update(result)
        write_longscore_result(result, store)
        cols = ["task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi", "warning"]
        md += ["", f"## LongScore (base {axis} {', '.join(map(str, base))}; LC in %, averaged over the others)",
               "", markdown_table(result["summary"].select(cols).with_columns(
                   pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2)))]
    sections = suite.report_sections(scores)
    for name, heading, table in sections:
        tables[name] = table
        md += ["", f"## {heading}", "", markdown_table(table)]
    for name in ("per_task_length", *(name for name, _, _ in sections)):
        store.write_table(tables[name], f"{name}.parquet")
    store.write_text("\n".join(md) + "\n", "summary.md")
    print_length_report(tables, headings={name: heading for name, heading, _ in sections})
    return tables


def write_longscore_result(result: dict[str, pl.DataFrame], store: Store) -> None:
    """Each LongScore frame as ``<name>.parquet`` and the figures, under ``store``'s root. The
    figures are drawn first: a plotting failure leaves nothing half-written."""
    figures = longscore_figures(result)
    for name, frame in result.items():
        store.write_table(frame, f"{name}.parquet")
    for name, data in figures.items():
        store.write_bytes(data, name)


def longscore_figures(result: dict[str, pl.DataFrame]) -> dict[str, bytes]:
    """The PNG figures of a LongScore result, by file name."""
    from raylc.sweep.plots import plot_correlation_heatmap, plot_longscore_vs_length, plot_score_vs_length

    draw = {"score_vs_length.png": lambda path: plot_score_vs_length(result["per_length"], path),
            "longscore_vs_length.png": lambda path: plot_longscore_vs_length(result["per_length"], path)}
    if "correlation" in result:
        draw["task_correlation.png"] = lambda path: plot_correlation_heatmap(result["correlation"], path)
    return png_bytes(draw)


def print_length_report(tables: dict[str, pl.DataFrame], console: Optional[Console] = None,
                        headings: Optional[dict[str, str]] = None) -> None:
    """The tables of a length-controlled run (:func:`write_length_report`); other tables than
    the per-length scores and LongScore are the suite's sections, printed under ``headings``."""
    console = console or screen()
    headings = headings or {}
    console.print(rich_table(tables["per_task_length"].with_columns(pl.col("score").round(4)),
                             "Mean score per task and length"))
    if "summary" in tables:
        console.print(rich_table(tables["summary"].select("model", "task", "base", "avg_score", "avg_lc").with_columns(
            pl.col("base", "avg_score", "avg_lc").round(2)), "LongScore (LC in %, averaged over long lengths)"))
    for name, table in tables.items():
        if name not in ("per_task_length", "summary", "per_length", "correlation", "rankings"):
            console.print(rich_table(table, headings.get(name, name)))
