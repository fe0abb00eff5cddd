"""vLLM offline engine backend (pinned ``vllm==0.33.0``, imported lazily: it needs CUDA).

Design: one :class:`VLLMBackend` per Ray Data actor, holding one ``vllm.LLM`` built once
from :func:`engine_kwargs`; the pipeline's existing ``map_batches`` + ``ActorPoolStrategy``
(``replicas`` actors, each with :func:`actor_options` = ``tensor_parallel_size`` GPUs)
drives it. We do **not** use Ray's ``ray.data.llm``
(``vLLMEngineProcessorConfig`` / ``build_processor``, Ray 2.60) because it does not map
our fields cleanly: its output row (``vLLMOutputData``: ``generated_text``,
``num_input_tokens``, ``num_generated_tokens``, ``time_taken_llm``) has no
``finish_reason`` and no ``num_cached_tokens``, both of which we record; it owns the
dataset pipeline (its own chat-template and tokenize stages, preprocess/postprocess
rows), whereas truncation must run with the engine's tokenizer *after* the chat
template is accounted for and refusals must become rows with an error; and it drives
``AsyncLLMEngine`` rather than the documented offline ``LLM`` API.

vLLM 0.33.0 facts used (from the wheel's source):

* ``vllm.LLM(model, *, tokenizer, tensor_parallel_size, dtype, gpu_memory_utilization,
  hf_overrides, **kwargs)``; extra kwargs go to ``EngineArgs``, whose fields include
  ``max_model_len``, ``enable_prefix_caching``, ``enable_chunked_prefill``,
  ``max_num_batched_tokens``, ``distributed_executor_backend`` (``"uni"``: one process;
  ``"mp"``: TP workers as local subprocesses, spawned when inside a Ray actor).
* ``LLM.generate(prompts, sampling_params, *, use_tqdm)`` accepts ``TokensPrompt``
  (a TypedDict: ``{"prompt_token_ids": [...]}``) and returns ``RequestOutput``\\s in input
  order; ``LLM.get_tokenizer()`` returns the engine's tokenizer.
* ``SamplingParams`` fields ``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``.
* ``RequestOutput.prompt_token_ids``, ``.num_cached_tokens``, ``.metrics``
  (``RequestStateStats`` or None), ``.outputs[0].text``, ``.token_ids``, ``.finish_reason``
  (``"stop"``, ``"length"``, ``"abort"``, ``"error"``, ``"repetition"``).

With ``chat_template`` on, each (truncated) prompt becomes one user message rendered by the
engine tokenizer's ``apply_chat_template(messages, tokenize=False,
add_generation_prompt=True)`` and is encoded without adding special tokens (the template
has them); off, the prompt is encoded with the tokenizer's default special tokens. The
token ids are sent as ``{"prompt_token_ids": ids}``. ``latency_s`` is the request's
queued-to-last-token time when vLLM reports metrics, else the wall time of the batch.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from raylc.backends.base import (
    Backend, BackendUnavailable, Generation, MaxTokens, Prompt, generation, prompt_parts, prompt_text, request_max_tokens,
)
from raylc.spec import GenerationParams, VLLMProbe
from raylc.truncation import PromptTooLong, fit_to_window

VLLM_VERSION = "0.33.0"
INSTALL_HINT = "vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine"
_FAILED = ("abort", "error")


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`BackendUnavailable` with the install hint."""
    try:
        import vllm
    except ImportError:
        raise BackendUnavailable(INSTALL_HINT) from None
    return vllm


