"""vLLM engine backend (pinned ``vllm==0.33.0``, imported lazily: it needs CUDA).

Design: the prepare stage (:mod:`raylc.run.inference`, CPU actors) renders, fits and
tokenizes every prompt; an engine actor (:class:`raylc.run.ray_exec.EngineActor`,
``tensor_parallel_size`` GPUs) holds one :class:`VLLMEngine`, vLLM's asynchronous engine
``AsyncLLM``, built in the actor's constructor and fed token ids only. Ray Data gives each
actor up to ``max_concurrent_batches`` batches at once (an async UDF), so the engine's
scheduler always has the next batch's requests queued while the previous ones decode: the
GPU does not wait for a batch to drain, nor for the CPU.

Why not ``ray.data.llm`` (Ray 2.60's ``build_processor``)? It feeds the same ``AsyncLLM``
the same way (``max_concurrent_batches`` batches per actor, one task per request,
``llm/_internal/batch/stages/vllm_engine_stage.py``), so it cannot keep the GPU busier; but
its output row (``vLLMOutputData``, l.151-180) has no ``finish_reason`` and no cached-token
count, both of which we record. So raylc drives ``AsyncLLM`` itself, as that stage does,
including its answer to a dead engine: exit the actor so that Ray restarts it (l.736-757).
The busy fraction of this design against the synchronous ``LLM.generate`` per batch is
measured by ``tests/benchmarks/bench_engine_pipeline.py`` (README).

vLLM 0.33.0 facts used (from the wheel's source):

* ``vllm.AsyncEngineArgs`` (``engine/arg_utils.py:3244``) takes the ``EngineArgs`` fields
  ``max_model_len`` (l.520), ``distributed_executor_backend`` (l.531), ``enable_prefix_caching``
  (l.598), ``max_num_batched_tokens`` (l.616), ``enable_chunked_prefill`` (l.713),
  ``disable_log_stats`` (l.630, default False), and ``max_num_seqs``;
  ``vllm.AsyncLLMEngine`` is ``AsyncLLM`` (``engine/async_llm_engine.py:6``), built by
  ``from_engine_args`` (``v1/engine/async_llm.py:279``) with ``log_stats = not disable_log_stats``.
* ``AsyncLLM.generate(prompt, sampling_params, request_id)`` (l.726) is an async generator of
  ``RequestOutput``; the last has ``finished``. ``EngineDeadError`` (``v1/engine/exceptions.py:12``)
  means the engine core died (unrecoverable); ``shutdown()`` (l.305) stops it.
* ``RequestOutput.prompt_token_ids``, ``.num_cached_tokens``, ``.metrics``
  (``RequestStateStats``, ``v1/metrics/stats.py:258``: ``queued_ts``, ``last_token_ts``, engine
  core monotonic clock; None when stats are off), ``.outputs[0].text/.token_ids/.finish_reason``
  (``stop``, ``length``, ``abort``, ``error``, ``repetition``).
* ``TokensPrompt`` is a TypedDict ``{"prompt_token_ids": [...]}`` (``inputs/llm.py:111``);
  ``SamplingParams`` fields ``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``.

``latency_s`` is the request's queued-to-last-token time (stats are on: we pass
``disable_log_stats=False``), None when the engine reports no metrics.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any, Optional, Sequence

from raylc.backends.base import BackendUnavailable, Generation, generation
from raylc.spec import GenerationParams, VLLMProbe

VLLM_VERSION = "0.33.0"
INSTALL_HINT = "vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine"
_FAILED = ("abort", "error")


class EngineDead(RuntimeError):
    """The engine core died; the actor must exit so that Ray restarts it (and retries the batch)."""


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`BackendUnavailable` with the install hint."""
    try:
        import vllm
    except ImportError:
        raise BackendUnavailable(INSTALL_HINT) from None
    return vllm


def engine_kwargs(probe: VLLMProbe) -> dict[str, Any]:
    """``vllm.AsyncEngineArgs(**kwargs)`` for the probe (vLLM 0.33.0 ``EngineArgs`` names).

    ``replicas``, ``chat_template``, ``sampling``, ``truncation`` and the other operational
    fields are ours, not vLLM's. A ``tokenizer`` given as ``hf:<name>`` is passed as ``<name>``.
    Stats are on (``disable_log_stats=False``) so that every request reports its timing.
    """
    kw: dict[str, Any] = {
        "model": probe.model,
        "max_model_len": probe.max_model_len,
        "tensor_parallel_size": probe.tensor_parallel_size,
        "gpu_memory_utilization": probe.gpu_memory_utilization,
        "enable_prefix_caching": probe.enable_prefix_caching,
        "enable_chunked_prefill": probe.enable_chunked_prefill,
        "dtype": probe.dtype,
        "disable_log_stats": False,
    }
    if probe.tokenizer:
        kw["tokenizer"] = probe.tokenizer.removeprefix("hf:")
    if probe.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = probe.max_num_batched_tokens
    if probe.max_num_seqs is not None:
        kw["max_num_seqs"] = probe.max_num_seqs
    if probe.hf_overrides:
        kw["hf_overrides"] = dict(probe.hf_overrides)
    # One process for one GPU; TP workers as subprocesses on the actor's own GPUs (vLLM
    # forces "spawn" inside Ray actors), so TP stays within one node.
    kw["distributed_executor_backend"] = "uni" if probe.tensor_parallel_size == 1 else "mp"
    return kw


