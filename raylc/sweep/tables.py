"""The tables a length run writes, and those of ``raylc longscore``, declared once
(:class:`raylc.io.schemas.TableSchema`) and checked by the functions that make them
(:mod:`raylc.sweep.stages`, :mod:`raylc.sweep.report`, :mod:`raylc.longscore`). The samples
table's contract is :data:`raylc.suites.samples.SAMPLES`."""

from __future__ import annotations

import polars as pl

from raylc.backends.base import GENERATION
from raylc.io.schemas import TableSchema, declare, declare_since
from raylc.suites.samples import SAMPLES

_SAMPLE = {c.name: c for c in SAMPLES.columns}
_GENERATION = {c.name: c for c in GENERATION}
_SUITE_COLUMNS = "the suite's own ([suites](suites.md))"

REQUESTS = TableSchema("requests", "requests/<attempt>/part-<n>.parquet", (
    "The pending requests of the infer stage, one per call (removed when the stage ends)."), (
    *declare(("request_id", pl.String, "The request's id: a hash of the probe's settings, the seed, the prompt and "
                                       "its budget (the key of row-level resume).")),
    *(_SAMPLE[c] for c in ("task", "sample_id", "length")),
    *declare(("round", pl.Int64, "1, or 2 for the second call of a two-call sample.")),
    *(_SAMPLE[c] for c in ("head", "context", "tail", "max_tokens", "raw_prompt"))))

SCORES = TableSchema("scores", "score/scores.parquet", "One row per sample and length, scored.", (
    *(_SAMPLE[c] for c in ("task", "sample_id", "length", "context_tokens", "question", "answers", "metric",
                           "extractor", "raw_prompt")),
    _GENERATION["truncated_tokens"], _GENERATION["completion"], _GENERATION["error"],
    *declare(
        ("prediction", pl.String, "The answer the extractor took from the output (null: none)."),
        ("valid", pl.Boolean, "An answer could be extracted."),
        ("score", pl.Float64, "The sample's score in [0, 1] by its metric."),
        ("truncated", pl.Boolean, "The backend cut the context to fit the probe's window."),
        ("visible_tokens", pl.Int64, "The context tokens the model saw (`context_tokens` less the cut)."),
        ("kept", pl.Boolean, "The row counts in the statistics (not a length-0 row, nor dropped by the suite's "
                             "filter)."))), extra=_SUITE_COLUMNS)

PER_TASK_LENGTH = TableSchema("per_task_length", "report/per_task_length.parquet", (
    "The mean score per task and point of the suite's axis (its length, or `n_pieces`, `length_class`)."), declare(
    ("task", pl.String, "The task."),
    ("length", pl.Int64, "The target length (on another axis: the largest context of the point)."),
    ("n", pl.UInt32, "Samples counted."),
    ("score", pl.Float64, "Their mean score."),
    ("context_tokens", pl.Float64, "Their mean context length in tokens."),
    ("visible_tokens", pl.Float64, "The mean context length the model saw.", True),
    ("truncated", pl.Int64, "Samples whose context the backend cut.", True)),
    extra="the suite's axis column when it is not `length` (`n_pieces`, `length_class`)")

_WHO = declare(
    ("run_id", pl.String, "The run (null for rows from a score table given to `raylc longscore`)."),
    ("model", pl.String, "The probe's model (compare, longscore: the run's label)."),
    ("task", pl.String, "The task, or `overall` (the mean over tasks, then Eq. 1-2)."))
_BOOT = (*declare(("warning", pl.String, "Why a LongScore is null (Base <= 0 or missing); null otherwise.")),
         *declare_since("2026-11-27 (a run's own bootstrap; such runs had 200 resamples and the job's seed)",
                        ("n_boot", pl.Int64, "Bootstrap resamples of the intervals (0: none)."),
                        ("boot_seed", pl.Int64, "The bootstrap's seed.")))
PER_LENGTH = TableSchema("per_length", "report/per_length.parquet", (
    "LongScore per task and length (100-LongBench Eq. 1-2) with bootstrap intervals over samples."), (
    *_WHO, *declare(
        ("length", pl.Int64, "The length (or the suite's axis point)."),
        ("score", pl.Float64, "S_l: the mean score at the length."),
        ("base", pl.Float64, "Base: the mean score over the base lengths (Eq. 1)."),
        ("lc", pl.Float64, "LC_l = 100 (S_l - Base) / Base, in percent (Eq. 2)."),
        ("lc_lo", pl.Float64, "Its 95% percentile bootstrap interval, low end (null: no bootstrap)."),
        ("lc_hi", pl.Float64, "High end."),
        ("n", pl.Int64, "Samples."),
        ("is_base", pl.Boolean, "The length is a base length."),
        ("rank_score", pl.Int64, "Rank among models by score at the task and length (1: best)."),
        ("rank_lc", pl.Int64, "Rank by LC.")), *_BOOT))
SUMMARY = TableSchema("summary", "report/summary.parquet", (
    "LongScore per task: Base and the averages over the long lengths (the papers' \"Avg\")."), (
    *_WHO, *declare(
        ("base", pl.Float64, "Base (Eq. 1)."),
        ("avg_score", pl.Float64, "The mean score over the long lengths."),
        ("avg_lc", pl.Float64, "LongScore: the mean LC over the long lengths, in percent."),
        ("avg_lc_lo", pl.Float64, "Its 95% percentile bootstrap interval, low end (null: no bootstrap)."),
        ("avg_lc_hi", pl.Float64, "High end."),
        ("rank_base", pl.Int64, "Rank among models within the task by Base (1: best)."),
        ("rank_score", pl.Int64, "By avg_score."),
        ("rank_lc", pl.Int64, "By avg_lc."),
        ("n_long", pl.Int64, "Long lengths averaged.")), *_BOOT))

#: what a length run writes, in stage order (its checkpoint shards: :data:`raylc.run.checkpoint.SHARDS`; the
#: suite's report sections: docs/reference/suites.md)
RUN_TABLES = (SAMPLES, REQUESTS, SCORES, PER_TASK_LENGTH, PER_LENGTH, SUMMARY)
REPORT_TABLES = (PER_TASK_LENGTH, PER_LENGTH, SUMMARY)

#: what ``raylc longscore SOURCES --out DIR`` writes under DIR
LONGSCORE_TABLES = (
    PER_LENGTH.relocated("per_length.parquet"), SUMMARY.relocated("summary.parquet"),
    TableSchema("correlation", "correlation.parquet", (
        "With 3 models and 2 tasks or more: Spearman's rho between tasks across models, per length (HELMET Figure "
        "3)."), declare(
        ("length", pl.Int64, "The length."), ("a", pl.String, "One task."), ("b", pl.String, "The other."),
        ("rho", pl.Float64, "Spearman's rho (null: fewer than 3 models, or a task scored the same for all)."),
        ("n", pl.Int64, "Models scored on both."))),
)
