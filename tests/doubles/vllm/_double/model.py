"""Model folder -> configuration, as vLLM 0.33.0 resolves it at construction; and the tokenizer.

Restated behaviour (no vLLM code), with the places it comes from:

* ``config.json`` must exist, else ``ValueError("Invalid repository ID or local directory
  specified: ...")`` (``transformers_utils/config.py:899-923``).
* ``hf_overrides``: non-dict values update the loaded config, dict values are set afterwards
  (``config/model.py:615-629,680-692``; ``transformers_utils/config.py:989-991``). In
  transformers 5 ``rope_scaling`` is an alias of ``rope_parameters``.
* Derived length: the smallest of the position keys, ``model_max_length`` winning when set
  (``transformers_utils/model_arch_config_convertor.py:374-407``); then, if the config has RoPE
  parameters, multiplied by the RoPE ``factor`` unless the type is one of the YaRN-like ones
  (su, longrope, llama3, yarn, deepseek_yarn, deepseek_llama_scaling) -- so even a factor of
  1.0 turns it into a float ("max_position_embeddings=32768.0") (``config/model.py:2598-2634``).
* ``max_model_len`` None (or -1) -> the derived length; above it -> ``ValueError`` unless
  ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is 1/true (``config/model.py:2639-2684``; ``envs.py:1115``).
  The check runs in ``ModelConfig.__post_init__`` (``config/model.py:824``); ``ModelConfig`` is a
  pydantic dataclass (``config/model.py:151``, ``config/utils.py:52-82``), so the caller sees a
  ``pydantic_core.ValidationError`` ("1 validation error for ModelConfig / Value error, ...",
  a ``ValueError`` subclass) whose last line is pydantic's "For further information visit ..."
  link. The double raises the same (plain ``ValueError`` if pydantic is missing).
* ``dtype``: "auto" or one of half/float16/float/float32/bfloat16, else "Unknown dtype"
  (``config/model.py:2384-2390,2480-2499``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

from .settings import DoubleSettings

# transformers_utils/model_arch_config_convertor.py:376-392 (order matters only for the key name)
_MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
# config/model.py:2610-2619: RoPE types whose factor is NOT applied to the derived length
_UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
_DTYPES = ("half", "float16", "float", "float32", "bfloat16")  # config/model.py:2384-2390
_EXECUTOR_BACKENDS = ("ray", "mp", "uni", "external_launcher")  # config/parallel.py:38


def config_error(title: str, message: str, input_kwargs: dict[str, Any]) -> Exception:
    """A ``ValueError`` raised in a vLLM pydantic config's ``__post_init__``, as the caller sees it."""
    try:
        from pydantic_core import ArgsKwargs, ValidationError
    except ImportError:  # pragma: no cover - pydantic is a vLLM dependency
        return ValueError(message)
    return ValidationError.from_exception_data(
        title, [{"type": "value_error", "loc": (), "input": ArgsKwargs((), input_kwargs),
                 "ctx": {"error": ValueError(message)}}])


def field_error(title: str, loc: str, err_type: str, value: Any, ctx: dict[str, Any]) -> Exception:
    """A pydantic field-constraint failure (``Field(gt=0, le=1)`` etc.) as the caller sees it."""
    try:
        from pydantic_core import ValidationError
    except ImportError:  # pragma: no cover
        return ValueError(f"{title}.{loc}: {err_type} {ctx} (got {value!r})")
    return ValidationError.from_exception_data(
        title, [{"type": err_type, "loc": (loc,), "input": value, "ctx": ctx}])


def _allow_long_max_model_len() -> bool:
    # envs.py:1115-1118
    return os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")


def load_hf_config(model: str, hf_overrides: Any) -> dict[str, Any]:
    path = os.path.join(str(model), "config.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"Invalid repository ID or local directory specified: '{model}'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'.\n"
            "(vLLM double: only local folders are supported)"
        )
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    if callable(hf_overrides):
        raise NotImplementedError("vLLM double: callable hf_overrides are not modelled; pass a dict")
    overrides = dict(hf_overrides or {})
    flat = {k: v for k, v in overrides.items() if not isinstance(v, dict)}
    nested = {k: v for k, v in overrides.items() if isinstance(v, dict)}
    cfg.update(flat)
    for key, value in nested.items():
        cfg[key] = value
        if key == "rope_scaling":  # transformers 5: alias of rope_parameters
            cfg["rope_parameters"] = value
        elif key == "rope_parameters":
            cfg["rope_scaling"] = value
    return cfg


