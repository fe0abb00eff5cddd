"""``BackgroundResources`` of vLLM 0.33.0 (``v1/engine/core_client.py``): what the engine core client
keeps for clean shutdown, here only the engine manager and the dead flag.

In the real package ``AsyncLLM.engine_core`` and ``LLMEngine.engine_core`` are engine core clients
(``AsyncMPClient`` / ``SyncMPClient``) whose ``resources.engine_manager`` is the
``CoreEngineProcManager`` (``core_client.py:616,686``); the double's ``engine_core`` (the timed
engine, ``vllm/_double/core.py``) has the same ``resources`` attribute, so in both

    engine.engine_core.resources.engine_manager.processes[0].pid          # AsyncLLM
    llm.llm_engine.engine_core.resources.engine_manager.processes[0].pid  # LLM

is the engine core process's pid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class BackgroundResources:
    """Used as a finalizer for clean shutdown, avoiding
    circular reference back to the client object."""

    engine_manager: Optional[Any] = None
    # Set if any of the engines are dead (core_client.py:505-507).
    engine_dead: bool = False

    def __call__(self, timeout: Optional[float] = None) -> None:
        """Clean up background resources: stop the engine core processes."""
        self.engine_dead = True
        if self.engine_manager is not None:
            self.engine_manager.shutdown(timeout=timeout)
