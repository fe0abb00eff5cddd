"""DOLCE as an evaluation: ``build -> sample -> infer -> score -> fit -> report`` (DOLCE
Sections 3-4), each stage a function of the :class:`~raylc.run.runner.Run` it is given.

The work is in the plain Polars functions of :mod:`raylc.dolce.stages`; this module only
moves their tables through the run's folder (``run.folder``): problems in small row groups (an inference actor
reads the few problems its batch names), spans and observations streamed chunk by chunk, the
fit's per-(task, subset) work as Ray tasks started by the driver (:meth:`Run.mapper`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np
import polars as pl

from raylc.backends.registry import added_tokens
from raylc.backends.stages import PROBLEM_ROW_GROUP
from raylc.dolce import stages, tables
from raylc.dolce.plan import (
    Plan,
    plan,
    prefix_order,
    prompt_pieces,
    prompt_tokens,
    short_documents_warning,
    span_tokens,
)
from raylc.dolce.tables import FIT_PROBLEMS, FIT_TASKS, REPORT_TABLES
from raylc.io.plans import plan_tokenizer
from raylc.io.schemas import TableSchema

if TYPE_CHECKING:
    from raylc.run.runner import Rows, Run, Stage
    from raylc.spec import Job
    from raylc.text.tokenize import Tokenizer

SAMPLE_PROBLEMS = 8  # problems sampled at a time
SPAN_CHUNK_ROWS = 5_000  # spans read at a time (request ids, skip set, feeding the actor pool)
OBS_BUCKET_ROWS = 10_000  # observations merged at a time by the score stage (about)

PROBLEMS, SPANS, OBSERVATIONS = tables.PROBLEMS.path, tables.SPANS.path, tables.OBSERVATIONS.path


def _problems(run: Run) -> pl.DataFrame:
    """The build stage's problems, checked (:meth:`raylc.run.folder.RunFolder.read_declared`)."""
    return run.folder.read_declared(tables.PROBLEMS, stage="build")


def build_stage(run: Run) -> Rows:
    problems = run.built if run.built is not None else stages.build(run.job)
    run.folder.write(problems, PROBLEMS, row_group_size=PROBLEM_ROW_GROUP)
    return {"problems": problems.height}


def sample_stage(run: Run) -> Rows:
    problems = _problems(run).sort("task", "problem_id")
    note = short_documents_warning(problems["L"], run.job.sampling)
    if note:
        run.log(f"[sample] warning: {note}")
    chunks = (stages.sample(problems.slice(i, SAMPLE_PROBLEMS), run.job)
              for i in range(0, problems.height, SAMPLE_PROBLEMS))  # each sorted, and in order
    return {"spans": run.folder.write_parts(chunks, SPANS, stages.sample(problems.clear(), run.job))}


def _span_counter(job: Job, problems: pl.DataFrame) -> Callable[[pl.DataFrame], np.ndarray]:
    """Prompt tokens of span rows as the plan counts them (:func:`raylc.dolce.plan.span_tokens`)
    plus what the backend adds to each (its chat template: :func:`added_tokens`), for the run's
    prompt-token cap; the problems are tokenized when first asked."""
    counter = functools.cache(lambda: span_tokens(job, prompt_pieces(problems, plan_tokenizer(job.count_tokenizer())),
                                                  added_tokens(job.probe)))
    return lambda spans: counter()(spans)


def infer_stage(run: Run) -> Rows:
    """Every span without a stored completion through the probe, spans sharing a prefix (same
    problem and start) back to back for vLLM's prefix cache."""
    problems = _problems(run)
    run.folder.check_declared(tables.SPANS, "sample")
    total = run.folder.num_rows(SPANS)
    done = run.folder.completed()
    add_ids = stages.request_ids(problems, run.job)

    def span_chunks() -> Iterator[pl.DataFrame]:
        return (add_ids(chunk) for chunk in run.folder.iter_rows(SPANS, SPAN_CHUNK_ROWS))

    # a fresh run has nothing to skip: no pass over the spans just to count
    reused = sum(int(done.among(c["request_id"]).sum()) for c in span_chunks()) if len(done) else 0
    run.log(f"[infer] {reused} completions kept from earlier attempts, {total - reused} to run")
    if total > reused:
        run.infer((prefix_order(c.filter(~done.among(c["request_id"]))) for c in span_chunks()),
                  _span_counter(run.job, problems), table=PROBLEMS, reused=reused)
    del done
    return run.inference_rows(reused, total)


