"""Report: category shares per task and planted-category recovery, as rich tables and Markdown."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from raylc.dolce import CATEGORIES
from raylc.store import Store, StoreError

REPORT_TABLES = ("categories", "recovery", "problems")
LENGTH_REPORT_TABLES = ("per_task_length", "summary", "longbench_v2", "prior_knowledge")


def category_matrix(categories: pl.DataFrame) -> pl.DataFrame:
    """One row per task subset (COW/PIG split), one column per category I..V (share), plus ``n``."""
    keys = ["subset", "scenario"]
    wide = categories.pivot(on="category", index=keys, values="share")
    wide = wide.with_columns(pl.lit(0.0).alias(c) for c in CATEGORIES if c not in wide.columns).fill_null(0.0)
    totals = categories.group_by(keys).agg(n=pl.col("n").sum())
    return wide.join(totals, on=keys).select(*keys, "n", *CATEGORIES).sort(keys)


def rich_table(df: pl.DataFrame, title: str, pct: tuple[str, ...] = ()) -> Table:
    table = Table(title=title)
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
    for row in df.iter_rows():
        table.add_row(*[f"{v:.1%}" if c in pct else str(v) for c, v in zip(df.columns, row)])
    return table


def _markdown_table(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> str:
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for row in df.iter_rows():
        lines.append("| " + " | ".join(f"{v:.1%}" if c in pct else str(v) for c, v in zip(df.columns, row)) + " |")
    return "\n".join(lines)


def markdown(tables: dict[str, pl.DataFrame], manifest: dict[str, Any]) -> str:
    """The Markdown summary written to ``report/summary.md``."""
    matrix = category_matrix(tables["categories"])
    parts = [
        f"# raylc report: {manifest.get('run_id', '?')}",
        "",
        f"Job `{manifest.get('job', {}).get('name', '?')}`, seed {manifest.get('seed')}, "
        f"fingerprint `{manifest.get('fingerprint')}`.",
        "",
        "## DOLCE focus categories (share of problems per task subset)",
        "",
        "I: closed-book (lambda = 0); II: retrieval, redundant; III: retrieval; "
        "IV: moderate complexity; V: holistic understanding (lambda > max C).",
        "",
        _markdown_table(matrix, pct=CATEGORIES),
        "",
        "![categories](categories.png) ![lambda-k](lambda_k.png)",
    ]
    if "recovery" in tables:
        parts += ["", "## Planted-category recovery", "", _markdown_table(tables["recovery"], pct=("recovery",))]
    return "\n".join(parts) + "\n"


def stage_table(manifest: dict[str, Any]) -> str:
    """Per-stage status, wall time and counts (requests, tokens, errors for infer) as text."""
    table = Table(title=f"run {manifest.get('run_id', '?')}")
    for col in ("stage", "status", "seconds", "counts"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for stage, state in manifest.get("stages", {}).items():
        counts = ", ".join(f"{k}={v:,}" for k, v in (state.get("rows") or {}).items())
        table.add_row(stage, state.get("status", "?"), f"{state.get('seconds', 0):.1f}", counts)
    buf = io.StringIO()
    Console(file=buf, width=120).print(table)
    return buf.getvalue().rstrip()


def print_report(tables: dict[str, pl.DataFrame], console: Console | None = None) -> None:
    console = console or Console()
    if "categories" not in tables:
        return print_length_report(tables, console)
    console.print(rich_table(category_matrix(tables["categories"]), "DOLCE focus categories", pct=CATEGORIES))
    if "recovery" in tables:
        console.print(rich_table(tables["recovery"], "Planted-category recovery", pct=("recovery",)))


def print_length_report(tables: dict[str, pl.DataFrame], console: Console | None = None) -> None:
    """The tables of a length-controlled run (:func:`raylc.length_report.write_length_report`)."""
    console = console or Console()
    console.print(rich_table(tables["per_task_length"].with_columns(pl.col("score").round(4)),
                             "Mean score per task and length"))
    if "summary" in tables:
        console.print(rich_table(tables["summary"].select("model", "task", "base", "avg_score", "avg_lc").with_columns(
            pl.col("base", "avg_score", "avg_lc").round(2)), "LongScore (LC in %, averaged over long lengths)"))
    if "longbench_v2" in tables:
        console.print(rich_table(tables["longbench_v2"], "LongBench v2 (accuracy %)"))
    if "prior_knowledge" in tables:
        console.print(rich_table(tables["prior_knowledge"], "QA prior-knowledge filter: samples dropped"))


def write_report(run, tables: dict[str, pl.DataFrame], fits: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    """Write the report tables, figures and ``summary.md`` for ``run`` and print them."""
    for name, df in tables.items():
        run.write(df, f"report/{name}.parquet")
    for name, data in figures(*fits).items():
        run.store.write_bytes(data, run.run_id, "report", name)
    run.store.write_text(markdown(tables, run.manifest), run.run_id, "report", "summary.md")
    print_report(tables)


def figures(problem_fits: pl.DataFrame, task_fits: pl.DataFrame) -> dict[str, bytes]:
    """PNG figures: category bars per task (DOLCE Figure 2), lambda-k scatter (Figure 11)."""
    from raylc.plots import plot_categories, plot_lambda_k

    with tempfile.TemporaryDirectory() as tmp:
        paths = [plot_categories(task_fits, Path(tmp, "categories.png")),
                 plot_lambda_k(problem_fits, Path(tmp, "lambda_k.png"))]
        return {Path(p).name: Path(p).read_bytes() for p in paths}


def load_report(run_dir: str) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Read a finished run's report tables and manifest from ``run_dir`` (path or s3:// URI)."""
    root, _, run_id = run_dir.rstrip("/").rpartition("/")
    store = Store(root or ".")
    manifest = store.read_json(run_id, "manifest.json")
    if manifest is None:
        raise StoreError(f"{run_dir}: not a raylc run (no manifest.json)")
    tables = {}
    for name in (*REPORT_TABLES, *LENGTH_REPORT_TABLES):
        if store.exists(run_id, "report", f"{name}.parquet"):
            tables[name] = store.read_table(run_id, "report", f"{name}.parquet")
    if "categories" not in tables and "per_task_length" not in tables:
        raise StoreError(f"{run_dir}: the run has no report yet (run it to completion with `raylc run`)")
    return tables, manifest
