"""Model folders for the vLLM double: ``config.json`` shaped like a real checkpoint's, a real
byte-level BPE ``tokenizer.json`` trained here with ``tokenizers`` (no downloads), a
``tokenizer_config.json``, and optionally ``double.json`` (the double's timing/fault settings,
see ``vllm/_double/settings.py``).

    make_model_dir(tmp_path / "m", config="qwen2.5-7b", double={"prefill_tokens_per_s": 50000})
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any, Optional, Union

# Qwen/Qwen2.5-7B-Instruct config.json (token ids are remapped to the trained tokenizer's)
QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}

# meta-llama/Llama-3.1-8B config.json
LLAMA31_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

_FAMILIES = {
    # specials, bos, eos, pad, prepend bos on encode, tokenizer_class
    "qwen": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", "<|endoftext|>", False,
             "Qwen2Tokenizer"),
    "llama": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
              "<|begin_of_text|>", "<|end_of_text|>", None, True, "PreTrainedTokenizerFast"),
}
_CONFIG_IDS = {  # which special token each config id names
    "qwen": {"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>"},
    "llama": {"bos_token_id": "<|begin_of_text|>", "eos_token_id": "<|end_of_text|>"},
}
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

_COMMON = (
    "the of and to a in is it you that he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put end does "
    "another well large must big even such because turn here why ask went men read need land different home "
    "us move try kind hand picture again change off play spell air away animal house point page letter mother "
    "answer found study still learn should world high every near add food between own below country plant "
    "last school father keep tree never start city earth eye light thought head under story saw left few "
    "while along might close something seem next hard open example begin life always those both paper together"
).split()

_cache: dict[tuple[str, int, int], str] = {}


def _words(rng: random.Random, n: int) -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr",
              "br", "ch", "sh", "th", "pl", "gr", "cl", ""]
    vowels = ["a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "y"]
    codas = ["", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "th", "rt", "x"]
    out = set(_COMMON)
    while len(out) < n:
        syll = rng.choice([1, 2, 2, 3, 3, 4])
        out.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syll)))
    return sorted(out)


def english_like_text(n_sentences: int, seed: int = 0) -> list[str]:
    """Deterministic English-looking sentences with a Zipf-like word distribution."""
    rng = random.Random(seed)
    words = _words(rng, 3000)
    rng.shuffle(words)
    common = list(_COMMON)
    cum, total = [], 0.0
    for i in range(len(words)):
        total += 1.0 / (i + 1)
        cum.append(total)
    lines = []
    for _i in range(n_sentences):
        k = rng.randint(4, 18)
        rare = rng.choices(words, cum_weights=cum, k=k)
        picked = [rng.choice(common) if rng.random() < 0.45 else rare[j] for j in range(k)]
        if rng.random() < 0.1:
            picked.insert(rng.randrange(len(picked)), str(rng.randint(0, 9999)))
        s = " ".join(picked)
        s = s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!", ",", ";", ":"])
        if rng.random() < 0.08:
            s = f'"{s}" "{rng.choice(common).capitalize()}" ({rng.choice(words)})'
        lines.append(s)
    return lines


def train_tokenizer(family: str = "qwen", vocab_size: int = 4096, seed: int = 0) -> str:
    """A byte-level BPE tokenizer (JSON) trained on generated text; cached per process."""
    key = (family, vocab_size, seed)
    if key in _cache:
        return _cache[key]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials, bos, _eos, _pad, prepend_bos, _cls = _FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=max(300, vocab_size - len(specials)), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    lines = english_like_text(4000, seed)
    text = [" ".join(lines[i:i + 8]) for i in range(0, len(lines), 8)]
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens(specials)
    if prepend_bos:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    _cache[key] = tok.to_str()
    return _cache[key]


def make_model_dir(
    path: Union[str, Path],
    *,
    config: Union[str, dict[str, Any]] = "qwen2.5-7b",
    double: Optional[dict[str, Any]] = None,
    vocab_size: int = 4096,
    seed: int = 0,
    chat_template: Union[str, bool, None] = None,
) -> Path:
    """Write a model folder for the vLLM double and return its path.

    ``config``: "qwen2.5-7b", "llama-3.1-8b", or a full config dict (written as is; its
    ``model_type`` picks the tokenizer family, llama or else qwen). ``double``: written as
    ``double.json``. ``chat_template``: None (base model: ``apply_chat_template`` raises), True
    (a ChatML / Llama-3 template for the family) or a Jinja template string.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(config, str):
        name = config.lower()
        if name in ("qwen2.5-7b", "qwen2.5-7b-instruct", "qwen"):
            cfg, family = copy.deepcopy(QWEN25_7B), "qwen"
        elif name in ("llama-3.1-8b", "llama3.1-8b", "llama"):
            cfg, family = copy.deepcopy(LLAMA31_8B), "llama"
        else:
            raise ValueError(f"unknown config preset {config!r}: use 'qwen2.5-7b', 'llama-3.1-8b' or a dict")
        remap = True
    else:
        cfg = copy.deepcopy(dict(config))
        family = "llama" if str(cfg.get("model_type", "")).startswith("llama") else "qwen"
        remap = False

    from tokenizers import Tokenizer

    tok_json = train_tokenizer(family, vocab_size, seed)
    tok = Tokenizer.from_str(tok_json)
    if remap:
        for key, token in _CONFIG_IDS[family].items():
            cfg[key] = tok.token_to_id(token)
    specials, bos, eos, pad, _prepend, tok_cls = _FAMILIES[family]
    tok_cfg: dict[str, Any] = {
        "tokenizer_class": tok_cls, "bos_token": bos, "eos_token": eos, "pad_token": pad,
        "model_max_length": 131072, "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, "special": True} for t in specials},
    }
    if chat_template is True:
        tok_cfg["chat_template"] = CHATML_TEMPLATE if family == "qwen" else LLAMA3_TEMPLATE
    elif isinstance(chat_template, str):
        tok_cfg["chat_template"] = chat_template

    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    (path / "tokenizer.json").write_text(tok_json)
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    dj = path / "double.json"
    if double is not None:
        dj.write_text(json.dumps(double, indent=2))
    elif dj.exists():
        dj.unlink()
    return path
