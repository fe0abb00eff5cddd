"""Report: category shares per task and planted-category recovery, as rich tables and Markdown."""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from raylc.dolce import CATEGORIES
from raylc.dolce.categories import CATEGORY_LEGEND, wilson
from raylc.dolce.probe_check import probe_check_notes
from raylc.io.figures import png_bytes
from raylc.io.tables import console as screen
from raylc.io.tables import markdown_table, rich_table

PROBE_HEADING = "Probe check: does the probe say IDK where DOLCE's oracle would?"
PROBE_PCT = ("idk_closed_book", "idk_not_covered", "not_covered_wrong", "not_covered_idk")


def category_matrix(categories: pl.DataFrame) -> pl.DataFrame:
    """One row per task subset (COW/PIG split), one column per category I..V (share), plus ``n``;
    keyed by task and subset, as every table of the fit is (a task may be named like another
    task's subset, ``a/COW``)."""
    keys = [c for c in ("task", "subset", "scenario") if c in categories.columns]
    wide = categories.pivot(on="category", index=keys, values="share")
    wide = wide.with_columns(pl.lit(0.0).alias(c) for c in CATEGORIES if c not in wide.columns).fill_null(0.0)
    totals = categories.group_by(keys).agg(n=pl.col("n").sum())
    return wide.join(totals, on=keys).select(*keys, "n", *CATEGORIES).sort(keys)


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
        markdown_table(matrix, pct=CATEGORIES),
        "",
        f"With 95% intervals: {interval_note(tables['categories'])}",
        "",
        markdown_table(shares_with_intervals(tables["categories"])),
        "",
        "![categories](categories.png) ![lambda-k](lambda_k.png)",
    ]
    if "probe" in tables:
        parts += ["", f"## {PROBE_HEADING}", "", markdown_table(tables["probe"], pct=PROBE_PCT), "",
                  *[f"- {note}" for note in probe_check_notes(tables["probe"])]]
    if "recovery" in tables:
        parts += ["", "## Planted-category recovery", "",
                  markdown_table(tables["recovery"], pct=("recovery", "mean_confidence"))]
    return "\n".join(parts) + "\n"


def print_legend(console: Console) -> None:
    """The categories' legend (:data:`raylc.dolce.categories.CATEGORY_LEGEND`) under a table."""
    console.print("Categories (DOLCE Figure 1; lambda_p = k_p: the first tertile of the task's observation "
                  "lengths; lambda_q: the problem's longest partial observation):\n  " + "\n  ".join(CATEGORY_LEGEND),
                  highlight=False)


def print_report(tables: dict[str, pl.DataFrame], console: Console | None = None) -> None:
    console = console or screen()
    console.print(rich_table(shares_with_intervals(tables["categories"]),
                             "DOLCE focus categories: share of problems [95% interval]"))
    console.print(f"Share: {interval_note(tables['categories'])}", highlight=False, markup=False)
    print_legend(console)
    print_probe_check(tables, console)
    if "recovery" in tables:
        lo, hi = wilson(pl.col("recovered"), pl.col("n_problems"))
        console.print(rich_table(tables["recovery"].with_columns(recovery_lo=lo, recovery_hi=hi),
                                 "Planted-category recovery (95% Wilson interval over the problems; a calibrated "
                                 "mean confidence is close to the recovery)",
                                 pct=("recovery", "recovery_lo", "recovery_hi", "mean_confidence")))
        console.print("One seed's draw: recovery varies with the seed (the README gives its distribution, "
                      "tests/benchmarks/recovery_over_seeds.py).", highlight=False)


def print_probe_check(tables: dict[str, pl.DataFrame], console: Console) -> None:
    """The probe check (:mod:`raylc.dolce.probe_check`): its table, then one sentence per task."""
    if "probe" not in tables:
        return
    console.print(rich_table(tables["probe"], PROBE_HEADING, pct=PROBE_PCT))
    for note in probe_check_notes(tables["probe"]):
        console.print(note, highlight=False, markup=False)


def shares_with_intervals(categories: pl.DataFrame) -> pl.DataFrame:
    """The stored shares (``report/categories.parquet``: the fit's posterior-mean share and its
    95% interval, :mod:`raylc.dolce.shares`) as ``p% [lo, hi]``, one row per task subset; the
    one formatting of shares for the terminal, ``summary.md``, the page and ``raylc compare``."""
    frame = categories
    if "n_problems" not in frame.columns:  # a table written before the shares had their own module
        frame = frame.with_columns(n_problems=pl.col("n").sum().over("task", "subset"))
    pct = {c: pl.col(c).mul(100).round(1) for c in ("share", "share_lo", "share_hi") if c in frame.columns}
    cell = pl.format("{}% [{}, {}]", *pct.values()) if len(pct) == 3 else pl.format("{}%", pct["share"])
    keys = [c for c in ("run_id", "model", "task", "subset", "scenario") if c in frame.columns]
    wide = frame.with_columns(cell=cell).pivot("category", index=[*keys, "n_problems"], values="cell")
    return wide.select(*keys, pl.col("n_problems").alias("n"),
                       *[c for c in CATEGORIES if c in wide.columns]).sort(keys)


