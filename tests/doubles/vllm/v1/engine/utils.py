"""``CoreEngineProcManager`` and ``wait_for_engine_startup`` of vLLM 0.33.0 (``v1/engine/utils.py``),
for the double's engine core child process (``vllm/_double/proc.py``, ``vllm/v1/engine/core.py``).

* ``CoreEngineProcManager.processes`` is the list of engine core processes (one, named
  "EngineCore": the double has no data parallelism); each has ``pid``, ``name``, ``exitcode``,
  ``sentinel``, ``is_alive()``, ``join()``, ``terminate()`` and ``kill()`` as a
  ``multiprocessing.Process``. The frontend reaches it as
  ``engine_core.resources.engine_manager`` (``v1/engine/core_client.py``, ``BackgroundResources``).
* ``wait_for_engine_startup`` raises, when a core process exits before it is ready, exactly the
  real ``RuntimeError("Engine core initialization failed. See root cause above. Failed core
  proc(s): {'EngineCore': 1}")`` (0.33.0 ``utils.py:1473-1481``; the 0.32.0 CPU build
  ``utils.py:1429-1441``): the reason is only in what the core process printed.
* ``monitor_engine_liveness`` returns once a core process has exited (``utils.py:350-366``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from multiprocessing import connection
from typing import Any, Optional

from vllm._double.proc import EngineCoreProcess, stop_processes

logger = logging.getLogger(__name__)


class CoreEngineProcManager:
    """Utility class to handle creation, readiness, and shutdown
    of background processes used by the AsyncLLM and LLMEngine."""

    def __init__(self, vllm_config: Any):
        cfg = {
            "model": vllm_config.model_config.model,
            "max_model_len": vllm_config.model_config.max_model_len,
            "hf_config": vllm_config.model_config.hf_config_dict,
            "tensor_parallel_size": vllm_config.parallel_config.tensor_parallel_size,
            "double": dataclasses.asdict(vllm_config.double),
        }
        self.processes: list[EngineCoreProcess] = [EngineCoreProcess("EngineCore", cfg)]
        self._finalizer = weakref.finalize(self, stop_processes, self.processes)
        self.manager_stopped = threading.Event()
        self.failed_proc_name: Optional[str] = None
        try:
            for proc in self.processes:
                proc.start()
        finally:
            if self.finished_procs() or any(p.pid is None for p in self.processes):
                self.shutdown()

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Shutdown engine core processes with configurable timeout."""
        self.manager_stopped.set()
        if self._finalizer.detach() is not None:
            stop_processes(self.processes, timeout=timeout)

    def monitor_engine_liveness(self) -> None:
        """Monitor engine core process liveness (returns once one has exited). The caller must
        set ``proc.monitored`` first: this thread then closes the sentinels."""
        sentinel_to_proc = {proc.sentinel: proc for proc in self.processes if proc.sentinel is not None}
        try:
            for sentinel in connection.wait(list(sentinel_to_proc)) if sentinel_to_proc else []:
                proc = sentinel_to_proc[sentinel]
                proc.join()  # end of file on the sentinel: the process has exited
                if proc.exitcode != 0 and not self.manager_stopped.is_set():
                    self.failed_proc_name = proc.name
        finally:
            self.shutdown()
            for proc in sentinel_to_proc.values():
                proc.monitored = False
                proc.close_sentinel()

    def sentinels(self) -> list:
        return [proc.sentinel for proc in self.processes]

    def finished_procs(self) -> dict[str, int]:
        """Returns dict of proc name -> exit code for any finished procs."""
        return {proc.name: proc.exitcode for proc in self.processes if proc.exitcode is not None}


def wait_for_engine_startup(engine_manager: CoreEngineProcManager) -> None:
    """Wait for the engine core process(es) to report ready; raise vLLM's error if one exits."""
    for proc in engine_manager.processes:
        if not proc.wait_ready():
            proc.join(5.0)  # end of file on its ready pipe: the process is exiting
            break
    else:
        return
    finished = engine_manager.finished_procs()
    raise RuntimeError(
        "Engine core initialization failed. "
        "See root cause above. "
        f"Failed core proc(s): {finished}"
    )
