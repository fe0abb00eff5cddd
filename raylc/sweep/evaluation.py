"""A length sweep as an evaluation: ``build -> infer -> score -> report`` (100-LongBench,
HELMET, LongBench v2, the thesis's unit tasks), each stage a function of the
:class:`~raylc.run.runner.Run` it is given.

Inference goes through the probe's Ray Data pipeline with row-level checkpoints (two rounds
for two-call samples), judge calls through the judge's pipeline with checkpoints of their own
(:meth:`~raylc.run.runner.Run.generate`), LongScore per (model, task).
The work is in the plain Polars functions of :mod:`raylc.sweep.stages`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
import polars as pl

from raylc.backends.registry import added_tokens
from raylc.io.plans import PlanError, plan_tokenizer
from raylc.io.schemas import TableSchema
from raylc.scoring.judge import judge_sample_scores
from raylc.suites.samples import SAMPLES as SAMPLES_TABLE
from raylc.sweep import stages
from raylc.sweep.plan import SweepPlan, judge_tokens, plan_sweep, request_tokens, sent_tokens
from raylc.sweep.report import print_length_report
from raylc.sweep.tables import REPORT_TABLES
from raylc.sweep.tables import SCORES as SCORE_TABLE

if TYPE_CHECKING:
    from raylc.run.runner import Rows, Run, Stage
    from raylc.spec import Job
    from raylc.text.tokenize import Tokenizer

SAMPLES, SCORES = SAMPLES_TABLE.path, SCORE_TABLE.path


def _with_generations(reqs: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    cols = ["request_id", "completion", "error", "truncated_tokens"]
    if not stored.height:
        return reqs.with_columns(completion=pl.lit(None, pl.String), error=pl.lit(None, pl.String),
                                 truncated_tokens=pl.lit(None, pl.Int64))
    return reqs.join(stored.select(cols), on="request_id", how="left")


def _run_round(run: Run, reqs: pl.DataFrame, count: Callable[[pl.DataFrame], np.ndarray], earlier: int = 0) -> int:
    """Run the requests without a stored success (``count``: their prompt tokens, for the run's
    cap; ``earlier``: the requests of the rounds before, which the stage's progress record
    counts as stored, so that `raylc status` counts both rounds); returns how many were reused."""
    done = run.folder.completed()
    pending = reqs.select(stages.REQUEST_COLUMNS).filter(~done.among(reqs["request_id"]))
    reused = reqs.height - pending.height
    run.log(f"[infer] round {int(reqs['round'][0]) if reqs.height else 1}: {reused} completions kept from earlier "
            f"attempts, {pending.height} to run")
    if pending.height:
        run.infer([pending], count, table=SAMPLES, reused=earlier + reused)
    return reused


def _rounds(run: Run, samples: pl.DataFrame,
            first: Optional[pl.DataFrame] = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both rounds' request rows joined with their stored generations; ``first``: the first
    round's request rows when already made (their ids hash whole prompts)."""
    stored = run.folder.completions()
    first = _with_generations(stages.requests(samples, run.job) if first is None else first, stored)
    second = _with_generations(stages.requests(samples, run.job, first), stored)
    return first, second


def build_stage(run: Run) -> Rows:
    samples = run.built if run.built is not None else stages.build_samples(run.job)
    run.folder.write(samples, SAMPLES)
    return {"samples": samples.height, "context_tokens": int(samples["context_tokens"].sum() or 0)}


def infer_stage(run: Run) -> Rows:
    samples = run.folder.read_declared(SAMPLES_TABLE, stage="build")
    tokenizer = functools.cache(lambda: plan_tokenizer(run.job.suite.tokenizer_spec()))
    added = functools.cache(lambda: (added_tokens(run.job.probe), added_tokens(run.job.probe, raw=True)))

    def count(reqs: pl.DataFrame) -> np.ndarray:  # the plan's count and the backend's additions, for the cap
        return sent_tokens(reqs, samples, tokenizer(), run.job, *added())

    first = stages.requests(samples, run.job)
    reused = _run_round(run, first, count)
    second = _rounds(run, samples, first)[1]
    if second.height:
        reused += _run_round(run, second, count, earlier=first.height)
    return run.inference_rows(reused, first.height + second.height)