def interval_note(categories: pl.DataFrame) -> str:
    """What the shares and their intervals are (the ``interval`` column; :mod:`raylc.dolce.shares`)."""
    kinds = categories["interval"].drop_nulls().unique(maintain_order=True).to_list() \
        if "interval" in categories.columns else []
    return ("the posterior-mean share of the task's problems in each category; " if any(
        k.startswith("95% posterior") for k in kinds) else "the share of the task's problems in each category; ") + \
        ("; ".join(kinds) or "95% interval (a table written before issue 29)")


def page(tables: dict[str, pl.DataFrame], pngs: dict[str, bytes], manifest: dict[str, Any],
         task_fits: pl.DataFrame | None = None):
    """``report/index.html`` of a DOLCE run (:class:`raylc.io.page.Page`): category shares with
    intervals and the legend first, then the probe check, recovery, the figures, the EM per task
    subset, and what the run did."""
    from raylc.io.page import Page, image_html, run_facts, table_html, text_html

    job = manifest.get("job") or {}
    probe = job.get("probe") or {}
    out = Page(f"raylc report: {manifest.get('run_id')}",
               f"DOLCE run of job {job.get('name')} on probe {probe.get('model') or probe.get('backend')}, "
               f"seed {manifest.get('seed')}, fingerprint {manifest.get('fingerprint')}")
    out.headline.append(("Focus categories per task (share of problems, 95% interval)",
                         [table_html(shares_with_intervals(tables["categories"])),
                          text_html(f"Share: {interval_note(tables['categories'])}."),
                          *[text_html(line) for line in CATEGORY_LEGEND]]))
    if "probe" in tables:
        out.headline.append((PROBE_HEADING, [table_html(tables["probe"], pct=PROBE_PCT),
                                             *[text_html(note) for note in probe_check_notes(tables["probe"])]]))
    if "recovery" in tables:
        rec = tables["recovery"]
        lo, hi = wilson(pl.col("recovered"), pl.col("n_problems"))
        out.headline.append(("Planted-category recovery (95% Wilson interval over the problems)",
                             [table_html(rec.with_columns(recovery_lo=lo, recovery_hi=hi),
                                         pct=("recovery", "recovery_lo", "recovery_hi", "mean_confidence"))]))
    out.details.append(("Figure 2: category shares per task", [image_html(pngs["categories.png"], "category shares")]))
    out.details.append(("Estimated complexity and redundancy per problem",
                        [image_html(pngs["lambda_k.png"], "lambda and k")]))
    if task_fits is not None and "em_steps" in task_fits.columns:
        em = task_fits.select("task", "subset", "scenario", "n_problems", "em_steps", "em_ll_change",
                              "p_noise_1", "p_noise_0", "p_noise_idk")
        out.details.append(("EM per task subset: steps run and the last step's change of the summed objective",
                            [table_html(em), text_html(em_note(job.get("fit") or {}))]))
    out.run.append(("What the run did", run_facts(manifest)))
    return out


def em_note(fit: dict[str, Any]) -> str:
    """What ``em_steps`` and ``em_ll_change`` mean for the job's fit options (the ``fit`` block;
    a key it lacks takes :class:`~raylc.dolce.options.FitOptions`' default)."""
    from raylc.dolce.options import FitOptions

    opts = {**FitOptions().model_dump(), **fit}
    meaning = ("em_ll_change is the last step's change of the subset's summed log-likelihood (all its "
               "problems' observations, in nats)")
    tol = float(opts["em_tol"] or 0.0)
    if tol > 0:
        return (f"The EM ran to a tolerance: until |em_ll_change| <= {tol:g}, at most {opts['em_max_steps']} "
                f"steps; {meaning}. A subset whose em_steps reached that bound stopped before the tolerance.")
    return (f"The EM ran the paper's fixed T steps (Algorithms 1 and 2: {opts['em_steps_cow']} for COW, "
            f"{opts['em_steps_pig']} for PIG), as DOLCE reports its results, not to a tolerance; {meaning}. "
            "A change other than 0 says the objective was still moving when the T steps ended, which the paper's "
            "procedure accepts (with fit.pig_likelihood paper, Algorithm 2's argmax step does not make PIG's "
            "objective rise at every step, so its change may be negative; empty: the EM ran one step); to run "
            "until it stops, set fit.em_tol in the job (or raylc fit --em-tol), for example 1e-6.")


#: the file names of :func:`figures`
FIGURES = ("categories.png", "lambda_k.png")


def figures(problem_fits: pl.DataFrame, task_fits: pl.DataFrame) -> dict[str, bytes]:
    """PNG figures: category bars per task (DOLCE Figure 2), lambda-k scatter (Figure 11)."""
    from raylc.dolce.plots import plot_categories, plot_lambda_k

    bars, scatter = FIGURES
    return png_bytes({bars: lambda path: plot_categories(task_fits, path),
                      scatter: lambda path: plot_lambda_k(problem_fits, path)})
