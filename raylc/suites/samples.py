"""The samples table: what every length-controlled suite builder returns.

One row per (task, sample, target length). The prompt sent to the model is
``head + context + tail``: instruction, the built context (the only part that truncation
may cut), then the question and answer cue. ``gold`` is what a perfect model would answer
(scoring ``gold`` must give the maximum score); ``answers`` are the references the metric
compares against. ``metric`` is a key of :data:`raylc.scoring.metrics.METRICS` or one of
:data:`SAMPLE_METRICS`; ``extractor`` a key of :data:`raylc.scoring.extract.EXTRACTORS`
applied to the completion before the metric. ``followup`` (nullable) makes a two-call
request (LongBench v2 chain of thought): it is the whole second prompt, with the first
call's completion put in place of :data:`COMPLETION` (the paper's answer call omits the
document). ``max_tokens`` (nullable)
overrides the probe's ``sampling.max_tokens`` for the first call, ``followup_max_tokens``
for the second. ``raw_prompt`` (optional, false when absent) sends the prompt without the
probe's chat template (LongBench v1 ``pred.py`` does so for its few-shot and code datasets).
Builders may add further columns (e.g. ``difficulty``, ``depth``,
``n_pieces``); they pass through to the scores table.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import polars as pl
from pydantic import Field, model_validator

from raylc.io.names import UnsafeName, path_segment
from raylc.io.schemas import TableSchema, described
from raylc.suites.registry import SweepSuite

LENGTHS_DEFAULT = [2048, 4096, 6144, 8192, 16384, 32768, 65536, 131072, 262144]


MAX_AXIS = 2**24  #: a length (tokens) or piece count above this is a typo: the longest windows are about 10M tokens


def check_axis(axis: list[int], base: list[int], name: str, base_name: str, smallest: int) -> None:
    """Every value of a length axis is from ``smallest`` to :data:`MAX_AXIS` and LongScore's base
    values lie on it."""
    if any(x < smallest for x in axis):
        raise ValueError(f"every value of {name} must be >= {smallest}")
    if any(x > MAX_AXIS for x in axis):
        raise ValueError(f"every value of {name} must be <= {MAX_AXIS:,}")
    missing = sorted(set(base) - set(axis))
    if missing:
        raise ValueError(f"{base_name} {missing} are not in {name}")


class LengthSuite(SweepSuite):
    """Shared fields of the length-controlled suites (100-LongBench Section 3, HELMET):
    every sample is rebuilt at each target length in ``lengths`` (tokens of the context,
    counted with ``tokenizer``: None = the offline default, ``hf:<name>`` a real one);
    LongScore's Base is the mean over ``base_lengths`` (must be a subset of ``lengths``)."""

    lengths: list[int] = Field(default=LENGTHS_DEFAULT, min_length=1, description=(
        "Target context lengths in tokens; every sample is rebuilt at each."))
    base_lengths: list[int] = Field(default=[2048, 4096, 6144], min_length=1, description=(
        "LongScore's Base: the mean score over these lengths (a subset of `lengths`; 100-LongBench Eq. 1)."))
    samples_per_length: int = Field(default=100, ge=1, le=1_000_000, description="Samples per task and length.")
    tokenizer: Optional[str] = Field(default=None, description=(
        "Tokenizer contexts are counted and built with: null, the offline default; `hf:<name-or-path>`, a real "
        "one (the model's on a cluster)."))

    samples_field: ClassVar[Optional[str]] = "samples_per_length"

    @model_validator(mode="after")
    def _base_in_lengths(self):
        check_axis(self.lengths, self.base_lengths, "lengths", "base_lengths", 1)
        return self

    def tokenizer_spec(self) -> Optional[str]:
        return self.tokenizer

    def longscore_base(self) -> list[int]:
        return list(self.base_lengths)


SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(),
    "sample_id": pl.String(),
    "length": pl.Int64(),  # target context length in tokens (0 = no context, the prior-knowledge probe)
    "context_tokens": pl.Int64(),  # achieved context length in tokens, <= length
    "head": pl.String(),
    "context": pl.String(),
    "tail": pl.String(),
    "question": pl.String(),
    "answers": pl.List(pl.String()),
    "gold": pl.String(),
    "metric": pl.String(),
    "extractor": pl.String(),
    "followup": pl.String(),
    "max_tokens": pl.Int64(),
    "followup_max_tokens": pl.Int64(),
}
#: optional columns and the value a table without them gets
OPTIONAL_COLUMNS: dict[str, tuple[pl.DataType, object]] = {"raw_prompt": (pl.Boolean(), False)}

