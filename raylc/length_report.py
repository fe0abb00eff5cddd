"""`raylc longscore`: LongScore tables, rankings, correlations and figures from a scores table."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from raylc.longscore import longscore, task_correlation
from raylc.store import Store, StoreError, read_input


def run_longscore(
    scores_uri: str,
    out_uri: str,
    base_lengths: Sequence[int],
    n_boot: int = 0,
    seed: int = 0,
    use_ray: Optional[bool] = None,
) -> dict[str, pl.DataFrame]:
    """Read ``scores_uri``, compute LongScore, write ``per_length``, ``summary``, ``correlation``
    Parquet tables and PNG figures under ``out_uri`` (local or s3://). Per (model, task)
    aggregation runs as Ray tasks when ``use_ray`` (default: when RAY_ADDRESS is set). A table
    that :func:`raylc.longscore.validate_scores` refuses is a :class:`StoreError` line naming the
    file, before anything is written."""
    scores = read_input(scores_uri)
    mapper = None
    if use_ray if use_ray is not None else bool(os.environ.get("RAY_ADDRESS")):
        from raylc.pipeline.ray_exec import map_tasks

        mapper = map_tasks
    try:
        result = longscore(scores, base_lengths, n_boot=n_boot, seed=seed, mapper=mapper)
    except ValueError as exc:
        raise StoreError(f"{scores_uri}: {exc}") from None
    if scores["model"].n_unique() >= 3 and scores["task"].n_unique() >= 2:
        result["correlation"] = task_correlation(scores, by="task")
    _write(result, Store(out_uri))
    return result


def _write(result: dict[str, pl.DataFrame], store: Store) -> None:
    """Each LongScore frame as ``<name>.parquet`` and the figures, under ``store``'s root. The
    figures are drawn first: a plotting failure leaves nothing half-written."""
    figures = _figures(result)
    for name, frame in result.items():
        store.write_table(frame, f"{name}.parquet")
    for name, data in figures.items():
        store.write_bytes(data, name)


def _figures(result: dict[str, pl.DataFrame]) -> dict[str, bytes]:
    """The PNG figures of a LongScore result, by file name."""
    from raylc.plots_length import plot_correlation_heatmap, plot_longscore_vs_length, plot_score_vs_length

    with tempfile.TemporaryDirectory() as tmp:
        paths = [
            plot_score_vs_length(result["per_length"], Path(tmp, "score_vs_length.png")),
            plot_longscore_vs_length(result["per_length"], Path(tmp, "longscore_vs_length.png")),
        ]
        if "correlation" in result:
            paths.append(plot_correlation_heatmap(result["correlation"], Path(tmp, "task_correlation.png")))
        return {Path(path).name: Path(path).read_bytes() for path in paths}


def write_length_report(run, job, scores: pl.DataFrame, n_boot: int = 200) -> dict[str, pl.DataFrame]:
    """The report of a length-controlled run under ``<run>/report/``: mean score per task and
    length, LongScore tables and figures (when the suite has base and long lengths; bootstrap
    CIs over samples), the LongBench v2 splits, the QA prior-knowledge drops, ``summary.md``."""
    from raylc.pipeline.length import base_lengths, dropped_samples, length_axis, model_name, scores_for_longscore
    from raylc.report import _markdown_table, print_length_report

    store = Store(run.store.uri(run.run_id, "report"))
    kept = scores.filter(pl.col("kept"))
    axis = length_axis(job)
    tables: dict[str, pl.DataFrame] = {
        "per_task_length": kept.group_by("task", axis).agg(
            n=pl.len(), score=pl.col("score").mean(), context_tokens=pl.col("context_tokens").mean().round(0)
        ).sort("task", axis),
    }
    md = [f"# raylc report: {run.run_id}", "", f"Job `{job.name}` ({job.suite.kind}), model `{model_name(job)}`, "
          f"seed {job.seed}, fingerprint `{job.fingerprint()}`.", "", "## Mean score per task and length", "",
          _markdown_table(tables["per_task_length"].with_columns(pl.col("score").round(4)))]
    base = base_lengths(job)
    lc_input = scores_for_longscore(kept, model_name(job), axis) if base else None
    if lc_input is not None and lc_input["length"].is_in(base).any() and (~lc_input["length"].is_in(base)).any():
        from raylc.pipeline.ray_exec import ensure_ray, map_tasks

        ensure_ray(job)  # per (model, task) aggregation as Ray tasks, like the DOLCE fits
        result = longscore(lc_input, base, n_boot=n_boot, seed=job.seed, mapper=map_tasks)
        tables.update(result)
        _write(result, store)
        cols = ["task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi", "warning"]
        md += ["", f"## LongScore (base {axis} {', '.join(map(str, base))}; LC in %, averaged over the others)",
               "", _markdown_table(result["summary"].select(cols).with_columns(
                   pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2)))]
    if job.suite.kind == "longbench_v2":
        from raylc.suites.longbench_v2 import longbench_v2_report

        tables["longbench_v2"] = longbench_v2_report(scores).with_columns(pl.col(pl.Float64).round(2))
        md += ["", "## LongBench v2 (accuracy %, compensated: invalid outputs count 0.25)", "",
               _markdown_table(tables["longbench_v2"])]
    if getattr(job.suite, "prior_knowledge_threshold", None) is not None:
        dropped = dropped_samples(scores)
        probed = scores.filter(pl.col("length") == 0).select("task").unique()  # the QA tasks
        total = (scores.filter(pl.col("length") > 0).join(probed, on="task", how="semi")
                 .select("task", "sample_id").unique().group_by("task").len("samples"))
        tables["prior_knowledge"] = total.join(dropped.group_by("task").len("dropped"), on="task", how="left").with_columns(
            pl.col("dropped").fill_null(0).cast(pl.Int64)).sort("task")
        md += ["", f"## QA prior-knowledge filter (no-context score > {job.suite.prior_knowledge_threshold})", "",
               _markdown_table(tables["prior_knowledge"])]
    for name in ("per_task_length", "longbench_v2", "prior_knowledge"):
        if name in tables:
            store.write_table(tables[name], f"{name}.parquet")
    store.write_text("\n".join(md) + "\n", "summary.md")
    print_length_report(tables)
    return tables
