"""Inference backends behind one interface: ``generate(prompts: list[str]) -> list[str]``."""

from __future__ import annotations

import polars as pl

from raylc.backends.simulated import SimulatedBackend
from raylc.spec import Job


def make_backend(job: Job, problems: pl.DataFrame) -> SimulatedBackend:
    """The backend named by ``job.probe.backend``."""
    if job.probe.backend == "simulated":
        knowledge = dict(zip(problems["problem_id"].to_list(), problems["answer"].to_list()))
        return SimulatedBackend(job.probe, knowledge, seed=job.seed)
    raise ValueError(f"unknown probe backend {job.probe.backend!r}")
