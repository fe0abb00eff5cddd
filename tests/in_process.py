"""The whole inference path in this process, for tests and benchmarks (runs go through Ray:
:func:`raylc.run.ray_exec.stream_requests`)."""

from __future__ import annotations

from typing import Any, Optional

import polars as pl

from raylc.backends.registry import ENGINE, backend_of
from raylc.run.inference import ProblemSource, PromptTokenizer, generate_text, generate_tokens, prepare


def infer_frame(requests: pl.DataFrame, problems: Optional[pl.DataFrame], job: Any, backend: Any = None) -> pl.DataFrame:
    """Render ``requests`` (span references from ``problems``), then the probe's engine stage: an
    engine backend (vLLM) fits, tokenizes and generates with a local engine (or ``backend``); a
    text backend generates with ``backend``, or its own built with ``problems``."""
    plugin = backend_of(job.probe)
    source = ProblemSource(problems=problems)
    if plugin.pipeline == ENGINE:
        import asyncio

        ready = prepare(requests, source, job, PromptTokenizer.load(*plugin.prompt_tokenizer(job.probe)))
        engine = backend or plugin.engine(job.probe)
        try:
            return asyncio.run(generate_tokens(ready, engine, job.probe.max_tokens()))
        finally:
            if backend is None:
                engine.shutdown()
    if backend is None:
        backend = plugin.text_backend(job, None if problems is None else problems.lazy())
    return generate_text(prepare(requests, source, job), backend)
