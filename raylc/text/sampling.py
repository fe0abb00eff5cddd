"""Observation spans (DOLCE Section 3.1, Appendix K.1): lengths C and starts per problem."""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Optional, Union

import polars as pl
from pydantic import Field, field_validator, model_validator

from raylc.io.job_model import JobModel

Length = Union[int, Literal["L"]]  #: a span length; "L" is the whole context
MAX_UNITS = 10**9  #: a span length or stride above this is a typo (no context has that many units)


class Sampling(JobModel):
    """Observation spans (DOLCE Section 3.1) and the sampling strategies of Appendix K.1.

    ``lengths`` is ``"exponential"`` (0, 1, 2, 5, 10, 20, 50, 100, ... below L, plus L) or an
    explicit list where ``"L"`` is the full context; ``min_length`` / ``max_length`` keep only
    partial lengths in that range ("only >= 10", "only <= 10"; C = 0 and C = L are kept).
    Strategies over each length's candidate starts 0, 1, ..., L - C:

    - ``enumerate``: every start;
    - ``take_every``: starts 0, s, 2s, ... with s = max(every, floor(stride_fraction * C));
      ``every`` is one stride or a mapping ``{C: stride}`` of per-length strides (lengths it
      does not list use 1), as written by ``raylc plan --budget-tokens`` (:mod:`raylc.dolce.plan`);
    - ``take_ip_rate``: the same with s = max(1, floor(stride_fraction * C)), a take rate
      inversely proportional to C (``stride_fraction`` > 0 required);
    - ``sample_rate``: each start kept with probability ``rate``;
    - ``sample_ip_rate``: each start kept with probability min(1, ``rate`` / C).

    Random strategies draw from a hash of (job seed, problem, C, start), so a span's fate
    does not depend on the other spans or on the row order. The single C = 0 and C = L
    spans are always kept.
    """


    lengths: Union[Literal["exponential"], list[Length]] = Field(default="exponential", description=(
        "Span lengths C in units: `exponential` (0, 1, 2, 5, 10, 20, 50, 100, ... below L, and L) or a list, `L` "
        "the whole context."))
    strategy: Literal["take_every", "enumerate", "take_ip_rate", "sample_rate", "sample_ip_rate"] = Field(
        default="take_every", description="Which starts of each length to keep (DOLCE Appendix K.1).")
    every: Union[int, dict[int, int]] = Field(default=1, description=(
        "`take_every`: the stride, or `{C: stride}` per length (others: 1), as `raylc plan --budget-tokens` "
        "writes it."))
    stride_fraction: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "`take_every`: the stride is at least floor(stride_fraction x C); `take_ip_rate`: it is that (> 0)."))
    rate: float = Field(default=1.0, gt=0.0, description=(
        "`sample_rate`: each start kept with this probability; `sample_ip_rate`: with min(1, rate / C)."))
    min_length: int = Field(default=0, ge=0, description="Keep partial lengths >= this (C = 0 and L always kept).")
    max_length: Optional[int] = Field(default=None, ge=0, description=(
        "Keep partial lengths <= this; null: no bound."))

    @field_validator("every", mode="before")
    @classmethod
    def _every_strides(cls, v: Any) -> Union[int, dict[int, int]]:
        """One stride >= 1, or ``{C: stride}`` with lengths >= 0 and strides >= 1 (sorted by C)."""
        def whole(x: Any) -> int:
            if isinstance(x, float) and not x.is_integer():
                raise ValueError(x)
            return int(x)

        try:
            every = {whole(c): whole(s) for c, s in v.items()} if isinstance(v, dict) else whole(v)
            bad = (not 1 <= every <= MAX_UNITS if isinstance(every, int)
                   else any(not (0 <= c <= MAX_UNITS and 1 <= s <= MAX_UNITS) for c, s in every.items()))
        except (TypeError, ValueError):
            bad = True
        if bad:
            raise ValueError("every must be a stride >= 1 or a mapping {length >= 0: stride >= 1} "
                             f"(each at most {MAX_UNITS:,})")
        return dict(sorted(every.items())) if isinstance(every, dict) else every

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v: Any) -> Any:
        """A list of lengths holds at least one, each "L" or 0 <= C <= MAX_UNITS."""
        if isinstance(v, list):
            if not v:
                raise ValueError("lengths is empty: list span lengths (e.g. [0, 1, 2, L]) or use exponential")
            bad = [c for c in v if c != "L" and not 0 <= c <= MAX_UNITS]
            if bad:
                raise ValueError(f"every length must be L or 0 <= C <= {MAX_UNITS:,} (got {bad[0]})")
        return v

    @model_validator(mode="after")
    def _a_partial_length(self) -> "Sampling":
        """Some partial length 0 < C survives ``min_length`` / ``max_length``: the categories'
        thresholds (lambda_p, k_p) are read off them, and a fit without one fails after inference."""
        low, high = max(self.min_length, 1), self.max_length
        if self.lengths == "exponential":
            none = high is not None and high < low
        else:
            none = not any(c != "L" and low <= c and (high is None or c <= high) for c in self.lengths)
        if none:
            raise ValueError("no partial length 0 < C < L is sampled (lengths, min_length, max_length): DOLCE's "
                             "categories need one (e.g. lengths: [0, 1, 2, 5, L])")
        return self

    @model_validator(mode="after")
    def _strategy_params(self) -> "Sampling":
        if self.strategy == "take_ip_rate" and self.stride_fraction <= 0:
            raise ValueError("strategy take_ip_rate needs stride_fraction > 0")
        if self.strategy == "sample_rate" and self.rate > 1:
            raise ValueError("strategy sample_rate needs rate <= 1")
        return self


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


