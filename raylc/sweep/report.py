"""The report of a length-sweep run: mean score per task and axis point, LongScore (100-LongBench
Eq. 1-2) with bootstrap CIs, the suite's own sections, figures and ``summary.md``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import polars as pl
from rich.console import Console

from raylc.io.figures import png_bytes
from raylc.io.schemas import check_tables
from raylc.io.tables import console as screen
from raylc.io.tables import markdown_table, rich_table
from raylc.sweep.longscore import OVERALL, longscore, longscore_applies
from raylc.sweep.stages import scores_for_longscore
from raylc.sweep.tables import LONGSCORE_TABLES
from raylc.sweep.tables import REPORT_TABLES as REPORT_SCHEMAS

if TYPE_CHECKING:
    from raylc.run.runner import Run
    from raylc.spec import Job

RUN_N_BOOT = 200  #: bootstrap resamples of a run's LongScore intervals; the seed is the job's


def run_bootstrap(job: Job, summary: Optional[pl.DataFrame] = None) -> tuple[int, int]:
    """(n_boot, seed) of a run's LongScore bootstrap: as its stored ``report/summary.parquet``
    states it (columns n_boot, boot_seed), else the rule every run has followed,
    (:data:`RUN_N_BOOT`, the job's seed)."""
    if summary is not None and {"n_boot", "boot_seed"} <= set(summary.columns) and summary.height:
        return int(summary["n_boot"][0]), int(summary["boot_seed"][0])
    return RUN_N_BOOT, int(job.seed)


def longscore_of_run(kept: pl.DataFrame, job: Job, n_boot: int, seed: int, mapper=None,
                     base: Optional[Sequence[int]] = None) -> dict[str, pl.DataFrame]:
    """LongScore (:func:`raylc.sweep.longscore.longscore`) of one length run's kept scores, its
    model named as the probe's (the bootstrap generator is seeded from (seed, model, task)), so
    the run's report, ``raylc compare`` and ``raylc longscore`` on the run compute one bootstrap."""
    base = list(job.suite.longscore_base() if base is None else base)
    return longscore(scores_for_longscore(kept, job.model_name(), job.suite.axis), base, n_boot=n_boot, seed=seed,
                     mapper=mapper)


def bootstrap_note(summary: pl.DataFrame) -> str:
    """What a LongScore table's intervals are: percentile CIs from n_boot resamples and the seed."""
    pairs = summary.select("n_boot", "boot_seed").unique(maintain_order=True) if "n_boot" in summary.columns else None
    if pairs is None or not pairs.height:
        return "95% bootstrap CI"
    if (pairs["n_boot"] == 0).all():
        return "no bootstrap (n_boot = 0): no CI"
    return "95% percentile bootstrap CI over samples, " + "; ".join(
        f"n_boot = {n}, seed = {sd}" for n, sd in pairs.iter_rows())


def write_length_report(run: Run, job: Job, scores: pl.DataFrame, n_boot: int = RUN_N_BOOT) -> dict[str, pl.DataFrame]:
    """The report of a length-controlled run under ``<run>/report/``: mean score per task and
    axis point, LongScore tables and figures (when the suite has base points and one above them; bootstrap
    CIs over samples, per (model, task) as Ray tasks), the suite's sections, ``summary.md`` and
    ``index.html``, written together once made."""
    suite = job.suite
    pngs: dict[str, bytes] = {}
    kept = scores.filter(pl.col("kept"))
    axis = suite.axis
    tables: dict[str, pl.DataFrame] = {
        "per_task_length": kept.group_by("task", axis).agg(  # another axis (n_pieces): its token length beside it
            **({"length": pl.col("length").max()} if axis != "length" and "length" in kept.columns else {}),
            n=pl.len(), score=pl.col("score").mean(), context_tokens=pl.col("context_tokens").mean().round(0),
            **({"visible_tokens": pl.col("visible_tokens").mean().round(0),
                "truncated": pl.col("truncated").sum().cast(pl.Int64)} if "truncated" in kept.columns else {}),
        ).sort("task", axis),
    }
    md = [f"# raylc report: {run.run_id}", "", f"Job `{job.name}` ({suite.kind}), model `{job.model_name()}`, "
          f"seed {job.seed}, fingerprint `{job.fingerprint()}`.", "", "## Mean score per task and length", "",
          markdown_table(tables["per_task_length"].with_columns(pl.col("score").round(4)))]
    base = suite.longscore_base()
    if longscore_applies(scores_for_longscore(kept, job.model_name(), axis), base):
        result = longscore_of_run(kept, job, n_boot, job.seed, run.mapper())
        result = {name: frame.select(pl.lit(run.run_id).alias("run_id"), pl.all()) if "model" in frame.columns
                  else frame
                  for name, frame in result.items()}  # every summary table names its run (raylc compare)
        tables.update(result)
        pngs = longscore_figures(result)
        cols = ["task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi", "n_boot", "boot_seed", "warning"]
        md += ["", f"## LongScore (base {axis} {', '.join(map(str, base))}; LC in %, averaged over the longer ones; "
               f"{bootstrap_note(result['summary'])})", "", markdown_table(result["summary"].select(cols).with_columns(
                   pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2)))]
    sections = suite.report_sections(scores)
    for name, heading, table in sections:
        tables[name] = table
        md += ["", f"## {heading}", "", markdown_table(table)]
    headings = {name: heading for name, heading, _ in sections}
    tables = check_tables((*REPORT_SCHEMAS, *suite.sections), tables, type(suite).columns)
    page = length_page(tables, pngs, run.manifest.record(), headings, axis).render()
    run.folder.write_outputs("report", tables, {**pngs, "summary.md": "\n".join(md) + "\n", "index.html": page})
    print_length_report(tables, headings=headings)
    return tables