def _rope_parameters(cfg: dict[str, Any]) -> Optional[dict[str, Any]]:
    for key in ("rope_parameters", "rope_scaling"):
        rp = cfg.get(key)
        if isinstance(rp, dict) and rp:
            return rp
    if cfg.get("rope_theta") is not None:  # transformers 5 standardises it into rope_parameters
        return {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    return None


def derive_max_model_len(cfg: dict[str, Any]) -> tuple[float, Optional[str]]:
    derived: float = float("inf")
    key_name = None
    for key in _MAX_LEN_KEYS:
        value = cfg.get(key)
        if value is not None:
            if value < derived:
                key_name = key
            derived = min(derived, value)
    if cfg.get("model_max_length"):
        key_name, derived = "model_max_length", cfg["model_max_length"]
    return derived, key_name


def _scale_by_rope(cfg: dict[str, Any], derived: float) -> float:
    rp = _rope_parameters(cfg)
    if rp is not None and "gemma3" not in str(cfg.get("model_type", "")):
        scaling = 1.0
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        if rope_type not in _UNSCALED_ROPE_TYPES:
            scaling = rp.get("factor", scaling)
        if scaling is None:
            scaling = 1.0
        derived *= scaling
    return derived


def verify_max_model_len(cfg: dict[str, Any], max_model_len: Optional[int], init_kwargs: dict[str, Any]) -> int:
    derived, key_name = derive_max_model_len(cfg)
    if derived == float("inf"):  # config/model.py:2578-2594: no length key in the config
        if max_model_len is not None:
            return int(max_model_len)
        derived = 2048
    derived = _scale_by_rope(cfg, derived)
    if max_model_len is None or max_model_len == -1:
        return int(derived)
    if max_model_len > derived:
        model_max_length = cfg.get("model_max_length")
        if model_max_length is None or max_model_len > model_max_length:
            msg = (
                f"User-specified max_model_len ({max_model_len}) is greater "
                f"than the derived max_model_len ({key_name}="
                f"{derived} or model_max_length="
                f"{model_max_length} in model's config.json)."
            )
            warning = (
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme "
                "caution. If the model uses relative position encoding (RoPE), "
                "positions exceeding derived_max_model_len lead to nan. If the "
                "model uses absolute position encoding, positions exceeding "
                "derived_max_model_len will cause a CUDA array out-of-bounds "
                "error."
            )
            if not _allow_long_max_model_len():
                raise config_error(
                    "ModelConfig",
                    f"{msg} To allow overriding this maximum, set "
                    f"the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}",
                    init_kwargs,
                )
    return int(max_model_len)


# ----------------------------------------------------------------------------------------------
# Tokenizer


_NO_CHAT_TEMPLATE = (
    "Cannot use chat template functions because tokenizer.chat_template is not set and no "
    "template argument was passed! For information about writing templates and setting the "
    "tokenizer.chat_template attribute, please see the documentation at "
    "https://huggingface.co/docs/transformers/main/en/chat_templating"
)


class DoubleTokenizer:
    """A local ``tokenizer.json`` (plus optional ``tokenizer_config.json``) behind the parts of the
    Hugging Face tokenizer interface that vLLM users touch."""

    def __init__(self, path: str, hf_config: Optional[dict[str, Any]] = None):
        from tokenizers import Tokenizer

        tok_file = os.path.join(str(path), "tokenizer.json")
        if not os.path.isfile(tok_file):
            raise OSError(
                f"Can't load tokenizer for '{path}': no tokenizer.json in that folder "
                "(vLLM double: only local folders with a tokenizer.json are supported)"
            )
        self._tok = Tokenizer.from_file(tok_file)
        self.name_or_path = str(path)
        tc: dict[str, Any] = {}
        tc_file = os.path.join(str(path), "tokenizer_config.json")
        if os.path.isfile(tc_file):
            with open(tc_file, encoding="utf-8") as f:
                tc = json.load(f)
        self.init_kwargs = tc
        self.chat_template: Optional[str] = tc.get("chat_template")
        self.model_max_length = int(tc.get("model_max_length", 1 << 60))
        self.truncation_side = tc.get("truncation_side", "right")
        self.padding_side = tc.get("padding_side", "right")
        hf_config = hf_config or {}
        # tokenizer_config.json decides (a null bos_token, as in Qwen2's, means none); without the
        # key, fall back to the ids in config.json
        self.bos_token = self._token_str(tc.get("bos_token"),
                                         None if "bos_token" in tc else hf_config.get("bos_token_id"))
        self.eos_token = self._token_str(tc.get("eos_token"),
                                         None if "eos_token" in tc else hf_config.get("eos_token_id"))
        self.pad_token = self._token_str(tc.get("pad_token"), None)
        added = self._tok.get_added_tokens_decoder()
        self._special_ids = sorted(i for i, t in added.items() if t.special)
        self._vocab_size_with_added = self._tok.get_vocab_size(with_added_tokens=True)

    def _token_str(self, value: Any, fallback_id: Any) -> Optional[str]:
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            return value
        if isinstance(fallback_id, list):
            fallback_id = fallback_id[0] if fallback_id else None
        if isinstance(fallback_id, int):
            return self._tok.id_to_token(fallback_id)
        return None

    # ids of special tokens
    def _id(self, token: Optional[str]) -> Optional[int]:
        return None if token is None else self._tok.token_to_id(token)

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._id(self.bos_token)

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._id(self.eos_token)

    @property
    def pad_token_id(self) -> Optional[int]:
        return self._id(self.pad_token)

    @property
    def all_special_ids(self) -> list[int]:
        return list(self._special_ids)

    @property
    def all_special_tokens(self) -> list[str]:
        return [self._tok.id_to_token(i) for i in self._special_ids]

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=False)

    @property
    def max_token_id(self) -> int:
        return self._vocab_size_with_added - 1

    def __len__(self) -> int:
        return self._vocab_size_with_added

    def text_token_ids(self) -> list[int]:
        """Non-special ids that decode on their own to clean text (no partial UTF-8): what the
        double's "model" samples from. Cached."""
        cached = getattr(self, "_text_ids", None)
        if cached is None:
            special = set(self._special_ids)
            n = self._vocab_size_with_added
            texts = self._tok.decode_batch([[i] for i in range(n)], skip_special_tokens=False)
            cached = [i for i, t in enumerate(texts) if i not in special and t and "\ufffd" not in t]
            if not cached:
                cached = [i for i in range(n) if i not in special]
            self._text_ids = cached
        return cached

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        truncation = kwargs.pop("truncation", False)
        max_length = kwargs.pop("max_length", None)
        ids = self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        if truncation and max_length is not None and len(ids) > max_length:
            ids = ids[-max_length:] if self.truncation_side == "left" else ids[:max_length]
        return ids

    def __call__(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> dict[str, Any]:
        if isinstance(text, (list, tuple)):
            ids = [self.encode(t, add_special_tokens=add_special_tokens, **dict(kwargs)) for t in text]
            return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}
        ids = self.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if isinstance(ids, int):
            ids = [ids]
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, seqs: Any, skip_special_tokens: bool = False, **kwargs: Any) -> list[str]:
        return self._tok.decode_batch([list(s) for s in seqs], skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        special = set(self._special_ids) if skip_special_tokens else set()
        return [self._tok.id_to_token(i) for i in ids if i not in special]

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._tok.decoder.decode(tokens) if self._tok.decoder else "".join(tokens)

    def apply_chat_template(self, conversation: Any, tools: Any = None, documents: Any = None,
                            chat_template: Optional[str] = None, add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True,
                            padding: bool = False, truncation: bool = False, max_length: Optional[int] = None,
                            return_tensors: Any = None, return_dict: bool = False, **kwargs: Any) -> Any:
        """Render with the folder's ``chat_template`` (``tokenizer_config.json``) using Jinja2; a
        base-model folder has none and raises ``ValueError`` as Hugging Face tokenizers do."""
        template = chat_template or self.chat_template
        if not template:
            raise ValueError(_NO_CHAT_TEMPLATE)
        import jinja2

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)

        def raise_exception(message: str) -> None:
            raise jinja2.TemplateError(message)

        env.globals["raise_exception"] = raise_exception
        text = env.from_string(template).render(
            messages=conversation, tools=tools, documents=documents,
            add_generation_prompt=add_generation_prompt, bos_token=self.bos_token or "",
            eos_token=self.eos_token or "", **kwargs)
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False, truncation=truncation, max_length=max_length)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids


