"""Preflight of a vLLM job (``raylc check``): refuse, before any GPU time, what vLLM 0.33.0
would refuse at engine start-up, and estimate what the engine will hold.

Every rule below is transcribed from the vLLM 0.33.0 wheel's source (paths relative to its
``vllm/`` package) and works on the model's ``config.json`` as a plain dict: no torch or
transformers import, no Ray, and no vLLM import but to read the installed vLLM's ``EngineArgs``
names when ``engine_args`` is set.

1. **Config** (:func:`resolve_hf_config`): ``probe.hf_config`` (a config.json or a folder
   holding one), else ``probe.model`` as a local folder, else the Hugging Face cache, else (only
   when ``hub``) the Hub, one ``config.json`` download with a time limit, never when
   ``HF_HUB_OFFLINE`` is set.
2. **Overrides** (:func:`apply_hf_overrides`) in vLLM's order: non-dict values go to
   ``config.update`` before RoPE normalization (``config/model.py:616-630``,
   ``transformers_utils/config.py:989-998``); dict values afterwards
   (``config/model.py:691-692``): a sub-config (``text_config`` ...) is updated key by key,
   recursively (``_update_nested``, l.527-553); any other key is *replaced* whole
   (``_apply_dict_overrides``, l.555-570). ``rope_scaling`` is transformers 5's alias of
   ``rope_parameters`` (``PreTrainedConfig.rope_scaling`` property), so a dict
   ``rope_scaling`` override replaces the rope parameters, ``rope_theta`` included.
3. **Length limit** (:func:`derive_max_len`): the smallest of the text config's length keys,
   ``model_max_length`` winning when set (``transformers_utils/model_arch_config_convertor.py:374-407``);
   times the RoPE ``factor`` unless the rope type is one of su, longrope, llama3, yarn,
   deepseek_yarn, deepseek_llama_scaling, whose ``max_position_embeddings`` is already the
   scaled length (``config/model.py:2600-2634``; a YaRN override alone does not raise the
   limit); sliding windows cap it only with ``disable_sliding_window`` (l.2561-2568, not a raylc
   setting), the tokenizer's ``model_max_length`` only for pooling models (l.2148-2159).
   ``max_model_len`` above it is a ``ValueError`` unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is
   1/true (l.2655-2684, ``envs.py:1115-1118``): here a refusal, or a warning when that variable
   is set in the checking process.
4. **Tensor parallelism**: attention heads must divide by TP (``config/model.py:1557-1563``);
   the attention layers also assert ``kv_heads % tp == 0`` when ``kv_heads >= tp``, else
   ``tp % kv_heads == 0`` (``model_executor/models/llama.py:148-155``, ``qwen2.py:141-148``);
   KV heads per GPU are ``max(1, kv_heads // tp)`` (``config/model.py:1683``).
5. **Memory** (rough): KV bytes per token per GPU = 2 x layers x KV heads per GPU x head_dim x
   dtype bytes (the page size of ``v1/kv_cache_interface.py:586-601``), per sequence rounded up
   to 16-token blocks (l.643-648); weights from a parameter count of the config, divided by TP.
   vLLM refuses to start when one ``max_model_len`` sequence does not fit in the KV memory
   (``v1/core/kv_cache_planning.py:50-87``); here that memory is ``gpu_memory_utilization`` x
   GPU memory - weights, without activations and CUDA graphs (a few GiB), so the sequences per
   GPU are an upper bound and a refusal is certain.
6. **Prompts** (:func:`prompt_fit`): the job's planned requests counted with
   :mod:`raylc.dolce.plan`'s token counting, against ``max_model_len``.
7. **OpenAI-compatible endpoints** (:func:`check_openai`, ``raylc check`` only): one
   ``GET {base_url}/models`` within ``min(timeout_s, 10)`` s (``OpenAIBackend.check_endpoint``):
   the endpoint must answer and list ``model`` (unless ``check_model`` is false). The window is
   ``max_model_len``, else the one the server reports (vLLM's ``/v1/models`` entries carry
   ``max_model_len``); a ``max_model_len`` above the server's is refused. Prompts as in 6.

What is not modelled: model-specific convertors and config classes (their defaults for keys
missing from config.json, attribute aliases other than ``rope_scaling``), quantized weights,
sliding-window layers' smaller KV cache (counted as full attention), MLA.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from raylc.backends.config import BLOCK_SIZE, GIB, VLLM_VERSION, VLLMProbe
from raylc.io.deadline import call_within
from raylc.spec import Job, JobSpecError

HUB_TIMEOUT_S = 10.0

#: Length keys of ``derive_max_model_len_and_key`` (``model_arch_config_convertor.py:376-392``), in its order.
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
#: Rope types whose factor vLLM does not apply to the derived length (``config/model.py:2613-2620``).
SCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
#: KV-head keys, first present wins (``CONFIG_FIELD_ALIASES``, ``transformers_utils/config.py:56-63``).
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
#: Sub-config names ``get_text_config()`` looks for (transformers ``PreTrainedConfig.get_text_config``).
TEXT_CONFIG_KEYS = ("text_encoder", "decoder", "generator", "text_config")
#: transformers' ``ALLOWED_LAYER_TYPES``: rope parameters keyed by these are per layer type
#: (``is_rope_parameters_nested``, ``transformers_utils/config.py:222-230``).
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "compressed_sparse_attention",
               "heavily_compressed_attention", "minimax_m3_sparse", "conv", "sparse", "dense", "hybrid",
               "hybrid_sliding", "moe", "deepseek_sparse_attention", "linear_attention", "main", "compress")
#: ``dtype`` names vLLM accepts (``config/model.py:2384-2390``) and their bytes.
DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}
#: Models vLLM refuses in float16 (``config/model.py:2398-2403``).
NO_FLOAT16 = ("gemma2", "gemma3", "gemma3_text", "glm4")
#: Memory per GPU (GiB, nominal) of Ray accelerator types (``ray/util/accelerators/accelerators.py``).
#: Where one name covers two sizes (A100, V100) the smaller is listed.
GPU_MEMORY_GIB = {
    "H100": 80, "H200": 141, "H20": 96, "B200": 180, "A100-80G": 80, "A100-40G": 40, "A100": 40,
    "L40S": 48, "L4": 24, "A10G": 24, "RTX-PRO-6000": 96, "V100": 16, "T4": 16, "P100": 16, "P4": 8,
}


class PreflightError(JobSpecError):
    """A vLLM job that vLLM would refuse at start-up; the message is one line naming the field."""


# ---- config -------------------------------------------------------------------------------------

def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PreflightError(f"{path}: not a readable config.json ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(data, dict):
        raise PreflightError(f"{path}: config.json must hold a JSON object")
    return data


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _hub_config(repo_id: str, timeout_s: float) -> tuple[Optional[dict[str, Any]], str]:
    """config.json of ``repo_id`` from the Hub (within ``timeout_s``), downloaded to a temporary folder."""
    if _truthy_env("HF_HUB_OFFLINE"):
        return None, "hub: skipped (HF_HUB_OFFLINE is set)"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None, "hub: huggingface_hub is not installed"
    folder = tempfile.mkdtemp(prefix="raylc-config-")
    hub_logger = logging.getLogger("huggingface_hub")  # its retry messages would break the one-line report
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    error = "no config.json"
    try:
        path = call_within(lambda: hf_hub_download(repo_id, "config.json", local_dir=folder,
                                                   etag_timeout=timeout_s), timeout_s)
    except TimeoutError:  # still retrying: leave it quiet; it dies with the process
        atexit.register(shutil.rmtree, folder, True)
        return None, f"hub: no answer within {timeout_s:g} s"
    except Exception as exc:  # offline, gated, missing repo, bad id: one line for the report
        text = str(exc).strip().splitlines()
        path = None
        error = f"{type(exc).__name__}: {text[0] if text else ''}"[:200]
    try:
        return (_read_config(Path(path)), "the Hugging Face Hub") if path else (None, f"hub: {error}")
    finally:
        hub_logger.setLevel(level)
        shutil.rmtree(folder, ignore_errors=True)


def resolve_hf_config(probe: VLLMProbe, *, source: Optional[Union[str, Path]] = None, hub: bool = True,
                      timeout_s: float = HUB_TIMEOUT_S, section: str = "probe") -> tuple[Optional[dict[str, Any]], str]:
    """``(config, where)``: the model's config.json as a dict and where it came from, or
    ``(None, what was tried)``. Order: ``hf_config`` (relative paths against the job
    file's folder, then the working directory, as data paths: :meth:`SuiteConfig.data_path`),
    ``model`` as a local folder, the Hugging Face cache, the Hub (only with ``hub``;
    ``HF_HUB_OFFLINE`` is honoured). A ``hf_config`` that does not exist is a
    :class:`PreflightError`."""
    if probe.hf_config:
        given = Path(probe.hf_config).expanduser()
        bases = ([Path(source).resolve().parent] if source is not None else []) + [Path.cwd()]
        for candidate in ([given] if given.is_absolute() else [b / given for b in bases]):
            file = candidate / "config.json" if candidate.is_dir() else candidate
            if file.is_file():
                shown = file if given.is_absolute() else (given / "config.json" if candidate.is_dir() else given)
                return _read_config(file), str(shown)
        raise PreflightError(f"{section}.hf_config {probe.hf_config!r}: no such config.json (nor a folder holding one)")
    tried = [f"{section}.hf_config is unset"]
    model = Path(probe.model).expanduser()
    if (model / "config.json").is_file():
        return _read_config(model / "config.json"), str(model / "config.json")
    tried.append(f"no local folder {probe.model!r} with a config.json")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(probe.model, "config.json")
    except Exception:  # not a repo id (e.g. a path), no huggingface_hub
        cached = None
    if isinstance(cached, str) and Path(cached).is_file():
        return _read_config(Path(cached)), f"the Hugging Face cache ({cached})"
    tried.append("not in the Hugging Face cache")
    if hub:
        config, where = _hub_config(probe.model, timeout_s)
        if config is not None:
            return config, where
        tried.append(where)
    else:
        tried.append("the Hub not asked (raylc check asks it)")
    return None, "; ".join(tried)


def with_class_defaults(config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``config`` with the keys it omits taken from its transformers config class's defaults
    (vLLM reads attributes of that class, not the file), and whether they could be: without
    transformers, or for a ``model_type`` it does not know, the file alone."""
    try:
        from transformers import AutoConfig
    except ImportError:
        return config, False
    try:
        defaults = AutoConfig.for_model(str(config.get("model_type"))).to_dict()
    except Exception:  # an unknown model_type (custom code)
        return config, False
    return {**{k: v for k, v in defaults.items() if not k.startswith("_")}, **config}, True


# ---- overrides ----------------------------------------------------------------------------------

def _alias(key: str) -> str:
    """transformers 5 ``PreTrainedConfig.rope_scaling`` is a property over ``rope_parameters``."""
    return "rope_parameters" if key == "rope_scaling" else key


def _is_sub_config(key: str, value: Any) -> bool:
    """Whether a config.json entry becomes a nested ``PreTrainedConfig`` (updated key by key) rather
    than a dict-valued field (replaced whole): the text configs, ``vision_config``/``audio_config``
    and any other ``*_config`` naming a ``model_type`` (``quantization_config`` does not)."""
    if not isinstance(value, dict):
        return False
    return key in TEXT_CONFIG_KEYS or key in ("vision_config", "audio_config") or (
        key.endswith("_config") and "model_type" in value)


def _nested_rope(rope: Any) -> bool:
    return isinstance(rope, dict) and bool(rope) and set(rope) <= set(LAYER_TYPES)


def _normalize_rope(config: dict[str, Any]) -> None:
    """RoPE parameters as transformers 5 loads them (``convert_rope_params_to_dict``: ``rope_scaling``
    becomes ``rope_parameters`` with ``rope_theta`` in it) and vLLM patches them
    (``patch_rope_parameters``, ``transformers_utils/config.py:609-687``: legacy ``type`` becomes
    ``rope_type``, su -> longrope, mrope -> default)."""
    rope = config.pop("rope_scaling", None) or config.get("rope_parameters")
    theta = config.get("rope_theta", config.get("rotary_emb_base"))
    if not rope:
        if theta is None:
            config.pop("rope_parameters", None)
            return
        rope = {}
    rope = copy.deepcopy(rope)
    for params in (rope.values() if _nested_rope(rope) else [rope]):
        if not isinstance(params, dict):
            continue
        if theta is not None and not _nested_rope(rope):
            params.setdefault("rope_theta", theta)
        params.setdefault("rope_type", params.get("type", "default"))
        params["rope_type"] = {"su": "longrope", "mrope": "default"}.get(params["rope_type"], params["rope_type"])
    config["rope_parameters"] = rope


def _update_nested(target: dict[str, Any], updates: dict[str, Any], is_config: bool = True) -> None:
    """``ModelConfig._update_nested`` (``config/model.py:527-553``) on dicts: a dict value updates an
    existing dict (or config) key by key, anything else is set; attribute aliases apply on configs."""
    for key, value in updates.items():
        key = _alias(key) if is_config else key
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _update_nested(target[key], value, _is_sub_config(key, target[key]))
        else:
            target[key] = copy.deepcopy(value)


def apply_hf_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A new config: ``config`` loaded as vLLM 0.33 loads it, with ``overrides`` (``probe.hf_overrides``)
    applied in vLLM's order (module docstring, item 2). ``config`` is not modified."""
    out = copy.deepcopy(config)
    for key in TEXT_CONFIG_KEYS:  # transformers builds sub-configs, normalizing their RoPE too
        if isinstance(out.get(key), dict):
            _normalize_rope(out[key])
    flat = {_alias(k): copy.deepcopy(v) for k, v in overrides.items() if not isinstance(v, dict)}
    if "rope_parameters" in flat:  # config.update() runs before the RoPE patch
        out.pop("rope_scaling", None)
    out.update(flat)
    _normalize_rope(out)
    for key, value in overrides.items():
        if not isinstance(value, dict):
            continue
        key = _alias(key)
        if _is_sub_config(key, out.get(key)):
            _update_nested(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The LLM part of a config (``get_hf_text_config``, ``transformers_utils/config.py:1258``):
    the first of ``text_encoder, decoder, generator, text_config`` present, else the config."""
    for key in TEXT_CONFIG_KEYS:
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def rope_parameters(config: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per layer type, or the single one (``iter_rope_parameters``,
    ``transformers_utils/config.py:690-699``)."""
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict) or not rope:
        return []
    if _nested_rope(rope):
        return [p for p in rope.values() if isinstance(p, dict) and p]
    return [rope]


# ---- length limit -------------------------------------------------------------------------------

def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def derive_max_len(text: dict[str, Any], section: str = "probe") -> tuple[float, Optional[str], float]:
    """``(limit, key, rope_factor)``: the longest ``max_model_len`` vLLM 0.33 accepts without
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` (inf when the config has no length key: vLLM then takes
    ``max_model_len`` as given, ``config/model.py:2579-2582``). ``text`` is the text config after
    the overrides. Rule: the smallest non-null value of :data:`LENGTH_KEYS`, but a truthy
    ``model_max_length`` replaces it (``model_arch_config_convertor.py:393-406``); then, unless
    the model type contains ``gemma3``, times the last ``factor`` of the rope parameters whose
    ``rope_type`` is not in :data:`SCALED_ROPE_TYPES` (null factor: 1; ``config/model.py:2600-2634``).
    A rope parameter dict without ``rope_type`` (possible only through a dict override, applied
    after vLLM's normalization) is the ``KeyError`` of l.2608: :class:`PreflightError`."""
    limit, key = math.inf, None
    for name in LENGTH_KEYS:
        value = text.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < limit:
                key = name
            limit = min(limit, value)
    if text.get("model_max_length"):
        key, limit = "model_max_length", text["model_max_length"]
    if limit == math.inf:
        return limit, None, 1.0
    factor: Any = 1.0
    params = rope_parameters(text)
    if params and "gemma3" not in str(text.get("model_type", "")):
        for rp in params:
            if "rope_type" not in rp:
                raise PreflightError(
                    f"{section}.hf_overrides: rope parameters {rp} have no 'rope_type': vLLM {VLLM_VERSION} "
                    "applies dict overrides after normalizing RoPE and reads rp['rope_type'] "
                    "(vllm/config/model.py:2608); "
                    "write rope_type: <type> (not type: <type>)")
            if rp["rope_type"] not in SCALED_ROPE_TYPES:
                factor = rp.get("factor", factor)
        factor = 1.0 if factor is None else factor
    return limit * factor, key, float(factor)


def allow_long_max_model_len() -> bool:
    """vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` switch (``envs.py:1115-1118``)."""
    return os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


# ---- the report ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PromptFit:
    """The job's requests against ``max_model_len``: ``cut`` of ``requests`` have a prompt plus
    ``max_tokens`` above it (truncation shortens their context). ``estimated``: counted with the
    offline default tokenizer, or from a subset of the samples (``note`` says which)."""

    tokenizer: str
    requests: int
    longest_prompt: int
    longest_max_tokens: int
    cut: int
    estimated: bool = False
    note: str = ""


@dataclass
class Report:
    """What :func:`preflight` found for one vLLM section (``probe`` or ``judge``)."""

    section: str
    model: str
    config_source: str
    max_model_len: int
    derived_max_len: Optional[float] = None
    derived_key: Optional[str] = None
    rope_factor: float = 1.0
    rope_types: tuple[str, ...] = ()
    tensor_parallel_size: int = 1
    attention_heads: int = 0
    kv_heads: int = 0
    kv_heads_per_gpu: int = 0
    head_dim: int = 0
    layers: int = 0
    dtype: str = "bfloat16"
    dtype_bytes: int = 2
    kv_bytes_per_token: int = 0
    kv_bytes_per_seq: int = 0
    parameters: int = 0
    weight_bytes_per_gpu: int = 0
    gpu_memory_gib: Optional[float] = None
    gpu_name: Optional[str] = None
    gpu_memory_utilization: float = 0.9
    sequences_per_gpu: Optional[int] = None
    prompts: Optional[PromptFit] = None
    warnings: list[str] = field(default_factory=list)
    skipped: Optional[str] = None
    device: str = "gpu"
    engine_args: dict[str, Any] = field(default_factory=dict)
    engine_args_source: str = ""

    def lines(self) -> list[str]:
        """The report ``raylc check`` prints."""
        s = self.section
        if self.skipped:
            return [f"{s}.model: {self.model}", f"not checked: {self.skipped}"]
        limit = "none in config.json (vLLM takes max_model_len as given)" if self.derived_key is None else (
            f"{_num(self.derived_max_len)} ({self.derived_key}"
            + (f" x rope factor {self.rope_factor:g}" if self.rope_factor != 1 else "")
            + "".join(f"; {t} factor not applied" for t in dict.fromkeys(self.rope_types) if t in SCALED_ROPE_TYPES)
            + ")")
        out = [
            f"{s}.model: {self.model} (config: {self.config_source})",
            f"derived max length (vLLM {VLLM_VERSION}): {limit}",
            f"{s}.max_model_len: {self.max_model_len}",
            f"{s}.tensor_parallel_size: {self.tensor_parallel_size} ({self.attention_heads} "
            f"attention heads, {self.kv_heads} KV heads, {self.kv_heads_per_gpu} per GPU, "
            f"head_dim {self.head_dim}, {self.layers} layers)",
            f"KV cache per GPU ({self.dtype}): {self.kv_bytes_per_token:,} bytes/token, "
            f"{self.kv_bytes_per_seq / GIB:.2f} GiB per {self.max_model_len}-token sequence",
            f"weights per GPU: ~{self.weight_bytes_per_gpu / GIB:.1f} GiB "
            f"({self.parameters / 1e9:.2f}B parameters, unquantized)",
        ]
        if self.engine_args:
            out.append(f"{s}.engine_args: {', '.join(f'{k}={v!r}' for k, v in self.engine_args.items())} "
                       f"(known to {self.engine_args_source} EngineArgs)")
        if self.device == "cpu":
            out.append(f"{s}.device: cpu (vLLM's CPU build): KV cache for <= {self.sequences_per_gpu} sequences of "
                       f"{self.max_model_len} tokens in {s}.cpu_kv_cache_gib of RAM")
        elif self.gpu_memory_gib is None or self.sequences_per_gpu is None:
            out.append(f"sequences per GPU: unknown (set {s}.accelerator_type or pass --gpu-memory-gib)")
        else:
            room = self.gpu_memory_utilization * self.gpu_memory_gib - self.weight_bytes_per_gpu / GIB
            out.append(f"sequences per GPU: <= {self.sequences_per_gpu} of {self.max_model_len} tokens "
                       f"({self.gpu_name or 'GPU'} {self.gpu_memory_gib:g} GiB x gpu_memory_utilization "
                       f"{self.gpu_memory_utilization:g} - weights = {room:.1f} GiB for the KV cache; "
                       "activations not counted)")
        p = self.prompts
        if p is not None:
            fit = ("fits" if not p.cut
                   else f"{p.cut:,} of {p.requests:,} requests above it: truncation cuts their context")
            out.append(f"longest prompt: {p.longest_prompt:,} tokens + {p.longest_max_tokens} max_tokens "
                       f"{'<=' if not p.cut else 'vs'} max_model_len {self.max_model_len}: {fit} "
                       f"({p.requests:,} requests, tokenizer {p.tokenizer}{', estimate' if p.estimated else ''}; "
                       "chat template tokens not counted)")
            if p.note:
                out.append(f"prompts: {p.note}")
        return out


# ---- checks -------------------------------------------------------------------------------------

def _heads(text: dict[str, Any]) -> tuple[int, int, int]:
    """(attention heads, KV heads, head_dim) as the convertor reads them (l.82-157)."""
    heads = int(text.get("num_attention_heads") or 0)
    kv = next((text[k] for k in KV_HEAD_KEYS if k in text), None)
    kv = int(kv) if kv else heads
    head_dim = text.get("head_dim")
    if not (head_dim and head_dim > 0):
        head_dim = text.get("hidden_size_per_head") or ((text.get("hidden_size") or 0) // heads if heads else 0)
    return heads, kv, int(head_dim)


def valid_tensor_parallel_sizes(heads: int, kv_heads: int, upto: Optional[int] = None) -> list[int]:
    """TP sizes vLLM 0.33 accepts for these head counts (module docstring, item 4)."""
    return [tp for tp in range(1, (upto or heads) + 1)
            if heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)]


def check_tensor_parallel(tp: int, heads: int, kv_heads: int, section: str = "probe") -> None:
    """:class:`PreflightError` unless ``tp`` splits the attention and KV heads as vLLM requires."""
    if heads and heads % tp:
        reason = f"does not divide the model's {heads} attention heads (vllm/config/model.py:1559)"
    elif kv_heads and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        reason = (f"does not split the model's {kv_heads} KV heads: vLLM needs kv_heads % tp == 0, "
                  "or tp % kv_heads == 0 when tp > kv_heads (vllm/model_executor/models/llama.py:148-155)")
    else:
        return
    ok = ", ".join(map(str, valid_tensor_parallel_sizes(heads, kv_heads or heads)))
    raise PreflightError(f"{section}.tensor_parallel_size {tp} {reason}; use one of {ok}")


def parameter_count(text: dict[str, Any]) -> int:
    """Rough parameter count: per layer q/k/v/o projections and a gated MLP (3 matrices; MoE:
    ``num_experts`` x ``moe_intermediate_size``), plus input embeddings and, unless tied, the LM
    head. Norms and biases are left out (Qwen2.5-7B: 7.62e9 against 7.61e9)."""
    h = int(text.get("hidden_size") or 0)
    layers = int(text.get("num_hidden_layers") or 0)
    vocab = int(text.get("vocab_size") or 0)
    heads, kv, hd = _heads(text)
    attention = h * heads * hd * 2 + h * kv * hd * 2
    experts = next((text[k] for k in ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
                    if text.get(k)), 0)
    if experts:
        mlp = 3 * h * int(text.get("moe_intermediate_size") or text.get("intermediate_size") or 0) * int(experts)
        mlp += 3 * h * int(text.get("shared_expert_intermediate_size") or 0)
    else:
        mlp = 3 * h * int(text.get("intermediate_size") or 0)
    embeddings = vocab * h * (1 if text.get("tie_word_embeddings") else 2)
    return layers * (attention + mlp) + embeddings


def _dtype(probe: VLLMProbe, config: dict[str, Any], text: dict[str, Any], section: str) -> tuple[str, int]:
    """(dtype name, bytes) as ``_get_and_verify_dtype`` resolves it (``config/model.py:2467-2526``): ``auto``
    takes config.json's ``dtype``/``torch_dtype`` and runs float32 models in bfloat16 (on GPUs with
    bfloat16; vLLM reads the safetensors' dtype when the config has none, assumed 16-bit here)."""
    name = probe.dtype.lower()
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if name == "auto":
        found = config.get("dtype") or config.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
        name = "bfloat16" if found in (None, "float32", "float") else str(found)
        return name, DTYPE_BYTES.get(name, 2)
    if name not in DTYPE_BYTES:
        raise PreflightError(f"{section}.dtype {probe.dtype!r}: vLLM {VLLM_VERSION} accepts auto, "
                             f"{', '.join(DTYPE_BYTES)} (vllm/config/model.py:2384-2390)")
    if model_type in NO_FLOAT16 and DTYPE_BYTES[name] == 2 and name in ("half", "float16"):
        raise PreflightError(f"{section}.dtype {probe.dtype!r}: vLLM refuses float16 for model type {model_type!r} "
                             "(vllm/config/model.py:2398-2420); use bfloat16")
    return name, DTYPE_BYTES[name]


def gpu_memory(probe: VLLMProbe,
               gpu_memory_gib: Optional[float]) -> tuple[Optional[float], Optional[str], Optional[str]]:
    """(GiB, name, warning): ``--gpu-memory-gib``, else :data:`GPU_MEMORY_GIB` of ``accelerator_type``."""
    if gpu_memory_gib is not None:
        return float(gpu_memory_gib), probe.accelerator_type, None
    if not probe.accelerator_type:
        return None, None, None
    gib = GPU_MEMORY_GIB.get(probe.accelerator_type)
    if gib is None:
        return None, probe.accelerator_type, (f"accelerator_type {probe.accelerator_type!r} has no memory entry "
                                              f"(known: {', '.join(GPU_MEMORY_GIB)}): pass --gpu-memory-gib")
    return float(gib), probe.accelerator_type, None


def check_probe(probe: VLLMProbe, *, source: Optional[Union[str, Path]] = None, section: str = "probe",
                gpu_memory_gib: Optional[float] = None, hub: bool = True, require_config: bool = True,
                config: Optional[dict[str, Any]] = None) -> Report:
    """All config checks of one vLLM probe (module docstring, items 1-5). Raises
    :class:`PreflightError` on the first refusal; warnings go to ``Report.warnings``. Without a
    config (and ``require_config`` false) the report is ``skipped``."""
    if config is None:
        config, where = resolve_hf_config(probe, source=source, hub=hub, section=section)
    else:
        where = "given"
    if config is None:
        message = (f"cannot find the config.json of {section}.model {probe.model!r} ({where}); "
                   f"set {section}.hf_config: path/to/config.json")
        if require_config:
            raise PreflightError(message)
        return Report(section=section, model=probe.model, config_source="", max_model_len=probe.max_model_len,
                      skipped=message, warnings=[f"{section} not checked before start-up: {message}"])
    from raylc.backends.vllm_engine import check_engine_args, engine_arg_names

    try:
        check_engine_args(probe, section)
    except ValueError as exc:
        raise PreflightError(str(exc)) from None
    config, defaults = with_class_defaults(config)
    where += "; keys it omits from its transformers config class" if defaults else ""
    loaded = apply_hf_overrides(config, probe.hf_overrides)
    text = text_config(loaded)
    report = Report(section=section, model=probe.model, config_source=where, max_model_len=probe.max_model_len,
                    tensor_parallel_size=probe.tensor_parallel_size,
                    gpu_memory_utilization=probe.gpu_memory_utilization,
                    device=probe.device, engine_args=dict(probe.engine_args),
                    engine_args_source=engine_arg_names()[1] if probe.engine_args else "")
    report.rope_types = tuple(str(rp.get("rope_type")) for rp in rope_parameters(text))
    original = rope_parameters(text_config(apply_hf_overrides(config, {})))
    replaced = [k for k, v in probe.hf_overrides.items() if isinstance(v, dict) and _alias(k) == "rope_parameters"]
    if replaced and original and all("rope_theta" not in rp for rp in rope_parameters(text)) \
            and any("rope_theta" in rp for rp in original):
        report.warnings.append(
            f"{section}.hf_overrides.{replaced[0]} replaces the config's rope parameters whole "
            f"(vllm/config/model.py:570), dropping rope_theta={original[0].get('rope_theta')}: "
            "vLLM then uses the model code's default (10000 unless it sets one, "
            "vllm/model_executor/layers/rotary_embedding/__init__.py:64); "
            "add rope_theta to the override to keep it")
    for rp in rope_parameters(text):
        missing = [k for k in ("factor", "original_max_position_embeddings") if k not in rp]
        if rp.get("rope_type") in ("yarn", "deepseek_yarn") and missing:
            raise PreflightError(
                f"{section}.hf_overrides: {rp.get('rope_type')} rope parameters lack {' and '.join(missing)}, "
                f"which vLLM {VLLM_VERSION} reads when it builds the model "
                "(vllm/model_executor/layers/rotary_embedding/__init__.py:243-245)")

    # length limit
    limit, key, factor = derive_max_len(text, section)
    report.derived_max_len, report.derived_key, report.rope_factor = (None if limit == math.inf else limit), key, factor
    if limit != math.inf and probe.max_model_len > limit:
        model_max_length = text.get("model_max_length")
        if model_max_length is None or probe.max_model_len > model_max_length:
            yarn = [t for t in report.rope_types if t in SCALED_ROPE_TYPES]
            why = f"{key}={_num(limit)}" + (f"; the {yarn[0]} factor is not applied" if yarn else "")
            fix = f"add max_position_embeddings: {probe.max_model_len} to {section}.hf_overrides"
            if allow_long_max_model_len():
                report.warnings.append(
                    f"{section}.max_model_len {probe.max_model_len} is above the {_num(limit)} tokens "
                    f"vLLM {VLLM_VERSION} derives for {probe.model} ({why}); "
                    "allowed because VLLM_ALLOW_LONG_MAX_MODEL_LEN is set "
                    "(positions beyond it may give NaN with RoPE); better: " + fix)
            else:
                raise PreflightError(
                    f"{section}.max_model_len {probe.max_model_len} is above the {_num(limit)} tokens "
                    f"vLLM {VLLM_VERSION} derives for {probe.model} ({why}); {fix} (or lower {section}.max_model_len, "
                    "or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    elif limit == math.inf:
        report.warnings.append(f"config.json of {probe.model} has none of {', '.join(LENGTH_KEYS)}: vLLM takes "
                               f"{section}.max_model_len as given (vllm/config/model.py:2579-2582)")

    # tensor parallelism
    heads, kv, head_dim = _heads(text)
    tp = probe.tensor_parallel_size
    check_tensor_parallel(tp, heads, kv, section)
    report.attention_heads, report.kv_heads, report.head_dim = heads, kv, head_dim
    report.kv_heads_per_gpu = max(1, kv // tp)
    report.layers = int(text.get("num_hidden_layers") or 0)
    if text.get("use_sliding_window") is False and text.get("sliding_window"):
        pass  # Qwen2-style: the window is off (transformers sets sliding_window None)
    elif text.get("sliding_window"):
        report.warnings.append(f"sliding_window {text['sliding_window']}: its layers are counted as full attention "
                               "(the KV estimate is an upper bound)")

    # memory
    report.dtype, report.dtype_bytes = _dtype(probe, loaded, text, section)
    report.kv_bytes_per_token = 2 * report.layers * report.kv_heads_per_gpu * head_dim * report.dtype_bytes
    report.kv_bytes_per_seq = -(-probe.max_model_len // BLOCK_SIZE) * BLOCK_SIZE * report.kv_bytes_per_token
    report.parameters = parameter_count(text)
    report.weight_bytes_per_gpu = report.parameters * report.dtype_bytes // tp
    gib, name, warning = gpu_memory(probe, gpu_memory_gib)
    if warning:
        report.warnings.append(warning)
    report.gpu_memory_gib, report.gpu_name = gib, name
    if probe.device == "cpu":  # the KV cache is cpu_kv_cache_gib of RAM (kv_cache_memory_bytes), weights apart
        room = probe.cpu_kv_cache_gib * GIB
        short = (f"of KV cache but {section}.cpu_kv_cache_gib is {probe.cpu_kv_cache_gib:g}, so vLLM cannot start; "
                 f"raise {section}.cpu_kv_cache_gib or lower {section}.max_model_len to <= {{fits}}")
    elif gib is not None:
        room = probe.gpu_memory_utilization * gib * GIB - report.weight_bytes_per_gpu
        where_gpu = f"{name or 'a'} {gib:g} GiB GPU"
        if room <= 0:
            raise PreflightError(
                f"{section}.tensor_parallel_size {tp}: ~{report.weight_bytes_per_gpu / GIB:.1f} GiB of weights per GPU "
                f"do not fit in gpu_memory_utilization {probe.gpu_memory_utilization:g} x {where_gpu}; "
                f"raise {section}.tensor_parallel_size or use a larger GPU")
        short = (f"of KV cache per GPU but at most {room / GIB:.2f} GiB is left on a {where_gpu} "
                 f"(gpu_memory_utilization {probe.gpu_memory_utilization:g}, "
                 f"weights ~{report.weight_bytes_per_gpu / GIB:.1f} GiB), "
                 "so vLLM cannot start (vllm/v1/core/kv_cache_planning.py:78); "
                 f"lower {section}.max_model_len to <= {{fits}}, "
                 f"raise {section}.tensor_parallel_size or use a larger GPU")
    else:
        return report
    report.sequences_per_gpu = int(room // report.kv_bytes_per_seq) if report.kv_bytes_per_seq else None
    if report.sequences_per_gpu == 0:
        fits = int(room // report.kv_bytes_per_token) // BLOCK_SIZE * BLOCK_SIZE
        raise PreflightError(f"{section}.max_model_len {probe.max_model_len}: one sequence needs "
                             f"{report.kv_bytes_per_seq / GIB:.2f} GiB " + short.format(fits=fits))
    return report


# ---- prompts ------------------------------------------------------------------------------------

SAMPLE_CAP = 8  # samples per task and length a length-suite check builds (an estimate above it)


def _tokenizer(spec: Optional[str]):
    """(tokenizer, its spec, why it is the default instead) for counting."""
    from raylc.text.tokenize import get_tokenizer

    try:
        return get_tokenizer(spec), spec or "default", ""
    except Exception as exc:  # a missing package, file or Hub access
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return get_tokenizer(None), "default", f"tokenizer {spec} is not available here ({first})"


def prompt_fit(job: Job, evaluation: Any, max_len: Optional[int] = None) -> PromptFit:
    """Count the job's planned requests (``evaluation.request_lengths``: the plan's counting,
    uncapped) against ``max_len`` (default: the probe's ``max_model_len``). A tokenizer that
    cannot load here is replaced by the offline default (an estimate, said in ``note``); a length
    suite is built with at most :data:`SAMPLE_CAP` samples per task and length and the counts scaled up."""
    import numpy as np

    max_len = job.probe.max_model_len if max_len is None else max_len
    notes: list[str] = []
    tok, spec, why = _tokenizer(evaluation.tokenizer_spec(job))
    if why:
        notes.append(why + ": counted with the offline default tokenizer")
        if job.suite.tokenizer_spec() is not None:  # the suite builds contexts with it: build with the default
            job = job.model_copy(update={"suite": job.suite.model_copy(update={"tokenizer": None})})
    prompt, max_tokens, scale = evaluation.request_lengths(job, tok, SAMPLE_CAP)
    if scale > 1:
        notes.append(f"counted on {SAMPLE_CAP} of {job.suite.samples_per_point()} samples per task and length, "
                     "scaled up")
    cut = int((prompt + max_tokens > max_len).sum())
    longest = int(np.argmax(prompt)) if len(prompt) else 0
    return PromptFit(tokenizer=spec, requests=round(len(prompt) * scale),
                     longest_prompt=int(prompt[longest]) if len(prompt) else 0,
                     longest_max_tokens=int(max_tokens[longest]) if len(prompt) else job.max_tokens(),
                     cut=round(cut * scale), estimated=bool(notes), note="; ".join(notes))


# ---- OpenAI-compatible endpoints ----------------------------------------------------------------

@dataclass
class EndpointReport:
    """What :func:`check_openai` found for one OpenAI-compatible section (``probe`` or ``judge``):
    the names ``/models`` lists (None: no such route) and the windows, the probe's and the server's."""

    section: str
    base_url: str
    model: str
    models: Optional[tuple[str, ...]]
    check_model: bool
    max_model_len: Optional[int]
    served_max_len: Optional[int]
    truncation: str = "middle"
    prompts: Optional[PromptFit] = None
    warnings: list[str] = field(default_factory=list)

    @property
    def window(self) -> Optional[int]:
        return self.max_model_len or self.served_max_len

    def lines(self) -> list[str]:
        """The report ``raylc check`` prints."""
        s, m, served = self.section, self.max_model_len, self.served_max_len
        if self.models is None:
            listed = "not checked: the endpoint has no /models route"
        elif not self.check_model:
            listed = f"not checked: {s}.check_model is false"
        elif not self.models:
            listed = "not checked: /models lists no model"
        else:
            listed = "listed by /models" if self.model in self.models else "routed by a wildcard of /models"
        out = [f"{s}.base_url: {self.base_url} (answered GET /models)", f"{s}.model: {self.model} ({listed})"]
        if m is not None:
            out.append(f"{s}.max_model_len: {m} (server's window: "
                       f"{served if served is not None else 'not reported'}; prompts are fitted client-side)")
        elif served is not None:
            out.append(f"{s}.max_model_len: unset; server's window: {served} (max_model_len in /models; prompts are "
                       "sent whole)")
        else:
            out.append(f"{s}.max_model_len: unset; the server reports no window"
                       + (" (prompt lengths not checked)" if s == "probe" else ""))
        p = self.prompts
        if p is not None:
            limit = f"{s}.max_model_len {m}" if m is not None else f"the server's window {served}"
            fate = ("the server will refuse them" if m is None else f"refused ({s}.truncation: refuse)"
                    if self.truncation == "refuse" else "truncation cuts their context")
            fit = "fits" if not p.cut else f"{p.cut:,} of {p.requests:,} requests above it: {fate}"
            out.append(f"longest prompt: {p.longest_prompt:,} tokens + {p.longest_max_tokens} max_tokens "
                       f"{'<=' if not p.cut else 'vs'} {limit}: {fit} "
                       f"({p.requests:,} requests, tokenizer {p.tokenizer}{', estimate' if p.estimated else ''}; "
                       "chat template tokens not counted)")
            if p.note:
                out.append(f"prompts: {p.note}")
        return out


def check_openai(job: Job, section: str = "probe", *, source: Optional[Union[str, Path]] = None,
                 prompts: Any = None) -> EndpointReport:
    """Check ``job``'s OpenAI-compatible ``section`` against its server (module docstring, item 7).
    Raises :class:`PreflightError` (one line: the job file, the field, the reason) when the
    endpoint does not answer, does not serve the model or has a smaller window."""
    from raylc.backends.base import BackendUnavailable
    from raylc.backends.openai_http import EndpointRefused, OpenAIBackend

    probe = getattr(job, section)
    where = f"{source}: " if source is not None else ""
    if probe.api_key_env and not os.environ.get(probe.api_key_env):
        raise PreflightError(f"{where}{section}.api_key_env: environment variable {probe.api_key_env} is not set")
    try:  # listing /models needs no tokenizer (an hf: one would load here)
        with OpenAIBackend(probe.model_copy(update={"tokenizer": None}), seed=job.seed) as backend:
            info = backend.check_endpoint(section)
    except EndpointRefused as exc:
        raise PreflightError(f"{where}{section}.{exc.key}: {exc}") from None
    except BackendUnavailable as exc:
        raise PreflightError(f"{where}{section}: {exc}") from None
    served = info.max_model_len
    if probe.max_model_len is not None and served is not None and probe.max_model_len > served:
        raise PreflightError(
            f"{where}{section}.max_model_len {probe.max_model_len} is above the {served}-token window the server at "
            f"{probe.base_url} reports for {probe.model} (max_model_len in /models), so it would refuse the longest "
            f"prompts; lower {section}.max_model_len to <= {served}")
    report = EndpointReport(section=section, base_url=probe.base_url, model=probe.model, models=info.models,
                            check_model=probe.check_model, max_model_len=probe.max_model_len, served_max_len=served,
                            truncation=probe.truncation)
    if prompts and section == "probe" and report.window is not None:
        try:
            report.prompts = prompt_fit(job, prompts, report.window)
        except Exception as exc:  # data not reachable here, a suite error: say so, do not fail
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            report.warnings.append(f"prompt lengths not checked: {first}")
        else:
            cut = report.prompts.cut
            if cut and probe.max_model_len is None:
                report.warnings.append(
                    f"{cut:,} requests do not fit the server's window of {served} tokens and "
                    f"{section}.max_model_len is unset, so they are sent whole and refused (error rows); "
                    f"set {section}.max_model_len: {served} "
                    "to truncate them")
            elif cut and probe.truncation == "refuse":
                report.warnings.append(f"{cut:,} requests do not fit and {section}.truncation is 'refuse': they will "
                                       "be recorded as errors")
    return report


def check_vllm(job: Job, section: str, *, source: Optional[Union[str, Path]] = None,
               gpu_memory_gib: Optional[float] = None, hub: bool = True, prompts: Any = None,
               require_config: bool = True, **_: Any) -> Report:
    """The report on ``job``'s vLLM ``section`` (:func:`check_probe`, and for the probe with
    ``prompts`` :func:`prompt_fit`, whose failure is a note, never a refusal)."""
    probe = getattr(job, section)
    try:
        report = check_probe(probe, source=source, section=section, gpu_memory_gib=gpu_memory_gib, hub=hub,
                             require_config=require_config)
    except PreflightError as exc:
        raise PreflightError(f"{source}: {exc}" if source is not None else str(exc)) from None
    if prompts and section == "probe" and not report.skipped:
        try:
            report.prompts = prompt_fit(job, prompts)
        except Exception as exc:  # data not reachable here, a suite error: say so, do not fail
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            report.warnings.append(f"prompt lengths not checked: {first}")
        else:
            if report.prompts.cut and probe.truncation == "refuse":
                report.warnings.append(f"{report.prompts.cut:,} requests do not fit and probe.truncation is "
                                       "'refuse': they will be recorded as errors")
    return report


def preflight(job: Job, *, source: Optional[Union[str, Path]] = None, gpu_memory_gib: Optional[float] = None,
              hub: bool = True, prompts: Any = None, require_config: bool = True,
              endpoints: bool = False) -> list[Union[Report, EndpointReport]]:
    """The reports of every checked section of ``job`` (``probe``, then ``judge``), each from its
    backend's hook (:meth:`raylc.backends.registry.BackendPlugin.preflight`: vLLM sections by
    :func:`check_vllm`, OpenAI-compatible ones by :func:`check_openai` with ``endpoints``, as
    ``raylc check`` asks); an empty list when none is. ``source`` is the job file (messages,
    relative ``hf_config``); ``prompts`` (the suite's evaluation, :func:`raylc.evaluate.evaluation_for`)
    adds the prompt lengths."""
    from raylc.backends.registry import backend_of

    reports: list[Union[Report, EndpointReport]] = []
    for section in ("probe", "judge"):
        probe = getattr(job, section)
        if probe is None:
            continue
        report = backend_of(probe).preflight(job, section, source=source, gpu_memory_gib=gpu_memory_gib, hub=hub,
                                             prompts=prompts, require_config=require_config, endpoints=endpoints)
        if report is not None:
            reports.append(report)
    return reports
