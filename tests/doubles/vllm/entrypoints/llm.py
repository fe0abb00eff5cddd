"""The offline ``LLM`` class of vLLM 0.33.0 (``entrypoints/llm.py:62-480``).

* ``__init__`` has the real keyword signature (``:177-222``); ``disable_log_stats`` defaults to
  True when not given (``:225-226``), so ``RequestOutput.metrics`` is None unless the caller
  passes ``disable_log_stats=False``. Extra keywords go to ``EngineArgs`` (``:295-336``), and the
  engine is built with ``UsageContext.LLM_CLASS`` (``:341-343``), which selects the offline batch
  defaults (``engine/arg_utils.py:2940-3039``).
* ``generate`` (``:417-481`` -> ``entrypoints/common/offline.py``): a list of ``SamplingParams``
  must match the number of prompts, else ``VLLMValidationError("The lengths of prompts (N) and
  params (M) must be the same.")`` (``offline.py:253-266``); each request is rendered and added in
  turn, and if one fails the ones already added are aborted and the error raised
  (``offline.py:539-566``); ``output_kind`` of the params is set to ``FINAL_ONLY`` in place
  (``offline.py:568-577``); request ids count up from "0" over the object's lifetime; outputs
  come back sorted by request id, i.e. in input order (``offline.py:589-642``).
* There is no ``LLM.shutdown()`` in 0.33.0; the engine core is stopped when the object is
  garbage-collected (the double: ``weakref.finalize``), or via ``llm.llm_engine.engine_core``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from vllm.engine.arg_utils import EngineArgs
from vllm.exceptions import VLLMValidationError
from vllm.outputs import RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.llm_engine import LLMEngine


def _prompt_to_seq(prompts: Any) -> Sequence[Any]:
    # renderers/inputs/preprocess.py:46-54
    if isinstance(prompts, (dict, str, bytes)) or (
        len(prompts) > 0 and all(isinstance(p, int) for p in prompts)
    ):
        return [prompts]
    return prompts


class LLM:
    """An LLM for generating texts from given prompts and sampling parameters."""

    def __init__(
        self,
        model: str,
        *,
        runner: str = "auto",
        convert: str = "auto",
        tokenizer: str | None = None,
        tokenizer_mode: str = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        allowed_local_media_path: str = "",
        allowed_media_domains: list[str] | None = None,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        quantization: str | None = None,
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        chat_template: Any = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.92,
        cpu_offload_gb: float = 0,
        offload_group_size: int = 0,
        offload_num_in_group: int = 1,
        offload_prefetch_step: int = 1,
        offload_params: set[str] | None = None,
        enforce_eager: bool = False,
        enable_return_routed_experts: bool = False,
        return_sampling_mask: bool = False,
        disable_custom_all_reduce: bool = False,
        hf_token: bool | str | None = None,
        hf_overrides: Any = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        pooler_config: Any = None,
        structured_outputs_config: Any = None,
        profiler_config: Any = None,
        attention_config: Any = None,
        kv_cache_memory_bytes: int | None = None,
        compilation_config: Any = None,
        quantization_config: Any = None,
        logits_processors: list[Any] | None = None,
        spec_method: str | None = None,
        spec_model: str | None = None,
        spec_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        if "disable_log_stats" not in kwargs:
            kwargs["disable_log_stats"] = True
        if hf_overrides is None:
            hf_overrides = {}
        if runner not in ("auto", "generate"):
            raise NotImplementedError(f"vLLM double: runner={runner!r} is not modelled (generate only)")
        if spec_method or spec_model or spec_tokens or kwargs.get("speculative_config"):
            raise NotImplementedError("vLLM double: speculative decoding is not modelled")
        if logits_processors:
            raise NotImplementedError("vLLM double: custom logits processors are not modelled")
        dp = int(kwargs.get("data_parallel_size", 1))
        if dp > 1 and kwargs.get("distributed_executor_backend") != "external_launcher":
            raise ValueError(
                f"LLM(data_parallel_size={dp}) is not supported for single-"
                "process usage and may hang. Please use "
                "the explicit multi-process data-parallel example at "
                "'examples/features/data_parallel/data_parallel_offline.py'.")
        engine_args = EngineArgs(
            model=model, runner=runner, tokenizer=tokenizer, tokenizer_mode=tokenizer_mode,
            skip_tokenizer_init=skip_tokenizer_init, trust_remote_code=trust_remote_code,
            tensor_parallel_size=tensor_parallel_size, dtype=dtype, quantization=quantization,
            revision=revision, tokenizer_revision=tokenizer_revision, seed=seed,
            gpu_memory_utilization=gpu_memory_utilization, kv_cache_memory_bytes=kv_cache_memory_bytes,
            cpu_offload_gb=cpu_offload_gb, enforce_eager=enforce_eager,
            disable_custom_all_reduce=disable_custom_all_reduce, hf_token=hf_token, hf_overrides=hf_overrides,
            **kwargs,
        )
        self.llm_engine = LLMEngine.from_engine_args(engine_args=engine_args, usage_context=UsageContext.LLM_CLASS)
        self.model_config = self.llm_engine.model_config
        self.engine_class = type(self.llm_engine)
        self.request_counter = itertools.count()
        self.default_sampling_params: dict[str, Any] | None = None
        self.chat_template = chat_template

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> "LLM":
        return cls(**vars(engine_args))

    def get_tokenizer(self) -> Any:
        return self.llm_engine.get_tokenizer()

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return self.llm_engine.reset_prefix_cache(reset_running_requests, reset_connector)

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: Any = None,
        priority: int | Sequence[int] | None = None,
        tokenization_kwargs: dict[str, Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Generates the completions for the input prompts, in input order."""
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if lora_request is not None:
            raise NotImplementedError("vLLM double: LoRA is not modelled")
        seq_prompts = _prompt_to_seq(prompts)
        seq_params = self._params_to_seq(sampling_params, len(seq_prompts))
        added: list[str] = []
        try:
            for i, prompt in enumerate(seq_prompts):
                params = seq_params[i]
                if isinstance(params, SamplingParams):
                    params.output_kind = RequestOutputKind.FINAL_ONLY
                request_id = str(next(self.request_counter))
                added.append(self.llm_engine.add_request(request_id, prompt, params))
        except Exception:
            if added:
                self.llm_engine.abort_request(added, internal=True)
            raise
        outputs: list[RequestOutput] = []
        while self.llm_engine.has_unfinished_requests():
            for output in self.llm_engine.step():
                if output.finished:
                    outputs.append(output)
        return sorted(outputs, key=lambda x: int(x.request_id))

    @staticmethod
    def _params_to_seq(params: Any, num_requests: int) -> Sequence[Any]:
        if isinstance(params, Sequence):
            if len(params) != num_requests:
                raise VLLMValidationError(
                    f"The lengths of prompts ({num_requests}) "
                    f"and params ({len(params)}) must be the same."
                )
            return params
        return [params] * num_requests