def actor_options(probe: VLLMProbe) -> dict[str, Any]:
    """Ray resources per engine actor: ``tensor_parallel_size`` GPUs, of ``accelerator_type`` when set."""
    opts: dict[str, Any] = {"num_gpus": probe.tensor_parallel_size}
    if getattr(probe, "accelerator_type", None):
        opts["accelerator_type"] = probe.accelerator_type
    return opts


def sampling_kwargs(params: GenerationParams) -> dict[str, Any]:
    """``vllm.SamplingParams(**kwargs)`` for the generation parameters."""
    kw: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens}
    if params.stop:
        kw["stop"] = list(params.stop)
    if params.seed is not None:
        kw["seed"] = params.seed
    return kw


def tokenizer_spec(probe: VLLMProbe) -> str:
    """What the prepare stage loads as the engine's tokenizer: ``probe.tokenizer`` or the model."""
    return (probe.tokenizer or probe.model).removeprefix("hf:")


_NOISE = re.compile(r"^(For further information visit|\d+ validation errors? for )")


def one_line(exc: BaseException, limit: int = 400) -> str:
    r"""``Type: message`` of an exception on one line: its informative lines joined by " / ".
    vLLM's messages span several lines; its config errors are pydantic ``ValidationError``\ s
    (``config/model.py:151``) with a header, the reason after "Value error, " and a
    documentation link, of which only the reason is kept."""
    lines = [ln.strip().split("Value error, ", 1)[-1] for ln in str(exc).splitlines()
             if ln.strip() and not _NOISE.match(ln.strip())]
    text = " / ".join(lines)
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _latency(output: Any) -> Optional[float]:
    m = getattr(output, "metrics", None)
    queued, last = getattr(m, "queued_ts", 0.0) or 0.0, getattr(m, "last_token_ts", 0.0) or 0.0
    return float(last - queued) if queued > 0 and last >= queued else None


class VLLMEngine:
    """One vLLM ``AsyncLLM`` built from :func:`engine_kwargs`; ``await generate(ids, limits)``."""

    name = "vllm"

    def __init__(self, probe: VLLMProbe):
        self.probe = probe
        vllm = import_vllm()
        self._vllm = vllm
        try:
            self.engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(**engine_kwargs(probe)))
        except Exception as exc:  # vLLM's reason in one line (config, memory, CUDA, ...)
            raise BackendUnavailable(f"vLLM engine for {probe.model} failed to start: {one_line(exc)}") from None
        self._base = sampling_kwargs(probe.sampling)

    def __repr__(self) -> str:
        return f"VLLMEngine(model={self.probe.model!r}, tp={self.probe.tensor_parallel_size})"

    async def _one(self, ids: list[int], limit: int) -> Generation:
        vllm = self._vllm
        params = vllm.SamplingParams(**{**self._base, "max_tokens": int(limit)})
        final = None
        try:
            async for out in self.engine.generate(vllm.TokensPrompt(prompt_token_ids=list(ids)), params,
                                                  uuid.uuid4().hex):
                final = out
        except Exception as exc:
            if type(exc).__name__ == "EngineDeadError" or getattr(self.engine, "errored", False):
                raise EngineDead(one_line(exc)) from None
            return generation(prompt_tokens=len(ids), error=f"vLLM refused the request: {one_line(exc)}", latency_s=None)
        if final is None:
            return generation(prompt_tokens=len(ids), error="vLLM returned no output", latency_s=None)
        comp = final.outputs[0]
        reason = comp.finish_reason
        return generation(
            comp.text,
            prompt_tokens=len(final.prompt_token_ids) if final.prompt_token_ids is not None else len(ids),
            generated_tokens=len(comp.token_ids),
            cached_tokens=final.num_cached_tokens,
            finish_reason=reason,
            latency_s=_latency(final),
            error=f"vLLM finished the request with {reason!r}" if reason in _FAILED else None,
        )

    async def generate(self, ids: Sequence[list[int]], limits: Sequence[int]) -> list[Generation]:
        """Every request of the batch in flight at once; results in input order."""
        return list(await asyncio.gather(*(self._one(i, m) for i, m in zip(ids, limits))))

    def shutdown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            self.engine = None
            engine.shutdown()