def _uniform(keys: pl.Series) -> pl.Series:
    """A uniform [0, 1) number per key string, from blake2b (stable across runs and versions)."""
    return pl.Series(
        [int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little") / 2.0**64 for k in keys],
        dtype=pl.Float64,
    )


def observed_lengths(sampling: Sampling, max_len: int) -> list[int]:
    """The partial lengths sampled for contexts up to ``max_len`` units: the ladder within
    [min_length, max_length], C = 0 always kept (DOLCE Appendix K.1 "only >= 10" / "only <= 10")."""
    return [c for c in partial_lengths(sampling, max_len)
            if c == 0 or (c >= sampling.min_length and (sampling.max_length is None or c <= sampling.max_length))]


def stride_expr(sampling: Sampling) -> pl.Expr:
    """The take-every stride of each row's length ``C`` under the strategy (1 for the others).

    ``take_every``: max(every(C), floor(stride_fraction * C)), every(C) the per-length entry of
    an ``every`` mapping (1 where it has none); ``take_ip_rate``: max(1, floor(stride_fraction * C)).
    """
    if sampling.strategy in ("enumerate", "sample_rate", "sample_ip_rate"):
        return pl.lit(1, pl.Int64)
    if sampling.strategy == "take_ip_rate":
        floor = pl.lit(1, pl.Int64)
    elif isinstance(sampling.every, dict):
        floor = pl.col("C").replace_strict(sampling.every, default=1, return_dtype=pl.Int64)
    else:
        floor = pl.lit(sampling.every, pl.Int64)
    return pl.max_horizontal(floor, (pl.col("C") * sampling.stride_fraction).floor().cast(pl.Int64))


def sample_spans(problems: pl.DataFrame, sampling: Sampling, seed: int = 0) -> pl.DataFrame:
    """One row per observation span: ``task, problem_id, L, C, start``.

    Every length C < L of the ladder within [min_length, max_length], plus the full context
    C = L (when the ladder is exponential or lists "L"); starts by the strategy (see
    :class:`raylc.spec.Sampling`, Appendix K.1). Deterministic for a given ``seed``.
    """
    keys = problems.select("task", "problem_id", "L")
    if keys.height == 0:
        return pl.DataFrame(schema=SPAN_SCHEMA)
    ladder = pl.DataFrame({"C": observed_lengths(sampling, int(keys["L"].max()))}, schema={"C": pl.Int64})
    spans = keys.join(ladder, how="cross").filter(pl.col("C") < pl.col("L"))
    if sampling.lengths == "exponential" or "L" in sampling.lengths:
        spans = pl.concat([spans, keys.with_columns(C=pl.col("L"))])
    # C = 0 (no context) has a single, empty span
    n_starts = pl.when(pl.col("C") == 0).then(1).otherwise(pl.col("L") - pl.col("C") + 1)
    spans = (
        spans.with_columns(start=pl.int_ranges(0, n_starts, stride_expr(sampling), dtype=pl.Int64))
        .explode("start")
        .select(list(SPAN_SCHEMA))
        .cast(SPAN_SCHEMA)
    )
    if sampling.strategy in ("sample_rate", "sample_ip_rate"):
        key = pl.concat_str([pl.lit(str(seed)), pl.col("problem_id"), pl.col("C").cast(pl.String),
                             pl.col("start").cast(pl.String)], separator="|")
        u = key.map_batches(_uniform, return_dtype=pl.Float64)
        p = (pl.lit(sampling.rate) if sampling.strategy == "sample_rate"
             else (sampling.rate / pl.col("C")).clip(upper_bound=1.0))
        single = (pl.col("C") == 0) | (pl.col("C") == pl.col("L"))
        spans = spans.filter(single | (u < p))
    return spans.sort("task", "problem_id", "C", "start")
