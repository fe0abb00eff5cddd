"""The built-in backends (:mod:`raylc.backends.registry`): the simulated probe, vLLM engines and
OpenAI-compatible endpoints, each its config, its pipeline stages and its checks. Each imports
its implementation only when it is used."""

from __future__ import annotations

from functools import cache, partial
from typing import TYPE_CHECKING, Any, Callable, Optional

import polars as pl

from raylc.backends.config import OpenAIProbe, SimulatedProbe, VLLMProbe
from raylc.backends.registry import BackendPlugin, register_backend
from raylc.backends.stages import (
    EngineStage,
    PipelineStage,
    PrepareStage,
    ProblemSource,
    StageInputs,
    added_tokens,
    text_pipeline,
)

if TYPE_CHECKING:
    from raylc.backends.base import Backend
    from raylc.spec import Job


def simulated_backend(job: Job, table: Optional[pl.LazyFrame]) -> Backend:
    """The simulated probe, which knows the suite's built table (its planted answers)."""
    from raylc.backends.simulated import simulated_backend as build

    return build(job.probe, table, seed=job.seed)  # type: ignore[arg-type]


def openai_backend(job: Job, table: Optional[pl.LazyFrame] = None) -> Backend:
    """An OpenAI-compatible endpoint's client. It counts and fits prompts with the tokenizer
    ``raylc check`` and ``raylc plan`` count them with: ``probe.tokenizer``, else the suite's
    (:meth:`raylc.spec.Job.count_tokenizer`), else the offline default."""
    from raylc.backends.openai_http import OpenAIBackend

    probe = job.probe.model_copy(update={"tokenizer": job.count_tokenizer()})
    return OpenAIBackend(probe, seed=job.seed)  # type: ignore[arg-type]


def vllm_engine(probe: Any) -> Any:
    """A vLLM engine (``AsyncLLM``), built in its actor."""
    from raylc.backends.vllm_engine import VLLMEngine

    return VLLMEngine(probe)


@register_backend
class Simulated(BackendPlugin):
    """The simulated probe (:mod:`raylc.backends.simulated`): one text stage."""

    probe = SimulatedProbe

    def stages(self, job: Job, verbose: bool) -> list[PipelineStage]:
        return text_pipeline(job, simulated_backend)


def _engine_tokenizer(probe: Any) -> tuple[str, bool]:
    """What :class:`PrepareStage` loads for a vLLM probe: the engine's tokenizer and whether to
    apply its chat template."""
    from raylc.backends.vllm_engine import tokenizer_spec

    return tokenizer_spec(probe), probe.chat_template


@register_backend
class VLLM(BackendPlugin):
    """vLLM engines (:mod:`raylc.backends.vllm_engine`) behind prepare actors that tokenize with
    the engine's tokenizer; one request batch per file (a 128K-token batch is minutes of GPU
    time), and no no-progress guard by default (the wait for a GPU node may be long)."""

    probe = VLLMProbe
    block_factor = 1
    no_progress_guard = False

    def stages(self, job: Job, verbose: bool) -> list[PipelineStage]:
        """``prepare_actors`` CPU actors render, fit and tokenize; ``replicas`` engine actors (GPUs,
        or CPUs with ``probe.device: cpu``) each keep ``max_concurrent_batches`` batches in flight."""
        from raylc.backends.vllm_engine import actor_options, concurrent_batches

        probe: Any = job.probe
        options = actor_options(probe, verbose)
        return [
            PipelineStage("prepare", partial(PrepareStage, tokenizer=_engine_tokenizer(probe)),
                          actors=probe.prepare_actors, num_cpus=job.ray.actor_num_cpus),
            PipelineStage("engine", partial(EngineStage, engine=vllm_engine), actors=probe.replicas,
                          num_cpus=options.pop("num_cpus", job.ray.actor_num_cpus), batch_size=job.ray.batch_size,
                          concurrent_batches=concurrent_batches(probe, job.ray.batch_size), options=options,
                          max_restarts=probe.max_engine_restarts, restarts_key="probe.max_engine_restarts",
                          label="vLLM engine"),
        ]

    def prompt_counter(self, job: Job, problems: Callable[[], Any]) -> Callable[[Any], Any]:
        """The pipeline's own :class:`PrepareStage` (render, fit into the window, tokenize with the
        engine's tokenizer and chat template), run in the driver: the count the engine will
        report. It is built, and the problems read, when first asked."""
        stage = cache(lambda: PrepareStage(job, StageInputs(ProblemSource(problems=problems())),
                                           _engine_tokenizer(job.probe)))
        return lambda rows: stage()(rows)["prompt_tokens"].to_numpy()

    def added_tokens(self, probe: Any, raw: bool = False) -> int:
        """The prepare stage's tokenizer measured (:func:`raylc.backends.stages.added_tokens`): its
        chat template (unless ``raw`` or ``chat_template: false``) or its special tokens."""
        spec, chat_template = _engine_tokenizer(probe)
        return added_tokens(spec, chat_template and not raw)

    def preflight(self, job: Job, section: str, **options: Any) -> Any:
        from raylc.backends.preflight import check_vllm

        return check_vllm(job, section, **options)


@register_backend
class OpenAI(BackendPlugin):
    """Any OpenAI-compatible endpoint (:mod:`raylc.backends.openai_http`): one text stage, the
    endpoint checked before Ray starts."""

    probe = OpenAIProbe

    def stages(self, job: Job, verbose: bool) -> list[PipelineStage]:
        return text_pipeline(job, openai_backend)

    def added_tokens(self, probe: Any, raw: bool = False) -> int:
        """In chat mode the server applies the model's chat template: measured with the template of
        ``probe.tokenizer`` (``hf:``, through ``transformers``) when it has one; else not known here (0)."""
        from raylc.backends.base import BackendUnavailable

        spec = probe.tokenizer or ""
        if raw or probe.mode != "chat" or not spec.startswith("hf:"):
            return 0
        try:
            return added_tokens(spec[3:], True)
        except (BackendUnavailable, OSError, ValueError):  # no transformers, no template, not loadable here
            return 0

    def check_endpoint(self, job: Job) -> None:
        with openai_backend(job) as backend:
            backend.check_endpoint()

    def preflight(self, job: Job, section: str, *, endpoints: bool = False, source: Any = None, prompts: Any = None,
                  **_: Any) -> Any:
        """``raylc check`` (``endpoints``) asks the server; a run does not."""
        from raylc.backends.preflight import check_openai

        return check_openai(job, section, source=source, prompts=prompts) if endpoints else None
