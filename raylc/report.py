"""Report: category shares per task and planted-category recovery, as rich tables and Markdown."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from raylc.pipeline.stages import CATEGORIES
from raylc.store import Store, StoreError

REPORT_TABLES = ("categories", "recovery", "problems")


def category_matrix(categories: pl.DataFrame) -> pl.DataFrame:
    """One row per task, one column per category I..V (share of problems), plus ``n``."""
    wide = categories.pivot(on="category", index="task", values="share").sort("task")
    totals = categories.group_by("task").agg(n=pl.col("n").sum())
    return wide.join(totals, on="task").select("task", "n", *[c for c in CATEGORIES if c in wide.columns])


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
        "## DOLCE focus categories (share of problems per task)",
        "",
        "I: closed-book (lambda = 0); II: retrieval, redundant; III: retrieval; "
        "IV: moderate complexity; V: holistic understanding (lambda > max C).",
        "",
        _markdown_table(matrix, pct=CATEGORIES),
    ]
    if "recovery" in tables:
        parts += ["", "## Planted-category recovery", "", _markdown_table(tables["recovery"], pct=("recovery",))]
    return "\n".join(parts) + "\n"


def print_report(tables: dict[str, pl.DataFrame], console: Console | None = None) -> None:
    console = console or Console()
    console.print(rich_table(category_matrix(tables["categories"]), "DOLCE focus categories", pct=CATEGORIES))
    if "recovery" in tables:
        console.print(rich_table(tables["recovery"], "Planted-category recovery", pct=("recovery",)))


def write_report(run, tables: dict[str, pl.DataFrame]) -> None:
    """Write the report tables and ``summary.md`` for ``run`` and print them."""
    for name, df in tables.items():
        run.write(df, f"report/{name}.parquet")
    run.store.write_text(markdown(tables, run.manifest), run.run_id, "report", "summary.md")
    print_report(tables)


def load_report(run_dir: str) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Read a finished run's report tables and manifest from ``run_dir`` (path or s3:// URI)."""
    root, _, run_id = run_dir.rstrip("/").rpartition("/")
    store = Store(root or ".")
    manifest = store.read_json(run_id, "manifest.json")
    if manifest is None:
        raise StoreError(f"{run_dir}: not a raylc run (no manifest.json)")
    tables = {}
    for name in REPORT_TABLES:
        if store.exists(run_id, "report", f"{name}.parquet"):
            tables[name] = store.read_table(run_id, "report", f"{name}.parquet")
    if "categories" not in tables:
        raise StoreError(f"{run_dir}: the run has no report yet (run it to completion with `raylc run`)")
    return tables, manifest