#: ``build/samples.parquet``: the contract (:func:`check_samples`), then the suite's own columns
SAMPLES = TableSchema("samples", "build/samples.parquet", (
    "A length run's samples: one row per task, sample and target length (`raylc/suites/samples.py`)."), described(
    {**SAMPLE_SCHEMA, **{c: t for c, (t, _) in OPTIONAL_COLUMNS.items()}}, {
        "task": "The task.",
        "sample_id": "The sample, the same at every length.",
        "length": "The target context length in tokens (0: no context, the prior-knowledge probe); for suites "
                  "that are not length-controlled, the context's own token count.",
        "context_tokens": "The achieved context length in tokens (never above `length`).",
        "head": "The prompt before the context (the instruction).",
        "context": "The context, the only part truncation cuts.",
        "tail": "The prompt after the context (the question and answer cue).",
        "question": "The question, as the judge and the report show it.",
        "answers": "The references the metric compares the answer with.",
        "gold": "What a perfect model answers (it gets the maximum score).",
        "metric": "The metric (`raylc/scoring/metrics.py`, or `judge_qa`, `judge_sum`, `longbench_v2`).",
        "extractor": "The answer extractor applied to the output first (`raylc/scoring/extract.py`).",
        "followup": "The second prompt of a two-call sample, the first call's output in place of `{completion}` "
                    "(null: one call).",
        "max_tokens": "The first call's generation budget (null: the probe's `sampling.max_tokens`).",
        "followup_max_tokens": "The second call's budget (null: one call, or the probe's).",
        "raw_prompt": "Sent without the probe's chat template.",
    }), extra="the suite's own ([suites](suites.md))")

# metrics that are not plain reference metrics: LLM-judge grades of 100-LongBench
# (fluency x correctness for QA, fluency x precision for summaries) and LongBench v2's
# accuracy with invalid outputs kept apart (compensated score counts them as 0.25)
SAMPLE_METRICS = ("judge_qa", "judge_sum", "longbench_v2")
COMPLETION = "{completion}"  # where a two-call sample's followup takes the first completion


#: columns that must hold a value in every row (``followup``, ``max_tokens``, ``followup_max_tokens`` may be null)
REQUIRED_VALUES = ("task", "sample_id", "length", "context_tokens", "head", "context", "tail", "answers", "gold",
                   "metric", "extractor")


class SampleTableError(ValueError):
    """A samples table that breaks the contract; the message is one line."""


def check_samples(samples: pl.DataFrame, source: str = "samples") -> pl.DataFrame:
    """The table with the contract's columns cast to their types (extra columns kept after them).

    Raises :class:`SampleTableError` (one line naming the column and an example sample) for the
    first missing column, empty table, null in a column that must hold a value
    (:data:`REQUIRED_VALUES`), negative length, task that is not a safe path segment
    (:func:`raylc.io.names.path_segment`: tasks name the ``infer/task=<task>/`` folders), unknown
    metric or extractor, duplicate key (task, sample_id, length) or context longer than its target.
    """
    missing = [c for c in SAMPLE_SCHEMA if c not in samples.columns]
    if missing:
        raise SampleTableError(f"{source}: missing column {missing[0]!r} (required: {', '.join(SAMPLE_SCHEMA)})")
    if samples.height == 0:
        raise SampleTableError(f"{source}: no samples (the table has no rows)")
    samples = samples.with_columns(pl.lit(v, t).alias(c) for c, (t, v) in OPTIONAL_COLUMNS.items()
                                   if c not in samples.columns)
    schema = {**SAMPLE_SCHEMA, **{c: t for c, (t, _) in OPTIONAL_COLUMNS.items()}}
    try:
        out = samples.select(*[pl.col(c).cast(t) for c, t in schema.items()], *[c for c in samples.columns
                                                                               if c not in schema])
    except pl.exceptions.PolarsError as exc:
        raise SampleTableError(f"{source}: a column does not hold its type ({str(exc).splitlines()[0]})") from None
    out = out.with_columns(pl.col(c).fill_null(v) for c, (_, v) in OPTIONAL_COLUMNS.items())

    def example(mask: pl.Expr) -> dict | None:
        hit = out.filter(mask)
        return hit.row(0, named=True) if hit.height else None

    def sample(row: dict) -> str:
        return f"task={row['task']!r} sample_id={row['sample_id']!r} length={row['length']}"

    for column in REQUIRED_VALUES:
        row = example(pl.col(column).is_null())
        if row is not None:
            raise SampleTableError(f"{source}: column {column!r} is null, e.g. sample {sample(row)}")
    for column in ("length", "context_tokens"):
        row = example(pl.col(column) < 0)
        if row is not None:
            raise SampleTableError(f"{source}: column {column!r} is negative ({row[column]}), "
                                   f"e.g. sample {sample(row)}")
    for task in out["task"].unique(maintain_order=True):
        try:
            path_segment(task, "task", source=source)
        except UnsafeName as exc:
            raise SampleTableError(str(exc)) from None
    from raylc.scoring.extract import EXTRACTORS
    from raylc.scoring.metrics import METRICS

    for column, known in (("metric", [*METRICS, *SAMPLE_METRICS]), ("extractor", list(EXTRACTORS))):
        row = example(~pl.col(column).is_in(known))
        if row is not None:
            raise SampleTableError(f"{source}: column {column!r}: unknown {column} {row[column]!r} (known: "
                                   f"{', '.join(sorted(known))}), e.g. sample {sample(row)}")
    dup = out.filter(pl.struct("task", "sample_id", "length").is_duplicated())
    if dup.height:
        row = dup.row(0, named=True)
        raise SampleTableError(
            f"{source}: duplicate sample task={row['task']!r} sample_id={row['sample_id']!r} length={row['length']}")
    over = out.filter((pl.col("length") > 0) & (pl.col("context_tokens") > pl.col("length")))
    if over.height:
        row = over.row(0, named=True)
        raise SampleTableError(
            f"{source}: sample task={row['task']!r} sample_id={row['sample_id']!r} has {row['context_tokens']} "
            f"context tokens > target {row['length']}")
    return out
