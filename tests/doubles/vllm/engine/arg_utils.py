"""``EngineArgs`` / ``AsyncEngineArgs`` of vLLM 0.33.0 (``engine/arg_utils.py:489-851,3244-3247``).

The double declares a subset of the real dataclass fields, with the real defaults (a test checks
that every field here exists in the real class). Any other keyword raises ``TypeError`` as a
dataclass does -- including real fields the double does not model.

``create_engine_config`` resolves what the engine uses, in the real order
(``arg_utils.py:2245-2420``): model config (config.json + hf_overrides, dtype, max_model_len:
see ``vllm/_double/model.py``), chunked prefill / prefix caching defaults (both on for a
decoder-only generate model, ``:3041-3076``), cache config (block size 16 by default,
``config/cache.py:185,456-465``; ``gpu_memory_utilization`` in (0, 1], ``:215``), batch defaults
(``:2940-3039,3151-3241``), scheduler checks (``config/scheduler.py:317-337``) and the
heads-vs-TP check (``config/model.py:1557-1564`` via ``config/vllm.py:1549``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from vllm._double.model import (
    _DTYPES,
    _EXECUTOR_BACKENDS,
    CacheConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
    config_error,
    field_error,
    load_hf_config,
    verify_max_model_len,
)
from vllm._double.settings import load_settings
from vllm.usage.usage_lib import UsageContext

_GiB = 1 << 30
# config/scheduler.py:41,43 -- used when the usage context has no entry in the defaults table
_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
_DEFAULT_MAX_NUM_SEQS = 128
_DEFAULT_BLOCK_SIZE = 16  # config/cache.py:185


@dataclass
class EngineArgs:
    """Arguments for vLLM engine (the modelled subset of ``arg_utils.py:489-851``)."""

    model: str = "Qwen/Qwen3-0.6B"
    served_model_name: Optional[Any] = None
    tokenizer: Optional[str] = None
    runner: str = "auto"
    skip_tokenizer_init: bool = False
    tokenizer_mode: str = "auto"
    trust_remote_code: bool = False
    download_dir: Optional[str] = None
    load_format: str = "auto"
    config_format: str = "auto"
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    seed: int = 0
    max_model_len: Optional[int] = None
    distributed_executor_backend: Optional[Any] = None
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    block_size: Optional[int] = None
    enable_prefix_caching: Optional[bool] = None
    disable_sliding_window: bool = False
    cpu_offload_gb: float = 0
    gpu_memory_utilization: float = 0.92
    kv_cache_memory_bytes: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_logprobs: int = 20
    disable_log_stats: bool = False
    revision: Optional[str] = None
    code_revision: Optional[str] = None
    hf_token: Optional[Any] = None
    hf_overrides: Any = field(default_factory=dict)
    tokenizer_revision: Optional[str] = None
    quantization: Optional[str] = None
    enforce_eager: bool = False
    disable_custom_all_reduce: bool = False
    num_gpu_blocks_override: Optional[int] = None
    enable_chunked_prefill: Optional[bool] = None
    performance_mode: str = "balanced"

    def create_engine_config(self, usage_context: Optional[UsageContext] = None, headless: bool = False) -> VllmConfig:
        model = str(self.model)
        tokenizer = str(self.tokenizer) if self.tokenizer is not None else model
        model_kwargs = {"model": model, "tokenizer": tokenizer, "dtype": self.dtype,
                        "max_model_len": self.max_model_len, "hf_overrides": self.hf_overrides}

        # --- ModelConfig (config/model.py:572-830)
        hf = load_hf_config(model, self.hf_overrides)
        dtype = self.dtype.lower() if isinstance(self.dtype, str) else self.dtype
        if isinstance(dtype, str) and dtype != "auto" and dtype not in _DTYPES:
            raise config_error("ModelConfig", f"Unknown dtype: {dtype!r}", model_kwargs)
        if self.max_model_len is not None and self.max_model_len < -1:
            raise field_error("ModelConfig", "max_model_len", "greater_than_equal", self.max_model_len, {"ge": -1})
        max_model_len = verify_max_model_len(hf, self.max_model_len, model_kwargs)
        model_config = ModelConfig(
            model=model, tokenizer=tokenizer, max_model_len=max_model_len,
            dtype=str(hf.get("torch_dtype", "bfloat16")) if dtype == "auto" else str(dtype),
            seed=self.seed, hf_config_dict=hf, served_model_name=self.served_model_name or model)

        # --- defaults for chunked prefill / prefix caching (arg_utils.py:3041-3076)
        if self.enable_chunked_prefill is None:
            self.enable_chunked_prefill = True
        if self.enable_prefix_caching is None:
            self.enable_prefix_caching = True

        # --- CacheConfig (config/cache.py:185-215,456-465)
        gmu = self.gpu_memory_utilization
        if not gmu > 0:
            raise field_error("CacheConfig", "gpu_memory_utilization", "greater_than", gmu, {"gt": 0})
        if gmu > 1:
            raise field_error("CacheConfig", "gpu_memory_utilization", "less_than_equal", gmu, {"le": 1})
        if self.block_size is not None and self.block_size <= 0:
            raise field_error("CacheConfig", "block_size", "greater_than", self.block_size, {"gt": 0})
        cache_config = CacheConfig(block_size=self.block_size or _DEFAULT_BLOCK_SIZE,
                                   enable_prefix_caching=bool(self.enable_prefix_caching),
                                   gpu_memory_utilization=gmu)

        # --- ParallelConfig (config/parallel.py:38,140-147,290)
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            value = getattr(self, name)
            if value < 1:
                raise field_error("ParallelConfig", name, "greater_than_equal", value, {"ge": 1})
        backend = self.distributed_executor_backend
        if isinstance(backend, str) and backend not in _EXECUTOR_BACKENDS:
            raise field_error("ParallelConfig", "distributed_executor_backend", "literal_error", backend,
                              {"expected": "'ray', 'mp', 'uni' or 'external_launcher'"})
        if self.data_parallel_size > 1:
            raise NotImplementedError("vLLM double: data parallelism is not modelled")
        parallel_config = ParallelConfig(self.tensor_parallel_size, self.pipeline_parallel_size, backend)

        # --- batch defaults (arg_utils.py:2940-3039, 3151-3241)
        settings = load_settings(model)
        self._set_default_max_num_seqs_and_batched_tokens_args(usage_context, max_model_len,
                                                               parallel_config.world_size, settings)

        # --- SchedulerConfig checks (config/scheduler.py:317-337)
        sched_kwargs = {"max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
                        "enable_chunked_prefill": self.enable_chunked_prefill}
        if self.max_num_seqs < 1:
            raise field_error("SchedulerConfig", "max_num_seqs", "greater_than_equal", self.max_num_seqs, {"ge": 1})
        if self.max_num_batched_tokens < 1:
            raise field_error("SchedulerConfig", "max_num_batched_tokens", "greater_than_equal",
                              self.max_num_batched_tokens, {"ge": 1})
        if self.max_num_batched_tokens < max_model_len and not self.enable_chunked_prefill:
            raise config_error("SchedulerConfig", (
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is "
                f"smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to "
                "max_num_batched_tokens and makes vLLM reject longer "
                "sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len."), sched_kwargs)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise config_error("SchedulerConfig", (
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must "
                "be greater than or equal to max_num_seqs "
                f"({self.max_num_seqs})."), sched_kwargs)
        scheduler_config = SchedulerConfig(self.max_num_seqs, self.max_num_batched_tokens,
                                           bool(self.enable_chunked_prefill), max_model_len)

        # --- VllmConfig.__post_init__ -> ModelConfig.verify_with_parallel_config
        heads = int(hf.get("num_attention_heads", 1))
        if heads % self.tensor_parallel_size != 0:
            raise config_error("VllmConfig", (
                f"Total number of attention heads ({heads})"
                " must be divisible by tensor parallel size "
                f"({self.tensor_parallel_size})."), {"model_config": model})

        return VllmConfig(model_config=model_config, cache_config=cache_config, scheduler_config=scheduler_config,
                          parallel_config=parallel_config, double=settings, tokenizer_path=tokenizer,
                          usage_context=usage_context)

    @staticmethod
    def get_batch_defaults(world_size: int, device_memory_gib: float = 80.0, device_name: str = "h100"):
        """Defaults per usage context and GPU tier (``arg_utils.py:2940-3039``)."""
        memory = device_memory_gib * _GiB
        name = device_name.lower()
        if memory >= 160 * _GiB:
            batched = {UsageContext.LLM_CLASS: 16384, UsageContext.OPENAI_API_SERVER: 16384}
            seqs = {UsageContext.LLM_CLASS: 1024, UsageContext.OPENAI_API_SERVER: 1024}
        elif memory >= 70 * _GiB and "a100" not in name:
            batched = {UsageContext.LLM_CLASS: 16384, UsageContext.OPENAI_API_SERVER: 8192}
            seqs = {UsageContext.LLM_CLASS: 1024, UsageContext.OPENAI_API_SERVER: 1024}
        else:
            batched = {UsageContext.LLM_CLASS: 8192, UsageContext.OPENAI_API_SERVER: 2048}
            seqs = {UsageContext.LLM_CLASS: 256, UsageContext.OPENAI_API_SERVER: 256}
        return batched, seqs

    def _set_default_max_num_seqs_and_batched_tokens_args(self, usage_context, max_model_len: int,
                                                           world_size: int, settings) -> None:
        batched, seqs = self.get_batch_defaults(world_size, settings.device_memory_gib, settings.device_name)
        orig_batched, orig_seqs = self.max_num_batched_tokens, self.max_num_seqs
        if self.max_num_batched_tokens is None:
            self.max_num_batched_tokens = batched.get(usage_context, _DEFAULT_MAX_NUM_BATCHED_TOKENS)
        if self.max_num_seqs is None:
            # double.json may replace vLLM's default (an explicit engine argument always wins)
            self.max_num_seqs = settings.max_num_seqs or seqs.get(usage_context, _DEFAULT_MAX_NUM_SEQS)
        if self.performance_mode == "throughput":
            if orig_batched is None:
                self.max_num_batched_tokens *= 2
            if orig_seqs is None:
                self.max_num_seqs *= 2
        if orig_batched is None:
            if not self.enable_chunked_prefill:
                self.max_num_batched_tokens = max(max_model_len, self.max_num_batched_tokens)
            self.max_num_batched_tokens = min(self.max_num_seqs * max_model_len, self.max_num_batched_tokens)
        if orig_seqs is None:
            self.max_num_seqs = min(self.max_num_seqs, self.max_num_batched_tokens)


@dataclass
class AsyncEngineArgs(EngineArgs):
    """Arguments for asynchronous vLLM engine (``arg_utils.py:3244-3247``)."""

    enable_log_requests: bool = False
