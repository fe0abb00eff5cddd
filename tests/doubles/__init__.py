"""Test doubles. ``doubles.openai_server`` is a fault-injecting OpenAI-compatible HTTP server
(:class:`~doubles.openai_server.SimulatedOpenAIServer`), ``doubles.hub`` a Hugging Face Hub
stand-in (:class:`~doubles.hub.HubStandIn`), ``doubles.jobs_api`` a fake Ray Jobs API
(:class:`~doubles.jobs_api.FakeJobsAPI`). ``tests/doubles/vllm`` is a timed
stand-in for vLLM 0.33.0, importable as ``vllm`` once ``DOUBLES_DIR`` is on ``sys.path`` / ``PYTHONPATH`` (Ray workers:
``runtime_env={"env_vars": {"PYTHONPATH": DOUBLES_DIR}}``).

    from doubles import vllm_double
    from doubles.model_dir import make_model_dir

    with vllm_double() as vllm:          # this process imports the double as ``vllm``
        llm = vllm.LLM(model=str(make_model_dir(tmp_path / "m")))

As in vLLM, building an engine starts an engine core child process ("EngineCore"), which writes to
the fds 1 and 2 it inherits; a start-up failure is printed there and raises only "Engine core
initialization failed. See root cause above. ..." (``vllm/v1/engine/core.py``). Its pid:
``llm.llm_engine.engine_core.resources.engine_manager.processes[0].pid`` (``AsyncLLM``:
``engine.engine_core.resources...``).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

DOUBLES_DIR = str(Path(__file__).resolve().parent)


def _vllm_modules() -> dict[str, ModuleType]:
    return {k: m for k, m in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}


@contextmanager
def vllm_double() -> Iterator[ModuleType]:
    """Put the double first on ``sys.path`` and yield it as the ``vllm`` module; afterwards remove
    every ``vllm*`` module it loaded and restore whatever ``vllm`` modules were there before."""
    saved = _vllm_modules()
    for name in saved:
        del sys.modules[name]
    added = DOUBLES_DIR not in sys.path
    if added:
        sys.path.insert(0, DOUBLES_DIR)
    try:
        import vllm

        if not getattr(vllm, "IS_DOUBLE", False):
            raise RuntimeError(f"'import vllm' did not load the double (got {vllm.__file__})")
        yield vllm
    finally:
        for name in _vllm_modules():
            del sys.modules[name]
        if added:
            try:
                sys.path.remove(DOUBLES_DIR)
            except ValueError:
                pass
        sys.modules.update(saved)
