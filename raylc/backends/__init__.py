"""Inference backends behind one interface: ``generate(prompts) -> list[dict]`` (:mod:`raylc.backends.base`).

A job's ``probe.backend`` finds its plug-in in the backend registry (:mod:`raylc.backends.registry`);
the built-in ones (:mod:`raylc.backends.builtin`) load on first use. vLLM is imported only when
its engine is built (it needs CUDA, or its CPU build).
"""

from raylc.backends.registry import BACKENDS

for _name in ("simulated", "vllm", "openai"):
    BACKENDS.register(_name, lazy="raylc.backends.builtin")
