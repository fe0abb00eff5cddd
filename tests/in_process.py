"""The whole inference path in this process, for tests and benchmarks: the backend's pipeline
stages (:meth:`raylc.backends.registry.BackendPlugin.stages`) applied one after the other, as
:func:`raylc.run.pipeline.stream` maps them over Ray Data in a run."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Optional

import polars as pl

from raylc.backends.registry import backend_of
from raylc.backends.stages import ProblemSource, StageInputs


def make_backend(job: Any, table: Optional[pl.DataFrame] = None) -> Any:
    """The text backend of ``job.probe``, as its pipeline's text stage builds it; ``table``: the
    suite's built table (the simulated probe's knowledge)."""
    (stage,) = backend_of(job.probe).stages(job, verbose=False)
    return stage.fn(job, StageInputs(ProblemSource(problems=table), None if table is None else table.lazy())).backend


def infer_frame(requests: pl.DataFrame, problems: Optional[pl.DataFrame], job: Any) -> pl.DataFrame:
    """Every stage of the probe's pipeline in turn on ``requests`` (span references rendered from
    ``problems``; an engine backend: prepare, then a local engine)."""
    inputs = StageInputs(ProblemSource(problems=problems), None if problems is None else problems.lazy())
    rows = requests
    for stage in backend_of(job.probe).stages(job, verbose=False):
        fn = stage.fn(job, inputs)
        try:
            out = fn(rows)
            rows = asyncio.run(out) if inspect.isawaitable(out) else out
        finally:
            if hasattr(fn, "close"):
                fn.close()
    return rows


def dolce_tables(job: Any) -> dict[str, pl.DataFrame]:
    """The tables of a DOLCE ``job``'s run by their paths in the run folder
    (``build/problems.parquet``, ``fits/problems.parquet``, ``fits/tasks.parquet``,
    ``report/<name>.parquet``), every stage in this process (build, sample, :func:`infer_frame`,
    score, fit, report: the stage functions a run maps over Ray)."""
    from raylc.dolce import stages

    problems = stages.build(job)
    spans = stages.sample(problems, job)
    done = infer_frame(stages.with_request_ids(spans, problems, job), problems, job)
    obs = stages.score(done, problems, job)
    problem_fits, task_fits = stages.fit(obs, job)
    report = stages.report(problem_fits, task_fits, problems, stages.longest_partial(obs))
    return {"build/problems.parquet": problems, "fits/problems.parquet": problem_fits,
            "fits/tasks.parquet": task_fits, **{f"report/{name}.parquet": t for name, t in report.items()}}


def share_coverage(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Per (task, subset, category) of a planted run's tables (:func:`dolce_tables`): the planted share (the
    share of the task's problems whose planted (lambda, k) is in the category under the fit's
    thresholds), the reported share and interval, ``covered`` (the interval holds the planted
    share) and ``inside`` (the share lies in its interval)."""
    keys = ["task", "subset"]
    planted = tables["report/problems.parquet"].group_by(*keys, pl.col("planted_category").alias("category")).len("k")
    return (tables["report/categories.parquet"].join(planted, on=[*keys, "category"], how="left")
            .with_columns(planted=pl.col("k").fill_null(0) / pl.col("n_problems"))
            .with_columns(covered=pl.col("planted").is_between(pl.col("share_lo") - 1e-12, pl.col("share_hi") + 1e-12),
                          inside=pl.col("share").is_between(pl.col("share_lo"), pl.col("share_hi")))
            .select(*keys, "category", "n_problems", "planted", "share", "share_lo", "share_hi", "covered", "inside"))
