"""Inference backends behind one interface: ``generate(prompts: list[str]) -> list[dict]``.

See :mod:`raylc.backends.base` for the result dict and its Polars schema, and
:mod:`raylc.backends.registry` for how a job's ``probe.backend`` finds its backend (the
built-in ones register on import: :mod:`raylc.backends.builtin`). vLLM is imported only when
its backend generates (it needs CUDA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import polars as pl

from raylc.backends import builtin  # noqa: F401  (registers the built-in backends)
from raylc.backends.base import GENERATION_SCHEMA, Backend, BackendUnavailable, Generation, generations_frame
from raylc.backends.registry import backend_of

if TYPE_CHECKING:
    from raylc.spec import Job

__all__ = [
    "GENERATION_SCHEMA", "Backend", "BackendUnavailable", "Generation", "generations_frame", "make_backend",
]


def make_backend(job: Job, table: Optional[pl.DataFrame] = None) -> Backend:
    """The text backend of ``job.probe`` (:meth:`~raylc.backends.registry.BackendPlugin.text_backend`);
    ``table``: the suite's built table (the simulated probe's knowledge)."""
    return backend_of(job.probe).text_backend(job, None if table is None else table.lazy())
