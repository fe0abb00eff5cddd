"""The backend interface: ``generate(prompts, max_tokens=None, raw=None) -> list[dict]``, one dict per prompt.

A prompt is a string rendered from the DOLCE template, or its parts ``(head, context,
tail)`` (instruction, document, question) so that truncation cuts the context only;
``max_tokens`` optionally overrides the probe's ``sampling.max_tokens`` per request, and a
true ``raw`` flag sends that prompt without the chat template.

Each dict (:class:`Generation`) has ``completion`` (None when the request failed),
``prompt_tokens`` (as sent, after truncation), ``generated_tokens``, ``cached_tokens``
(prefix-cache hits when the backend reports them, else None), ``finish_reason``,
``latency_s`` (None where nothing was timed), ``error`` (None on success) and
``truncated_tokens`` (context tokens cut to fit the window). :data:`GENERATION_SCHEMA` is the matching Polars schema;
:func:`generations_frame` builds the table.
"""

from __future__ import annotations

from typing import Optional, Sequence, TypedDict, Union

import polars as pl

from raylc.io.schemas import described


class BackendUnavailable(RuntimeError):
    """A backend that cannot serve requests (endpoint down, engine missing); one-line message."""


class EngineDead(RuntimeError):
    """A token engine's core died; its actor must exit so that Ray restarts it (and retries the batch)."""


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
#: the generation columns as every checkpoint shard stores them (``docs/reference/tables.md``)
GENERATION = described(GENERATION_SCHEMA, {
    "completion": "The model's output (null: the request failed).",
    "prompt_tokens": "Prompt tokens as sent, after truncation (the server's count for an OpenAI endpoint).",
    "generated_tokens": "Tokens generated.",
    "cached_tokens": "Prompt tokens served from the prefix cache (null: the backend does not report them).",
    "finish_reason": "Why generation stopped (`stop`, `length`, ...).",
    "latency_s": "Seconds from sending the request to its last token (null: not timed).",
    "error": "Why the request failed (null: it succeeded); a failed request is retried on resume.",
    "truncated_tokens": "Context tokens cut to fit the probe's window.",
})


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


#: the columns of a rendered request: instruction, document, question (truncation cuts the context only)
PROMPT_PARTS = ("head", "context", "tail")
Prompt = Union[str, tuple[str, str, str]]
MaxTokens = Optional[Sequence[Optional[int]]]
RawFlags = Optional[Sequence[Optional[bool]]]


def prompt_parts(prompt: Prompt) -> tuple[str, str, str]:
    """``(head, context, tail)``: given parts as they are; a string split by the DOLCE template
    (:func:`raylc.text.truncation.split_prompt`)."""
    if isinstance(prompt, str):
        from raylc.text.truncation import split_prompt

        return split_prompt(prompt)
    head, context, tail = prompt
    return head, context, tail


def prompt_text(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else "".join(prompt)


def request_max_tokens(max_tokens: MaxTokens, n: int, default: int) -> list[int]:
    """Per-request ``max_tokens``: the override where given (not null), else ``default``."""
    if max_tokens is None:
        return [default] * n
    if len(max_tokens) != n:
        raise ValueError(f"{n} prompts but {len(max_tokens)} max_tokens values")
    return [default if m is None else int(m) for m in max_tokens]


def request_raw(raw: RawFlags, n: int) -> list[bool]:
    """Per-request ``raw`` flags (send without the chat template): false where not given."""
    if raw is None:
        return [False] * n
    if len(raw) != n:
        raise ValueError(f"{n} prompts but {len(raw)} raw flags")
    return [bool(r) for r in raw]


class Backend:
    """Base class: ``generate`` is required; ``check_endpoint`` fails fast before a run;
    ``close`` releases what the backend holds (connections), and whoever builds a backend calls
    it (or uses the backend as a context manager) when done with it."""

    name = "backend"

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None,
                 raw: RawFlags = None) -> list[Generation]:
        raise NotImplementedError

    def check_endpoint(self) -> None:
        """Raise :class:`BackendUnavailable` if the backend cannot serve requests (default: no check)."""

    def for_rows(self, rows: pl.DataFrame) -> "Backend":
        """The backend that serves these rendered request rows (default: itself)."""
        return self

    def close(self) -> None:
        """Release what the backend holds, e.g. kept connections (default: nothing). Idempotent;
        a backend used after ``close`` may open them again."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