def headline(summary: pl.DataFrame) -> pl.DataFrame:
    """LongScore summary rows, ``overall`` first, with their intervals and warnings."""
    cols = [c for c in ("run_id", "model", "task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi", "n_long",
                        "n_boot", "boot_seed", "warning") if c in summary.columns]
    return (summary.with_columns(_first=pl.col("task") != OVERALL).sort("_first", "task").select(cols)
            .with_columns(pl.col("base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi").round(2)))


def length_page(tables: dict[str, pl.DataFrame], pngs: dict[str, bytes], manifest: dict, headings: dict[str, str],
                axis: str):
    """``report/index.html`` of a length run: LongScore (overall first, with 95% CIs) and the
    figures first, then the suite's sections and the per-length table with truncation, then
    what the run did."""
    from raylc.io.page import Page, image_html, run_facts, table_html, text_html

    job = manifest.get("job") or {}
    probe = job.get("probe") or {}
    out = Page(f"raylc report: {manifest.get('run_id')}",
               f"Length-controlled run of job {job.get('name')} ({(job.get('suite') or {}).get('kind')}) on probe "
               f"{probe.get('model') or probe.get('backend')}, seed {manifest.get('seed')}, "
               f"fingerprint {manifest.get('fingerprint')}")
    if "summary" in tables:
        out.headline.append((f"LongScore (LC in %, mean over the long lengths; {bootstrap_note(tables['summary'])})",
                             [table_html(headline(tables["summary"])),
                              text_html("LC_l = 100 (S_l - Base) / Base, Base the mean score at the base lengths "
                                        "(100-LongBench Eq. 1-2); the overall row applies them to the task means.")]))
        for name, alt in (("score_vs_length.png", "score against length"), ("longscore_vs_length.png", "LongScore")):
            if name in pngs:
                out.headline.append((alt[0].upper() + alt[1:], [image_html(pngs[name], alt)]))
    for name, table in tables.items():
        if name not in ("per_task_length", "summary", "per_length", "correlation", "rankings"):
            out.details.append((headings.get(name, name), [table_html(table)]))
    per = tables["per_task_length"]
    notes = []
    if "truncated" in per.columns and per["truncated"].sum():
        notes.append(text_html(f"{int(per['truncated'].sum())} samples were cut to the model's window: their "
                               "visible_tokens is below context_tokens.", "warn"))
    out.details.append((f"Mean score per task and {axis}",
                        [table_html(per.with_columns(pl.col("score").round(4))), *notes]))
    out.run.append(("What the run did", run_facts(manifest)))
    return out


def write_longscore_result(result: dict[str, pl.DataFrame], out: Any, figures: bool = True) -> dict[str, bytes]:
    """Each LongScore frame as ``<name>.parquet`` and (unless ``figures`` is false) the figures,
    under the output folder ``out`` (a :class:`raylc.io.store.Store`); returns the figures. They
    are drawn first: a plotting failure leaves nothing half-written."""
    pngs = longscore_figures(result) if figures else {}
    out.write_outputs(result, pngs, replaces=(*(schema.path for schema in LONGSCORE_TABLES), *LONGSCORE_FIGURES))
    return pngs


#: the file names of :func:`longscore_figures` (the correlation heatmap only with a correlation table)
LONGSCORE_FIGURES = ("score_vs_length.png", "longscore_vs_length.png", "task_correlation.png")


def longscore_figures(result: dict[str, pl.DataFrame]) -> dict[str, bytes]:
    """The PNG figures of a LongScore result, by file name."""
    from raylc.sweep.plots import plot_correlation_heatmap, plot_longscore_vs_length, plot_score_vs_length

    scores, longscores, heatmap = LONGSCORE_FIGURES
    draw = {scores: lambda path: plot_score_vs_length(result["per_length"], path),
            longscores: lambda path: plot_longscore_vs_length(result["per_length"], path)}
    if "correlation" in result:
        draw[heatmap] = lambda path: plot_correlation_heatmap(result["correlation"], path)
    return png_bytes(draw)


def print_length_report(tables: dict[str, pl.DataFrame], console: Optional[Console] = None,
                        headings: Optional[dict[str, str]] = None) -> None:
    """The tables of a length-controlled run (:func:`write_length_report`); other tables than
    the per-length scores and LongScore are the suite's sections, printed under ``headings``."""
    console = console or screen()
    headings = headings or {}
    if "summary" in tables:  # the headline first: LongScore, overall row on top, with its CI and warnings
        note = bootstrap_note(tables["summary"])
        console.print(rich_table(headline(tables["summary"]).drop("run_id", strict=False),
                                 f"LongScore (LC in %, averaged over long lengths; {note})"))
    for name, table in tables.items():
        if name not in ("per_task_length", "summary", "per_length", "correlation", "rankings"):
            console.print(rich_table(table, headings.get(name, name)))
    console.print(rich_table(tables["per_task_length"].with_columns(pl.col("score").round(4)),
                             "Mean score per task and length"))