def score_stage(run: Run) -> Rows:
    """Every stored completion scored, as the observation table sorted by (task, problem_id, C,
    start); a span stored twice keeps its last score (a run's shards hold only its own spans'
    requests, as the run is tied to the job's fingerprint).

    Two passes bound the driver's memory by a shard and a bucket, not by the run: the problems,
    in (task, problem_id) order, are cut into buckets of about :data:`OBS_BUCKET_ROWS` spans;
    pass 1 scores each shard and writes its observations of each bucket as a temporary part
    ``score/.parts/b<bucket>/part-<shard>.parquet``; pass 2 merges each bucket's parts
    (:func:`stages.merge_observations`, in shard order) and streams the buckets into the table."""
    job = run.job
    problems = _problems(run).sort("task", "problem_id")
    per_bucket = max(1, OBS_BUCKET_ROWS * problems.height // max(run.folder.num_rows(SPANS), 1))
    buckets = problems.select("problem_id", _bucket=pl.int_range(pl.len(), dtype=pl.Int64) // per_bucket)
    run.folder.delete("score/.parts")  # left by an interrupted attempt
    seen: set[int] = set()
    for i, shard in enumerate(run.folder.shards()):
        obs = stages.score(shard.filter(pl.col("error").is_null() & pl.col("completion").is_not_null()), problems, job)
        groups = obs.join(buckets, on="problem_id", how="left", maintain_order="left").partition_by(
            "_bucket", as_dict=True, maintain_order=True)
        for (b,), part in groups.items():
            run.folder.write(part.drop("_bucket"), f"score/.parts/b{b:06d}/part-{i:06d}.parquet")
            seen.add(int(b))  # type: ignore[arg-type]
    merged = (stages.merge_observations([run.folder.read(f"score/.parts/b{b:06d}")]) for b in sorted(seen))
    n = run.folder.write_parts(merged, OBSERVATIONS, stages.merge_observations([]))
    run.folder.delete("score/.parts")
    return {"observations": n}


def fit_stage(run: Run) -> Rows:
    """Validation and scenario selection on the driver, one Ray task per (task, subset) fit."""
    observations = run.folder.read_declared(tables.OBSERVATIONS, stage="score")
    problems, tasks = stages.fit(observations, run.job, mapper=run.mapper())
    run.folder.write(problems, FIT_PROBLEMS.path)
    run.folder.write(tasks, FIT_TASKS.path)
    return {"problems": problems.height, "tasks": tasks.height}


def report_stage(run: Run) -> Rows:
    from raylc.dolce.report import figures, markdown, page, print_report

    fits = run.folder.read_declared(FIT_PROBLEMS, stage="fit"), run.folder.read_declared(FIT_TASKS, stage="fit")
    # lambda_q per chunk, then over the chunks: memory holds one chunk of the observations
    lam_q = stages.longest_partial(pl.concat(
        [stages.longest_partial(chunk) for chunk in run.folder.iter_rows(OBSERVATIONS, OBS_BUCKET_ROWS)]
        or [pl.DataFrame(schema={"problem_id": pl.String, "lam_q": pl.Int64})]))
    tables = stages.report(*fits, _problems(run), lam_q)
    pngs, manifest = figures(*fits), run.manifest.record()
    run.folder.write_outputs("report", tables, {**pngs, "summary.md": markdown(tables, manifest),
                                                "index.html": page(tables, pngs, manifest, fits[1]).render()})
    print_report(tables)
    return {name: t.height for name, t in tables.items()}


class DolceEvaluation:
    """The DOLCE family for the stage runner (:class:`raylc.run.runner.Evaluation`)."""

    @staticmethod
    def report_tables(job: Job) -> tuple[TableSchema, ...]:
        return REPORT_TABLES

    @staticmethod
    def tokenizer_spec(job: Job) -> Optional[str]:
        """What prompts are counted with: the probe's tokenizer, the suite's, a vLLM model's."""
        return job.count_tokenizer()

    def build(self, job: Job) -> pl.DataFrame:
        return stages.build(job)

    def plan(self, job: Job, budget_tokens: Optional[int] = None, **options: Any) -> Plan:
        """:func:`raylc.dolce.plan.plan`: spans, prompt tokens, prefix reuse and cost."""
        return plan(job, budget_tokens, **options)

    def request_lengths(self, job: Job, tokenizer: Tokenizer, samples_cap: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Prompt tokens and ``max_tokens`` of every request the job would send (the plan's
        counting, uncapped), and the factor to scale counts by (1: every request is counted)."""
        problems = stages.build(job)
        spans = stages.sample(problems, job)
        n = prompt_tokens(spans, prompt_pieces(problems, tokenizer)) if spans.height else np.zeros(0, dtype=np.int64)
        return n, np.full(len(n), job.max_tokens(), dtype=np.int64), 1.0

    def print_report(self, tables: dict[str, pl.DataFrame]) -> None:
        from raylc.dolce.report import print_report

        print_report(tables)

    @staticmethod
    def report_page(job: Job, tables: dict[str, pl.DataFrame], manifest: dict[str, Any],
                    read: Callable[..., Any]) -> Any:
        """The run's page (:func:`raylc.dolce.report.page`) from its stored report; ``read``
        reads a file of the run (bytes, or None when missing) or a declared table (and the stage
        that wrote it: :meth:`raylc.run.folder.RunFolder.read_declared`)."""
        from raylc.dolce.report import page

        pngs = {name: read(f"report/{name}") or b"" for name in ("categories.png", "lambda_k.png")}
        return page(tables, pngs, manifest, read(FIT_TASKS, "fit"))

    def stages(self, job: Job) -> Sequence[Stage]:
        return (
            ("build", (PROBLEMS,), build_stage),
            ("sample", (SPANS,), sample_stage),
            ("infer", ("infer",), infer_stage),
            ("score", (OBSERVATIONS,), score_stage),
            ("fit", (FIT_PROBLEMS.path, FIT_TASKS.path), fit_stage),
            # "report": every table of the folder (probe and recovery are written when they apply)
            ("report", ("report", "report/categories.parquet", "report/summary.md", "report/index.html",
                        "report/categories.png", "report/lambda_k.png"), report_stage),
        )