def score_stage(run: Run) -> Rows:
    job = run.job
    samples = run.folder.read_declared(SAMPLES_TABLE, stage="build")
    first, second = _rounds(run, samples)
    final = stages.final_completions(samples, first, second)
    answered = final.filter(pl.col("error").is_null() & pl.col("completion").is_not_null())
    judge = None
    if answered["metric"].is_in(list(stages.JUDGE_METRICS)).any():
        if job.judge is None:
            raise ValueError(f"suite {job.suite.kind}: metrics {', '.join(stages.JUDGE_METRICS)} need a judge: section")
        judge_job = job.as_judge()
        tokenizer = functools.cache(lambda: plan_tokenizer(judge_job.count_tokenizer(), "judge"))
        added = functools.cache(lambda: added_tokens(judge_job.probe))

        def count(calls: pl.DataFrame) -> np.ndarray:  # as the plan counts a judge call, for the cap
            return judge_tokens(calls["context"], tokenizer(), judge_job, added())

        def judge(frame: pl.DataFrame) -> pl.Series:
            return judge_sample_scores(frame, lambda prompts: run.generate(prompts, judge_job, count))

    try:
        scores = job.suite.kept(stages.with_visibility(stages.score_samples(answered, judge)))
    except PlanError:  # the judge's tokenizer, for the cap: not the samples' fault
        raise
    except ValueError as exc:
        raise ValueError(f"{run.folder.uri(SAMPLES)}: {exc}") from None
    run.folder.write(SCORE_TABLE.check(scores, type(job.suite).columns), SCORES)
    prior_known = scores.filter((pl.col("length") > 0) & ~pl.col("kept")).select("task", "sample_id").unique()
    return {"scores": scores.height, "failed": final.height - answered.height, "prior_known": prior_known.height}


def report_stage(run: Run) -> Rows:
    from raylc.sweep.report import write_length_report

    tables = write_length_report(run, run.job, run.folder.read_declared(SCORE_TABLE, stage="score"))
    return {name: t.height for name, t in tables.items()}


class SweepEvaluation:
    """The length-sweep family for the stage runner (:class:`raylc.run.runner.Evaluation`)."""

    @staticmethod
    def tokenizer_spec(job: Job) -> Optional[str]:
        """What prompts are counted with: the suite's tokenizer (its contexts are built with it)."""
        return job.suite.tokenizer_spec()

    def build(self, job: Job) -> pl.DataFrame:
        return stages.build_samples(job)

    @staticmethod
    def report_tables(job: Job) -> tuple[TableSchema, ...]:
        return (*REPORT_TABLES, *job.suite.sections)

    def plan(self, job: Job, budget_tokens: Optional[int] = None, **options: Any) -> SweepPlan:
        """:func:`raylc.sweep.plan.plan_sweep`: with ``budget_tokens``, the samples per length that fit."""
        options.pop("block_size", None)
        return plan_sweep(job, budget_tokens, **options)

    def request_lengths(self, job: Job, tokenizer: Tokenizer, samples_cap: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Prompt tokens and ``max_tokens`` of every request (both calls of two-call samples),
        built with at most ``samples_cap`` samples per axis point, and the factor to scale
        counts to the whole suite."""
        suite = job.suite
        per = suite.samples_per_point()
        samples = stages.build_samples(job.model_copy(update={"suite": suite.with_samples(samples_cap)}))
        first, second, first_max, second_max = request_tokens(samples, tokenizer, job.max_tokens())
        two = second > 0
        scale = per / samples_cap if per and per > samples_cap else 1.0
        return np.concatenate([first, second[two]]), np.concatenate([first_max, second_max[two]]), scale

    def print_report(self, tables: dict[str, pl.DataFrame]) -> None:
        print_length_report(tables)

    @staticmethod
    def report_page(job: Job, tables: dict[str, pl.DataFrame], manifest: dict[str, Any],
                    read: Callable[..., Any]) -> Any:
        """The run's page (:func:`raylc.sweep.report.length_page`) from its stored report; ``read``
        reads a file of the run (bytes, or None when missing) or a declared table (and the stage
        that wrote it: :meth:`raylc.run.folder.RunFolder.read_declared`)."""
        from raylc.sweep.report import length_page

        pngs = {name: read(f"report/{name}") for name in ("score_vs_length.png", "longscore_vs_length.png")}
        headings = {name: heading for name, heading, _ in job.suite.report_sections(read(SCORE_TABLE, "score"))}
        return length_page(tables, {k: v for k, v in pngs.items() if v is not None}, manifest, headings,
                           job.suite.axis)

    def stages(self, job: Job) -> Sequence[Stage]:
        return (
            ("build", (SAMPLES,), build_stage),
            ("infer", ("infer",), infer_stage),
            ("score", (SCORES,), score_stage),
            ("report", ("report", "report/summary.md", "report/index.html"), report_stage),  # every table, the page
        )
