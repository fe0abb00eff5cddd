"""The backend interface: ``generate(prompts: list[str]) -> list[dict]``, one dict per prompt.

Each dict (:class:`Generation`) has ``completion`` (None when the request failed),
``prompt_tokens`` (as sent, after truncation), ``generated_tokens``, ``cached_tokens``
(prefix-cache hits when the backend reports them, else None), ``finish_reason``,
``latency_s`` (None where nothing was timed), ``error`` (None on success) and ``truncated_tokens`` (context tokens cut to
fit the window). :data:`GENERATION_SCHEMA` is the matching Polars schema;
:func:`generations_frame` builds the table.
"""

from __future__ import annotations

from typing import Optional, TypedDict

import polars as pl


class BackendUnavailable(RuntimeError):
    """A backend that cannot serve requests (endpoint down, engine missing); one-line message."""


class Generation(TypedDict):
    completion: Optional[str]
    prompt_tokens: int
    generated_tokens: int
    cached_tokens: Optional[int]
    finish_reason: Optional[str]
    latency_s: Optional[float]
    error: Optional[str]
    truncated_tokens: int


GENERATION_SCHEMA: dict[str, pl.DataType] = {
    "completion": pl.String(),
    "prompt_tokens": pl.Int64(),
    "generated_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
    "finish_reason": pl.String(),
    "latency_s": pl.Float64(),
    "error": pl.String(),
    "truncated_tokens": pl.Int64(),
}
GENERATION_COLUMNS = tuple(GENERATION_SCHEMA)


def generation(
    completion: Optional[str] = None,
    *,
    prompt_tokens: int = 0,
    generated_tokens: int = 0,
    cached_tokens: Optional[int] = None,
    finish_reason: Optional[str] = None,
    latency_s: Optional[float] = 0.0,
    error: Optional[str] = None,
    truncated_tokens: int = 0,
) -> Generation:
    """One result dict with every key present."""
    return Generation(
        completion=completion,
        prompt_tokens=int(prompt_tokens),
        generated_tokens=int(generated_tokens),
        cached_tokens=None if cached_tokens is None else int(cached_tokens),
        finish_reason=finish_reason,
        latency_s=None if latency_s is None else float(latency_s),
        error=error,
        truncated_tokens=int(truncated_tokens),
    )


def generations_frame(results: list[Generation]) -> pl.DataFrame:
    """The results as a table with :data:`GENERATION_SCHEMA` (columns in that order)."""
    return pl.DataFrame(
        {c: [r[c] for r in results] for c in GENERATION_COLUMNS},  # type: ignore[literal-required]
        schema=GENERATION_SCHEMA,
    )


class Backend:
    """Base class: ``generate`` is required; ``check_endpoint`` fails fast before a run."""

    name = "backend"

    def generate(self, prompts: list[str]) -> list[Generation]:
        raise NotImplementedError

    def check_endpoint(self) -> None:
        """Raise :class:`BackendUnavailable` if the backend cannot serve requests (default: no check)."""