def engine_kwargs(probe: VLLMProbe) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` for the probe (vLLM 0.33.0 ``LLM``/``EngineArgs`` names).

    ``replicas``, ``chat_template``, ``sampling`` and ``truncation`` are ours, not vLLM's.
    A ``tokenizer`` given as ``hf:<name>`` is passed as ``<name>``.
    """
    kw: dict[str, Any] = {
        "model": probe.model,
        "max_model_len": probe.max_model_len,
        "tensor_parallel_size": probe.tensor_parallel_size,
        "gpu_memory_utilization": probe.gpu_memory_utilization,
        "enable_prefix_caching": probe.enable_prefix_caching,
        "enable_chunked_prefill": probe.enable_chunked_prefill,
        "dtype": probe.dtype,
    }
    if probe.tokenizer:
        kw["tokenizer"] = probe.tokenizer.removeprefix("hf:")
    if probe.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = probe.max_num_batched_tokens
    if probe.hf_overrides:
        kw["hf_overrides"] = dict(probe.hf_overrides)
    # One process for one GPU; TP workers as subprocesses on the actor's own GPUs (vLLM
    # forces "spawn" inside Ray actors), so TP stays within one node.
    kw["distributed_executor_backend"] = "uni" if probe.tensor_parallel_size == 1 else "mp"
    return kw


def actor_options(probe: VLLMProbe) -> dict[str, Any]:
    """``map_batches`` resources per engine actor: all ``tensor_parallel_size`` GPUs (use ``replicas`` actors)."""
    return {"num_gpus": probe.tensor_parallel_size}


def sampling_kwargs(params: GenerationParams) -> dict[str, Any]:
    """``vllm.SamplingParams(**kwargs)`` for the generation parameters."""
    kw: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens}
    if params.stop:
        kw["stop"] = list(params.stop)
    if params.seed is not None:
        kw["seed"] = params.seed
    return kw


class _EngineTokenizer:
    """The engine tokenizer seen by truncation: ``count`` is the length of the ids sent."""

    def __init__(self, tok: Any, chat_template: bool):
        self.tok = tok
        self.chat_template = chat_template
        self.name = "vllm-engine"
        self._last: tuple[str, list[int]] = ("", [])

    def prompt_ids(self, text: str) -> list[int]:
        """The ids sent to the engine for ``text`` (the last result is memoized)."""
        if self._last[0] == text and self._last[1]:
            return self._last[1]
        if not self.chat_template:
            ids = list(self.tok.encode(text))
        else:
            rendered = self.tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            # some tokenizers return ids regardless of tokenize=False
            ids = list(rendered) if not isinstance(rendered, str) else list(self.tok.encode(rendered, add_special_tokens=False))
        self._last = (text, ids)
        return ids

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self.prompt_ids(text))


def _latency(output: Any, batch_s: float) -> float:
    m = getattr(output, "metrics", None)
    queued, last = getattr(m, "queued_ts", 0.0) or 0.0, getattr(m, "last_token_ts", 0.0) or 0.0
    return float(last - queued) if queued > 0 and last >= queued else batch_s


class VLLMBackend(Backend):
    """``generate(prompts)`` on one ``vllm.LLM`` (built on first use, or passed as ``llm``)."""

    name = "vllm"

    def __init__(self, probe: VLLMProbe, llm: Any = None):
        self.probe = probe
        self._llm = llm
        self._tok: Optional[_EngineTokenizer] = None

    def __repr__(self) -> str:
        return f"VLLMBackend(model={self.probe.model!r}, tp={self.probe.tensor_parallel_size})"

    def check_endpoint(self) -> None:
        """Raise :class:`BackendUnavailable` when vllm cannot be imported here."""
        import_vllm()

    @property
    def llm(self) -> Any:
        """The engine, built once from :func:`engine_kwargs`."""
        if self._llm is None:
            self._llm = import_vllm().LLM(**engine_kwargs(self.probe))
        return self._llm

    def tokenizer(self) -> _EngineTokenizer:
        """The engine's tokenizer, checked once to render the chat template when it is on."""
        if self._tok is None:
            tok = _EngineTokenizer(self.llm.get_tokenizer(), self.probe.chat_template)
            try:
                tok.prompt_ids("")
            except Exception as exc:  # e.g. a base model whose tokenizer has no chat template
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise BackendUnavailable(
                    f"{self.probe.model}: cannot apply the chat template ({first}); set probe.chat_template: false"
                ) from None
            self._tok = tok
        return self._tok

    def prepare(self, prompt: Prompt, max_tokens: int) -> tuple[Optional[list[int]], int, Optional[str], int]:
        """``(token ids | None, context tokens cut, error, prompt tokens)`` for one prompt."""
        tok = self.tokenizer()
        p = self.probe
        try:
            text, cut = fit_to_window(*prompt_parts(prompt), tok, p.max_model_len, max_tokens, p.truncation)
        except PromptTooLong as exc:
            return None, 0, f"prompt too long: {exc}", tok.count(prompt_text(prompt))
        ids = tok.prompt_ids(text)
        return ids, cut, None, len(ids)

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None) -> list[Generation]:
        """One ``llm.generate`` call for the batch (one ``SamplingParams`` per request when
        ``max_tokens`` differ); prompts go in as token ids after fitting them into the window."""
        vllm = import_vllm()
        llm = self.llm
        limits = request_max_tokens(max_tokens, len(prompts), self.probe.sampling.max_tokens)
        prepared = [self.prepare(p, m) for p, m in zip(prompts, limits)]
        todo = [i for i, (ids, *_rest) in enumerate(prepared) if ids is not None]
        outputs: list[Any] = []
        t0 = time.perf_counter()
        if todo:
            tokens_prompt = getattr(vllm, "TokensPrompt", dict)  # a TypedDict: {"prompt_token_ids": ids}
            requests = [tokens_prompt(prompt_token_ids=prepared[i][0]) for i in todo]
            base = sampling_kwargs(self.probe.sampling)
            if len({limits[i] for i in todo}) == 1:
                params: Any = vllm.SamplingParams(**{**base, "max_tokens": limits[todo[0]]})
            else:
                params = [vllm.SamplingParams(**{**base, "max_tokens": limits[i]}) for i in todo]
            outputs = llm.generate(requests, params, use_tqdm=False)
        batch_s = time.perf_counter() - t0
        results: list[Generation] = [
            generation(prompt_tokens=n, error=err, truncated_tokens=cut) for _, cut, err, n in prepared
        ]
        for i, out in zip(todo, outputs):
            _, cut, _, n = prepared[i]
            comp = out.outputs[0]
            reason = comp.finish_reason
            results[i] = generation(
                comp.text,
                prompt_tokens=len(out.prompt_token_ids) if out.prompt_token_ids is not None else n,
                generated_tokens=len(comp.token_ids),
                cached_tokens=out.num_cached_tokens,
                finish_reason=reason,
                latency_s=_latency(out, batch_s),
                error=f"vLLM finished the request with {reason!r}" if reason in _FAILED else None,
                truncated_tokens=cut,
            )
        return results