# ----------------------------------------------------------------------------------------------
# Resolved engine configuration


@dataclass
class ModelConfig:
    """The few ``vllm.config.ModelConfig`` attributes that callers read."""

    model: str
    tokenizer: str
    max_model_len: int
    dtype: str
    seed: int
    hf_config_dict: dict[str, Any]
    served_model_name: Any = None
    runner_type: str = "generate"
    hf_config: Any = field(init=False)

    def __post_init__(self) -> None:
        self.hf_config = SimpleNamespace(**self.hf_config_dict)
        self.hf_text_config = self.hf_config

    def get_vocab_size(self) -> int:
        return int(self.hf_config_dict.get("vocab_size", 0))

    @property
    def architectures(self) -> list[str]:
        return list(self.hf_config_dict.get("architectures") or [])


@dataclass
class CacheConfig:
    block_size: int
    enable_prefix_caching: bool
    gpu_memory_utilization: float


@dataclass
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    max_model_len: int


@dataclass
class ParallelConfig:
    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_executor_backend: Any

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass
class VllmConfig:
    model_config: ModelConfig
    cache_config: CacheConfig
    scheduler_config: SchedulerConfig
    parallel_config: ParallelConfig
    double: DoubleSettings
    tokenizer_path: str
    usage_context: Any = None
