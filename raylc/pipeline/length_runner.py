"""Orchestration of a length-controlled run (:mod:`raylc.pipeline.length`): each stage's
table under ``<store>/<run_id>/<stage>/``, inference in the probe's Ray Data actor pool with
row-level checkpoints, judge calls through the judge's pool, LongScore per (model, task)."""

from __future__ import annotations

from typing import Callable, Optional

import polars as pl

from raylc.pipeline import checkpoint, length, ray_exec
from raylc.pipeline.runner import Run, RunError, check_errors, infer_requests, run_stages
from raylc.scoring.judge import judge_sample_scores
from raylc.spec import Job


def _with_knowledge(job: Job, samples: pl.DataFrame, reqs: pl.DataFrame) -> pl.DataFrame:
    """For the simulated probe, what it may read of each request (:data:`SIM_COLUMNS`): the
    sample's gold answer and context tokens, or its fixed reasoning line (-1) for the first
    call of a two-call sample. Real backends get the request rows as they are."""
    if job.probe.backend != "simulated":
        return reqs
    from raylc.backends.simulated import SIMULATED_COT

    keys = ["task", "sample_id", "length"]
    first_of_two = (pl.col("round") == 1) & pl.col("followup").is_not_null()
    return (
        reqs.join(samples.select(*keys, "gold", "context_tokens", "followup"), on=keys, how="left",
                  maintain_order="left")
        .with_columns(
            sim_answer=pl.when(first_of_two).then(pl.lit(SIMULATED_COT)).otherwise(pl.col("gold")),
            sim_tokens=pl.when(first_of_two).then(pl.lit(-1, pl.Int64)).otherwise(pl.col("context_tokens").cast(pl.Int64)),
        )
        .drop("gold", "context_tokens", "followup")
    )


def _with_generations(reqs: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    cols = ["request_id", "completion", "error"]
    if not stored.height:
        return reqs.with_columns(completion=pl.lit(None, pl.String), error=pl.lit(None, pl.String))
    return reqs.join(stored.select(cols), on="request_id", how="left")


def _run_round(job: Job, run: Run, reqs: pl.DataFrame, samples: pl.DataFrame, log: Callable[[str], None]) -> int:
    """Run the requests without a stored success; returns how many were reused."""
    done = checkpoint.completed_keys(run.store, run.run_id)
    pending = reqs.select(length.REQUEST_COLUMNS).filter(~checkpoint.is_completed(reqs["request_id"], done))
    reused = reqs.height - pending.height
    log(f"[infer] round {int(reqs['round'][0]) if reqs.height else 1}: {reused} completions kept from earlier "
        f"attempts, {pending.height} to run")
    if pending.height:
        infer_requests(job, run, [_with_knowledge(job, samples, pending)], log)
    return reused


def _rounds(job: Job, run: Run, samples: pl.DataFrame,
            first: Optional[pl.DataFrame] = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both rounds' request rows joined with their stored generations (from the shards);
    ``first``: the first round's request rows when already made (their ids hash whole prompts)."""
    stored = checkpoint.load_completions(run.store, run.run_id)
    first = _with_generations(length.requests(samples, job) if first is None else first, stored)
    second = _with_generations(length.requests(samples, job, first), stored)
    return first, second


def run_length_stages(job: Job, run: Run, log: Callable[[str], None], samples: Optional[pl.DataFrame] = None) -> None:
    """Run the stages of :data:`raylc.pipeline.length.STAGES` (``samples``: from
    :func:`raylc.pipeline.runner.prebuild`)."""

    def do_build() -> dict[str, int]:
        nonlocal samples
        if samples is None:
            samples = length.build_samples(job)
        run.write(samples, "build/samples.parquet")
        return {"samples": samples.height, "context_tokens": int(samples["context_tokens"].sum() or 0)}

    def do_infer() -> dict[str, int]:
        samples = run.read("build/samples.parquet")
        first = length.requests(samples, job)
        reused = _run_round(job, run, first, samples, log)
        second = _rounds(job, run, samples, first)[1]
        if second.height:
            reused += _run_round(job, run, second, samples, log)
        rows, first_error = checkpoint.stored_accounting(run.store, run.run_id, reused)
        check_errors(job, run, rows, first.height + second.height, first_error)
        return rows

    def do_score() -> dict[str, int]:
        samples = run.read("build/samples.parquet")
        first, second = _rounds(job, run, samples)
        final = length.final_completions(samples, first, second)
        answered = final.filter(pl.col("error").is_null() & pl.col("completion").is_not_null())
        judge = None
        if answered["metric"].is_in(list(length.JUDGE_METRICS)).any():
            if job.judge is None:
                raise RunError(f"suite {job.suite.kind}: metrics {', '.join(length.JUDGE_METRICS)} need a judge: section")
            ray_exec.ensure_ray(job)
            judge_job = job.as_judge()

            def judge(frame: pl.DataFrame) -> pl.Series:
                return judge_sample_scores(frame, lambda prompts: ray_exec.generate_on_ray(prompts, judge_job))

        try:
            scores = length.apply_prior_filter(length.score_samples(answered, judge), job)
        except ValueError as exc:
            raise RunError(f"{run.store.uri(run.run_id, 'build', 'samples.parquet')}: {exc}") from None
        run.write(scores, "score/scores.parquet")
        return {"scores": scores.height, "failed": final.height - answered.height,
                "prior_known": length.dropped_samples(scores).height}

    def do_report() -> dict[str, int]:
        from raylc.length_report import write_length_report

        tables = write_length_report(run, job, run.read("score/scores.parquet"))
        return {name: t.height for name, t in tables.items()}

    run_stages(run, dict(zip(length.STAGES, (do_build, do_infer, do_score, do_report))), log, length.OUTPUTS)
