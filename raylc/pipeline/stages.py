"""The stages ``build -> sample -> infer -> score -> fit -> report`` as plain Polars functions.

Each function takes and returns Polars frames and runs without Ray; the orchestration
layer (:mod:`raylc.pipeline.runner`) maps them over Ray Data (per row) and Ray tasks (per
benchmark task).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.backends import make_backend
from raylc.dolce import assign_categories, fit_cow_task
from raylc.prompts import render_prompts
from raylc.sampling import sample_spans
from raylc.scoring import score_exact_match
from raylc.spec import Job
from raylc.suites.planted import build_planted

STAGES = ("build", "sample", "infer", "score", "fit", "report")
CATEGORIES = ("I", "II", "III", "IV", "V")


def build(job: Job) -> pl.DataFrame:
    """Problems table of the suite."""
    return build_planted(job.suite, job.seed)


def sample(problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """Observation spans ``task, problem_id, L, C, start``."""
    return sample_spans(problems, job.sampling)


def infer(spans: pl.DataFrame, problems: pl.DataFrame, job: Job, backend=None) -> pl.DataFrame:
    """Render each span's prompt, run the probe, return the spans with ``completion``."""
    backend = backend or make_backend(job, problems)
    prompts = render_prompts(spans, problems)
    return spans.with_columns(completion=pl.Series("completion", backend.generate(prompts.to_list()), pl.String))


def score(completions: pl.DataFrame, problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """The observation table (``task, problem_id, L, C, start, score, metric``), sorted."""
    return score_exact_match(completions, problems, job.scoring.idk_patterns).sort("task", "problem_id", "C", "start")


def fit_task(observations: pl.DataFrame, job: Job) -> tuple[pl.DataFrame, pl.DataFrame]:
    """DOLCE COW fit of one benchmark task: (per-problem fits, one-row task summary)."""
    problems, info = fit_cow_task(observations, n_steps=job.fit.em_steps, threshold=job.fit.threshold)
    task = observations["task"][0]
    shares = {f"share_{c}": float((problems["category"] == c).mean()) for c in CATEGORIES}
    summary = pl.DataFrame(
        [{"task": task, "scenario": "COW", "n_problems": problems.height, **shares, **info}]
    )
    return problems, summary


def fit(observations: pl.DataFrame, job: Job) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-task fits, in-process (the runner maps :func:`fit_task` over Ray tasks instead)."""
    parts = [fit_task(obs, job) for _, obs in observations.group_by("task", maintain_order=True)]
    return combine_fits(parts)


def combine_fits(parts: list[tuple[pl.DataFrame, pl.DataFrame]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    problems = pl.concat([p for p, _ in parts], how="vertical_relaxed").sort("task", "problem_id")
    tasks = pl.concat([t for _, t in parts], how="vertical_relaxed").sort("task")
    return problems, tasks


def planted_categories(problems: pl.DataFrame, observations: pl.DataFrame, tasks: pl.DataFrame) -> pl.DataFrame:
    """Category each planted (lambda, k) belongs to, with the thresholds the fit used.

    lambda_p, k_p come from the task's ladder (``tasks``); lambda_q is the problem's largest
    partial observation length, exactly as for the fitted values.
    """
    lam_q = observations.filter(pl.col("C") < pl.col("L")).group_by("problem_id").agg(lam_q=pl.col("C").max())
    df = (
        problems.select("task", "problem_id", "planted_lam", "planted_k")
        .join(lam_q, on="problem_id", how="left")
        .join(tasks.select("task", "lam_p", "k_p"), on="task", how="left")
        .with_columns(pl.col("lam_q").fill_null(0))
    )
    cats = assign_categories(
        df["planted_lam"].to_numpy(), df["planted_k"].to_numpy(), df["lam_p"].to_numpy(), df["k_p"].to_numpy(),
        df["lam_q"].to_numpy(),
    )
    return df.select("task", "problem_id", "planted_lam", "planted_k").with_columns(
        planted_category=pl.Series(np.asarray(cats, dtype=object).astype(str), dtype=pl.String)
    )


def report(
    problem_fits: pl.DataFrame, task_fits: pl.DataFrame, problems: pl.DataFrame, observations: pl.DataFrame
) -> dict[str, pl.DataFrame]:
    """Report tables: ``categories`` (share per task and category) and, for planted
    suites, ``recovery`` (per task: share of problems whose planted category was recovered)
    and ``problems`` (fitted next to planted values)."""
    counts = (
        problem_fits.group_by("task", "category").len("n")
        .join(problem_fits.group_by("task").len("total"), on="task")
        .with_columns(share=pl.col("n") / pl.col("total"))
    )
    grid = task_fits.select("task").join(pl.DataFrame({"category": list(CATEGORIES)}), how="cross")
    categories = (
        grid.join(counts.select("task", "category", "n", "share"), on=["task", "category"], how="left")
        .with_columns(pl.col("n").fill_null(0).cast(pl.Int64), pl.col("share").fill_null(0.0))
        .sort("task", "category")
    )
    out = {"categories": categories}
    if "planted_lam" in problems.columns:
        planted = planted_categories(problems, observations, task_fits)
        joined = problem_fits.select("task", "problem_id", "lam", "k", "category").join(
            planted.drop("task"), on="problem_id", how="left"
        ).with_columns(recovered=pl.col("category") == pl.col("planted_category"))
        per_task = joined.group_by("task").agg(
            n_problems=pl.len(), recovered=pl.col("recovered").sum(), recovery=pl.col("recovered").mean()
        )
        overall = joined.select(
            task=pl.lit("(all)"), n_problems=pl.len(), recovered=pl.col("recovered").sum(),
            recovery=pl.col("recovered").mean(),
        )
        out["recovery"] = pl.concat([per_task.sort("task"), overall], how="vertical_relaxed")
        out["problems"] = joined.sort("task", "problem_id")
    return out
