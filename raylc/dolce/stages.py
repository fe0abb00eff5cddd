"""The stages ``build -> sample -> infer -> score -> fit -> report`` as plain Polars functions.

Each function takes and returns Polars frames and runs without Ray; the orchestration
layer (:mod:`raylc.dolce.evaluation` through :class:`raylc.run.runner.Run`) maps them over
Ray Data (per row) and Ray tasks (per benchmark task).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Callable

import numpy as np
import polars as pl

from raylc.dolce import CATEGORIES, assign_categories, fit_observations, tables
from raylc.dolce.probe_check import probe_check_table
from raylc.io.schemas import check_tables
from raylc.scoring import OBSERVATION_SCHEMA, score_spans

if TYPE_CHECKING:
    from raylc.spec import Job
from raylc.text.sampling import sample_spans

STAGES = ("build", "sample", "infer", "score", "fit", "report")


def build(job: Job) -> pl.DataFrame:
    """Problems table of the suite (its registered builder: planted, documents split into units, ...)."""
    return tables.PROBLEMS.check(job.suite.build(job.seed), type(job.suite).columns)


def sample(problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """Observation spans ``task, problem_id, L, C, start``."""
    return tables.SPANS.check(sample_spans(problems, job.sampling, job.seed))


def with_request_ids(spans: pl.DataFrame, problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """``spans`` plus ``request_id`` = hash(probe fingerprint, problem content, C, start)."""
    return request_ids(problems, job)(spans)


def request_ids(problems: pl.DataFrame, job: Job) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """:func:`with_request_ids` for many chunks of spans: the problems' content is hashed once."""
    # one joined string per problem (never a Python object per unit)
    text = problems.select(pl.col("units").list.join("\x1f") + "\x1e" + pl.col("question"))[:, 0]
    content = pl.DataFrame(
        {
            "problem_id": problems["problem_id"],
            "_content": [hashlib.blake2b(t.encode(), digest_size=16).hexdigest() for t in text],
        },
        schema={"problem_id": pl.String, "_content": pl.String},
    )
    key = pl.concat_str(
        [pl.lit(job.probe_fingerprint()), pl.col("problem_id"), pl.col("_content"),
         pl.col("C").cast(pl.String), pl.col("start").cast(pl.String)],
        separator="|",
    )

    def add(spans: pl.DataFrame) -> pl.DataFrame:
        return tables.REQUESTS.check(
            spans.join(content, on="problem_id", how="left", maintain_order="left")
            .with_columns(request_id=key.map_batches(_sha, return_dtype=pl.String))
            .drop("_content")
        )

    return add


def _sha(keys: pl.Series) -> pl.Series:
    return pl.Series([hashlib.blake2b(k.encode(), digest_size=12).hexdigest() for k in keys], dtype=pl.String)


