"""The whole inference path in this process, for tests and benchmarks (runs go through Ray:
:func:`raylc.run.ray_exec.stream_requests`)."""

from __future__ import annotations

from typing import Any, Optional

import polars as pl

from raylc.backends.registry import ENGINE, backend_of
from raylc.run.inference import ProblemSource, PromptTokenizer, generate_text, generate_tokens, prepare


def infer_frame(
    requests: pl.DataFrame, problems: Optional[pl.DataFrame], job: Any, backend: Any = None
) -> pl.DataFrame:
    """Render ``requests`` (span references from ``problems``), then the probe's engine stage: an
    engine backend (vLLM) fits, tokenizes and generates with a local engine (or ``backend``); a
    text backend generates with ``backend``, or its own built with ``problems``."""
    plugin = backend_of(job.probe)
    source = ProblemSource(problems=problems)
    if plugin.pipeline == ENGINE:
        import asyncio

        ready = prepare(requests, source, job, PromptTokenizer.load(*plugin.prompt_tokenizer(job.probe)))
        engine = backend or plugin.engine(job.probe)
        try:
            return asyncio.run(generate_tokens(ready, engine, job.probe.max_tokens()))
        finally:
            if backend is None:
                engine.shutdown()
    if backend is not None:
        return generate_text(prepare(requests, source, job), backend)
    with plugin.text_backend(job, None if problems is None else problems.lazy()) as own:
        return generate_text(prepare(requests, source, job), own)


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
    report = stages.report(problem_fits, task_fits, problems, stages.partial_lengths(obs))
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
