"""Observation spans (DOLCE Section 3.1, Appendix K.1): lengths C and starts per problem."""

from __future__ import annotations

import polars as pl

from raylc.spec import Sampling

SPAN_SCHEMA = {"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64, "start": pl.Int64}


def exponential_ladder(max_len: int) -> list[int]:
    """0, 1, 2, 5, 10, 20, 50, 100, ... strictly below ``max_len``."""
    out, scale = [0], 1
    while True:
        for m in (1, 2, 5):
            if m * scale >= max_len:
                return out
            out.append(m * scale)
        scale *= 10


def partial_lengths(sampling: Sampling, max_len: int) -> list[int]:
    """The partial observation lengths (C < L is applied per problem); full context is separate."""
    if sampling.lengths == "exponential":
        return exponential_ladder(max_len)
    return sorted({int(c) for c in sampling.lengths if c != "L"})


def sample_spans(problems: pl.DataFrame, sampling: Sampling) -> pl.DataFrame:
    """One row per observation span: ``task, problem_id, L, C, start``.

    Every length C < L of the ladder, plus the full context C = L (when the ladder is
    exponential or lists "L"). Starts are 0, s, 2s, ... <= L - C with the take-every stride
    s = max(every, floor(stride_fraction * C)); ``enumerate`` uses s = 1. Deterministic.
    """
    keys = problems.select("task", "problem_id", "L")
    if keys.height == 0:
        return pl.DataFrame(schema=SPAN_SCHEMA)
    ladder = pl.DataFrame({"C": partial_lengths(sampling, int(keys["L"].max()))}, schema={"C": pl.Int64})
    spans = keys.join(ladder, how="cross").filter(pl.col("C") < pl.col("L"))
    if sampling.lengths == "exponential" or "L" in sampling.lengths:
        spans = pl.concat([spans, keys.with_columns(C=pl.col("L"))])
    if sampling.strategy == "enumerate":
        stride = pl.lit(1, pl.Int64)
    else:
        proportional = (pl.col("C") * sampling.stride_fraction).floor().cast(pl.Int64)
        stride = pl.max_horizontal(pl.lit(sampling.every, pl.Int64), proportional)
    # C = 0 (no context) has a single, empty span
    n_starts = pl.when(pl.col("C") == 0).then(1).otherwise(pl.col("L") - pl.col("C") + 1)
    return (
        spans.with_columns(start=pl.int_ranges(0, n_starts, stride, dtype=pl.Int64))
        .explode("start")
        .select(list(SPAN_SCHEMA))
        .cast(SPAN_SCHEMA)
        .sort("task", "problem_id", "C", "start")
    )