def score(completions: pl.DataFrame, problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """The observation table (``task, problem_id, L, C, start, score, metric``), sorted."""
    return tables.OBSERVATIONS.check(score_spans(completions, problems, job.scoring.metric,
                                                 job.scoring.idk_patterns).sort("task", "problem_id", "C", "start"))


def merge_observations(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Per-shard observation tables as one, sorted by (task, problem_id, C, start); a span
    scored more than once (its request stored by two attempts) keeps its last score.

    Sorts integer codes with a stable ``numpy.lexsort`` and drops duplicates by comparing
    neighbours: the driver's memory stays near the table's own size (a Polars multi-column
    sort and unique over the string keys allocate several times that)."""
    if not parts:
        return pl.DataFrame(schema=OBSERVATION_SCHEMA)
    obs = pl.concat(parts, how="vertical_relaxed")
    ids = obs.select(pl.concat_str("task", pl.lit("\x1f"), "problem_id").alias("k"))["k"]
    names = ids.unique().sort()
    code = ids.replace_strict(names, pl.int_range(names.len(), eager=True), return_dtype=pl.Int64).to_numpy()
    C, start = obs["C"].to_numpy(), obs["start"].to_numpy()
    order = np.lexsort((start, C, code))  # stable: equal keys stay in input order
    code, C, start = code[order], C[order], start[order]
    last = np.r_[(code[1:] != code[:-1]) | (C[1:] != C[:-1]) | (start[1:] != start[:-1]), True]
    return obs[pl.Series(order[last])]


def fit(observations: pl.DataFrame, job: Job, mapper=None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """DOLCE fits per task (and COW/PIG subset); ``mapper`` maps the per-subset fits (e.g. over Ray tasks)."""
    problem_fits, task_fits = fit_observations(observations, job.fit, mapper=mapper)
    return tables.FIT_PROBLEMS.check(problem_fits), tables.FIT_TASKS.check(task_fits)


def longest_partial(observations: pl.DataFrame) -> pl.DataFrame:
    """lambda_q per problem: its largest partial observation length (C < L), as ``problem_id,
    lam_q``; also of its own output (so it can run chunk by chunk, then over the chunks)."""
    lam_q = pl.col("lam_q") if "lam_q" in observations.columns else pl.col("C").filter(pl.col("C") < pl.col("L"))
    return observations.group_by("problem_id").agg(lam_q=lam_q.max()).drop_nulls("lam_q")


def planted_categories(problem_fits: pl.DataFrame, problems: pl.DataFrame, lam_q: pl.DataFrame,
                       tasks: pl.DataFrame) -> pl.DataFrame:
    """Category each planted (lambda, k) belongs to, with the thresholds the fit used.

    lambda_p, k_p come from the problem's fitted subset (``tasks``); lambda_q is the
    problem's largest partial observation length (``lam_q``, of :func:`longest_partial`;
    0 for a problem without one), exactly as for the fitted values.
    """
    df = (
        problem_fits.select("task", "subset", "problem_id")
        .join(problems.select("problem_id", "planted_lam", "planted_k"), on="problem_id", how="left")
        .join(lam_q, on="problem_id", how="left")
        .join(tasks.select("task", "subset", "lam_p", "k_p"), on=["task", "subset"], how="left")
        .with_columns(pl.col("lam_q").fill_null(0))
    )
    cats = assign_categories(
        df["planted_lam"].to_numpy(), df["planted_k"].to_numpy(), df["lam_p"].to_numpy(), df["k_p"].to_numpy(),
        df["lam_q"].to_numpy(),
    )
    return df.select("problem_id", "planted_lam", "planted_k").with_columns(
        planted_category=pl.Series(np.asarray(cats, dtype=object).astype(str), dtype=pl.String)
    )


def share_interval_rows(task_fits: pl.DataFrame) -> pl.DataFrame:
    """The category shares of ``fits/tasks.parquet`` (share_I, share_I_lo, share_I_hi, ..,
    share_interval; :mod:`raylc.dolce.shares`) as rows: task, subset, scenario, category, share,
    share_lo, share_hi, interval."""
    keys = ["task", "subset", "scenario"]
    interval = pl.col("share_interval") if "share_interval" in task_fits.columns else pl.lit(None, pl.String)
    return pl.concat([
        task_fits.select(*keys, pl.lit(c).alias("category"), pl.col(f"share_{c}").alias("share"),
                         pl.col(f"share_{c}_lo").alias("share_lo"), pl.col(f"share_{c}_hi").alias("share_hi"),
                         interval.alias("interval"))
        for c in CATEGORIES
    ])


def category_table(problem_fits: pl.DataFrame, task_fits: pl.DataFrame) -> pl.DataFrame:
    """Per task/subset and category: n (the problems reported in it), n_problems, and the fit's
    share with its 95% interval (:func:`share_interval_rows`)."""
    keys = ["task", "subset", "scenario"]
    counts = problem_fits.group_by(*keys, "category").len("n")
    return (
        share_interval_rows(task_fits)
        .join(counts, on=[*keys, "category"], how="left")
        .join(task_fits.select(*keys, "n_problems"), on=keys, how="left")
        .with_columns(pl.col("n").fill_null(0).cast(pl.Int64), pl.col("n_problems").cast(pl.Int64))
        .select(*keys, "category", "n", "n_problems", "share", "share_lo", "share_hi", "interval")
        .sort("task", "subset", "category")
    )


def report(
    problem_fits: pl.DataFrame, task_fits: pl.DataFrame, problems: pl.DataFrame, lam_q: pl.DataFrame
) -> dict[str, pl.DataFrame]:
    """Report tables: ``categories`` (per task/subset and category: n, the problems reported in
    it, n_problems, and the fit's share with its 95% interval, :func:`share_interval_rows`),
    ``probe`` (the probe check per task/subset, :mod:`raylc.dolce.probe_check`) and, for planted
    suites, ``recovery`` (per task: share of problems whose planted category was recovered)
    and ``problems`` (fitted next to planted values); ``lam_q`` of :func:`longest_partial`."""
    out = {"categories": category_table(problem_fits, task_fits)}
    probe = probe_check_table(task_fits)
    if probe.width:
        out["probe"] = probe
    if "planted_lam" in problems.columns:
        planted = planted_categories(problem_fits, problems, lam_q, task_fits)
        joined = problem_fits.select("task", "subset", "problem_id", "scenario", "lam", "k", "category",
                                     "confidence", "lam_low", "lam_high").join(
            planted, on="problem_id", how="left"
        ).with_columns(recovered=pl.col("category") == pl.col("planted_category"))
        # a calibrated confidence has a mean close to the recovery (null without uncertainty)
        stats = dict(n_problems=pl.len(), recovered=pl.col("recovered").sum(), recovery=pl.col("recovered").mean(),
                     mean_confidence=pl.col("confidence").mean())
        per_task = joined.group_by("task").agg(**stats)
        overall = joined.select(task=pl.lit("(all)"), **stats)
        out["recovery"] = pl.concat([per_task.sort("task"), overall], how="vertical_relaxed")
        out["problems"] = joined.sort("task", "problem_id")
    return check_tables(tables.REPORT_TABLES, out)
