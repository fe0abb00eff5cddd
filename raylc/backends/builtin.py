"""The built-in backends (:mod:`raylc.backends.registry`): the simulated probe, vLLM engines
and OpenAI-compatible endpoints. Each imports its implementation only when it is used."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Optional

import polars as pl

from raylc.backends.registry import ENGINE, BackendPlugin, EnginePool, register_backend
from raylc.spec import OpenAIProbe, SimulatedProbe, VLLMProbe

if TYPE_CHECKING:
    from raylc.backends.base import Backend
    from raylc.spec import Job


@register_backend
class Simulated(BackendPlugin):
    """The simulated probe (:mod:`raylc.backends.simulated`), which knows the suite's built table."""

    probe = SimulatedProbe

    def text_backend(self, job: Job, table: Optional[pl.LazyFrame]) -> Backend:
        from raylc.backends.simulated import simulated_backend

        return simulated_backend(job.probe, table, seed=job.seed)  # type: ignore[arg-type]


@register_backend
class VLLM(BackendPlugin):
    """vLLM engines (:mod:`raylc.backends.vllm_engine`) behind prepare actors that tokenize with
    the engine's tokenizer; one request batch per file (a 128K-token batch is minutes of GPU
    time), and no no-progress guard by default (the wait for a GPU node may be long)."""

    probe = VLLMProbe
    pipeline = ENGINE
    block_factor = 1
    no_progress_guard = False

    def prompt_tokenizer(self, probe: Any) -> tuple[str, bool]:
        from raylc.backends.vllm_engine import tokenizer_spec

        return tokenizer_spec(probe), probe.chat_template

    def engine(self, probe: Any) -> Any:
        from raylc.backends.vllm_engine import VLLMEngine

        return VLLMEngine(probe)

    def engine_pool(self, job: Job, batch_size: int, verbose: bool) -> EnginePool:
        from raylc.backends.vllm_engine import actor_options, concurrent_batches

        probe: Any = job.probe
        return EnginePool(replicas=probe.replicas, prepare_actors=probe.prepare_actors,
                          concurrent_batches=concurrent_batches(probe, batch_size),
                          options=actor_options(probe, verbose))

    def check_cluster(self, job: Job, log: Callable[[str], None]) -> None:
        """Engines on GPUs need ``tensor_parallel_size`` GPUs each (``probe.device: cpu`` engines
        need none). A local Ray started here can never gain GPUs, so that is an error; a cluster
        may still scale GPU workers up, so a warning."""
        import ray

        probe: Any = job.probe
        if probe.device == "cpu":
            return
        have = ray.cluster_resources().get("GPU", 0)
        need = probe.tensor_parallel_size
        if have >= need:
            return
        msg = f"probe.backend vllm needs {need} GPU(s) per replica; the Ray cluster has {have:g} GPU(s) now"
        if not (job.ray.address or os.environ.get("RAY_ADDRESS")):
            raise RuntimeError(msg + " and this local Ray instance cannot gain any (submit the job to a GPU cluster, "
                                     "or set probe.device: cpu with vLLM's CPU build)")
        log(f"warning: {msg}; waiting for the autoscaler to add GPU workers")

    def preflight(self, job: Job, section: str, **options: Any) -> Any:
        from raylc.backends.preflight import check_vllm

        return check_vllm(job, section, **options)


@register_backend
class OpenAI(BackendPlugin):
    """Any OpenAI-compatible endpoint (:mod:`raylc.backends.openai_http`), checked before Ray starts."""

    probe = OpenAIProbe

    def text_backend(self, job: Job, table: Optional[pl.LazyFrame]) -> Backend:
        from raylc.backends.openai_http import OpenAIBackend

        return OpenAIBackend(job.probe, seed=job.seed)  # type: ignore[arg-type]

    def check_endpoint(self, job: Job) -> None:
        with self.text_backend(job, None) as backend:
            backend.check_endpoint()

    def preflight(self, job: Job, section: str, *, endpoints: bool = False, source: Any = None, prompts: Any = None,
                  **_: Any) -> Any:
        """``raylc check`` (``endpoints``) asks the server; a run does not."""
        from raylc.backends.preflight import check_openai

        return check_openai(job, section, source=source, prompts=prompts) if endpoints else None
