"""Inference backends behind one interface: ``generate(prompts: list[str]) -> list[dict]``.

See :mod:`raylc.backends.base` for the result dict and its Polars schema. vLLM is imported
only when its backend generates (it needs CUDA).
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from raylc.backends.base import GENERATION_SCHEMA, Backend, BackendUnavailable, Generation, generations_frame
from raylc.backends.simulated import SimulatedBackend, SimulatedLengthBackend, length_cases
from raylc.spec import Job

__all__ = [
    "GENERATION_SCHEMA", "Backend", "BackendUnavailable", "Generation", "generations_frame", "make_backend",
    "SimulatedBackend",
]


def make_backend(job: Job, problems: Optional[pl.DataFrame]) -> Backend:
    """The backend named by ``job.probe.backend``. The simulated probe's memorized answers come
    from ``problems`` (a planted problems table, or a samples table of a length-controlled suite)."""
    probe = job.probe
    if probe.backend == "simulated" and problems is not None and "gold" in problems.columns:
        return SimulatedLengthBackend(probe, length_cases(problems), seed=job.seed)
    if probe.backend == "simulated":
        knowledge = {} if problems is None else dict(zip(problems["problem_id"].to_list(), problems["answer"].to_list()))
        return SimulatedBackend(probe, knowledge, seed=job.seed)
    if probe.backend == "vllm":
        raise ValueError("the vLLM probe runs as an engine stage (raylc.backends.vllm_engine.VLLMEngine), not a text backend")
    if probe.backend == "openai":
        from raylc.backends.openai_http import OpenAIBackend

        return OpenAIBackend(probe, seed=job.seed)
    raise ValueError(f"unknown probe backend {probe.backend!r}")
