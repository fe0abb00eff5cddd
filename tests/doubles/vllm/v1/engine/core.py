"""The engine core process of vLLM 0.33.0 (``v1/engine/core.py``), as the double runs it.

Real: ``CoreEngineProcManager`` (``v1/engine/utils.py``) runs ``EngineCoreProc.run_engine_core`` in
a child process named "EngineCore", even with the "uni" executor (``VLLM_ENABLE_V1_MULTIPROCESSING
=1``). The child inherits the parent's file descriptors 1 and 2. ``EngineCoreProc.__init__`` loads the
weights, profiles memory and sizes the KV cache; if it raises, ``run_engine_core`` logs
``logger.exception("EngineCore failed to start.")`` and re-raises (0.33.0 ``core.py:1584``; the
0.32.0 CPU build: ``core.py:1508-1515``). The process then ends as any ``multiprocessing`` child with
an uncaught exception: ``BaseProcess._bootstrap`` writes ``Process EngineCore:`` and the traceback to
stderr and exits with code 1. The parent only raises ``RuntimeError("Engine core initialization
failed. See root cause above. Failed core proc(s): {'EngineCore': 1}")`` (``v1/engine/utils.py``).
A core that fails after start-up logs "EngineCore encountered a fatal error." the same way.

vLLM's own log handler writes to ``VLLM_LOGGING_STREAM``, which is ``ext://sys.stdout`` by default
(``envs.py``; ``logger.py``), one line per line of the message, each with the prefix
``(EngineCore pid=N) ERROR MM-DD HH:MM:SS [core.py:LINE] `` and lines joined by ``\\r\\n``
(``logging_utils/formatter.py``, ``NewLineFormatter``). So with the defaults:

* fd 1 (stdout): ``(EngineCore pid=N) ERROR ... [core.py:L] EngineCore failed to start.``, then the
  same prefix before ``Traceback (most recent call last):``, each frame line and the last line
  (e.g. ``ValueError: To serve at least one request ...``);
* fd 2 (stderr): ``Process EngineCore:``, ``Traceback (most recent call last):``, the frames, and
  the same last line, without prefixes.

The double's child (started by ``vllm/_double/proc.py``) does all of this with the double's own
code: ``EngineCoreProc.__init__`` sleeps ``init_s`` and runs the double's start-up checks
(``fail_on_init``; ``kv_cache_tokens`` smaller than ``max_model_len``, with vLLM's message from
``v1/core/kv_cache_utils.py:_check_enough_kv_cache_memory``), then reports ready and waits for
commands from the frontend; the scheduling itself stays in the frontend process
(``vllm/_double/core.py``). Differences: no colours, no process title, and a clean shutdown logs
nothing (the real one logs "[shutdown] ..." INFO lines).
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import signal
import time
from typing import Any, Optional

logger = logging.getLogger(__name__)

_GiB = 1 << 30
_TYPED_REASON = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$", re.S)


def _format_gib(b: float) -> str:
    # utils/mem_utils.py:30
    return f"{round(b / _GiB, 2)}"


def _startup_exception(reason: str) -> BaseException:
    """``fail_on_init``'s exception: ``"Type: message"`` (e.g. ``"torch.OutOfMemoryError: CUDA out of
    memory ..."``) raises that type -- a built-in exception, or a ``RuntimeError`` subclass named so
    that the traceback's last line reads ``Type: message`` --; any other text a ``RuntimeError``."""
    m = _TYPED_REASON.match(reason)
    if not m:
        return RuntimeError(reason)
    qualname, message = m.group(1), m.group(2)
    module, _, name = qualname.rpartition(".")
    builtin = getattr(builtins, name, None) if module in ("", "builtins") else None
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        return builtin(message)
    cls = type(name, (RuntimeError,), {"__module__": module or "builtins"})
    return cls(message)


def _check_enough_kv_cache_memory(available_memory: int, needed_memory: int, max_model_len: int,
                                  estimated_max_len: int) -> None:
    # v1/core/kv_cache_utils.py:1003-1041 (the 0.32.0 CPU build; 0.33.0 kv_cache_planning.py:50-87)
    if available_memory <= 0:
        raise ValueError(
            "No available memory for the cache blocks. "
            "Try increasing `gpu_memory_utilization` when initializing the engine "
            "(this flag also controls CPU memory reservation on the CPU "
            "backend, despite its name). "
            "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
            "for more details."
        )
    if needed_memory > available_memory:
        estimated_msg = ""
        if estimated_max_len > 0:
            estimated_msg = (
                "Based on the available memory, "
                f"the estimated maximum model length is {estimated_max_len}. "
            )
        raise ValueError(
            f"To serve at least one request with the model's max seq len "
            f"({max_model_len}), ({_format_gib(needed_memory)} GiB KV "
            f"cache is needed, which is larger than the available KV cache "
            f"memory ({_format_gib(available_memory)} GiB). {estimated_msg}"
            f"Try increasing `gpu_memory_utilization` (which also controls "
            f"CPU memory on the CPU backend) or decreasing `max_model_len` "
            f"when initializing the engine. "
            f"See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
            f"for more details."
        )


def _kv_bytes_per_token(cfg: dict[str, Any]) -> int:
    """K and V, bf16, all layers, this rank's share of the KV heads."""
    hf = cfg["hf_config"]
    heads = int(hf.get("num_attention_heads", 1))
    head_dim = int(hf.get("head_dim") or int(hf.get("hidden_size", 128 * heads)) // heads)
    per_token = 2 * int(hf.get("num_hidden_layers", 1)) * int(hf.get("num_key_value_heads", heads)) * head_dim * 2
    return max(1, per_token // max(1, int(cfg.get("tensor_parallel_size", 1))))


class EngineCoreProc:
    """The double's engine core process: start-up (simulated weight loading, the start-up checks),
    then a loop that waits for the frontend's commands."""

    def __init__(self, vllm_config: dict[str, Any], ready_fd: int, control: Any, engine_index: int = 0):
        self.vllm_config = vllm_config
        self.engine_index = engine_index
        self._control = control
        settings = vllm_config["double"]
        # the real one loads the weights, profiles memory and captures CUDA graphs here
        init_s = float(settings.get("init_s") or 0.0) * float(settings.get("time_scale", 1.0))
        if init_s > 0:
            time.sleep(init_s)
        if settings.get("fail_on_init"):
            raise _startup_exception(str(settings["fail_on_init"]))
        self._initialize_kv_caches(vllm_config)
        # the real core sends READY over its handshake socket (core.py:1325-1350)
        os.write(ready_fd, b"R")

    def _initialize_kv_caches(self, vllm_config: dict[str, Any]) -> None:
        kv_tokens: Optional[int] = vllm_config["double"].get("kv_cache_tokens")
        if kv_tokens is None:
            return
        max_model_len = int(vllm_config["max_model_len"])
        per_token = _kv_bytes_per_token(vllm_config)
        _check_enough_kv_cache_memory(
            available_memory=int(kv_tokens) * per_token, needed_memory=max_model_len * per_token,
            max_model_len=max_model_len, estimated_max_len=int(kv_tokens))

    def run_busy_loop(self) -> None:
        """Wait for the frontend: ``shutdown`` (or end of file: the frontend is gone) ends the process
        cleanly; ``die <reason>`` makes the core fail as a crashed one does."""
        while True:
            line = self._control.readline()
            if not line or line.strip() == b"shutdown":
                break
            if line.startswith(b"die"):
                reason = line[3:].decode("utf-8", "replace").strip() or "the engine core died"
                raise RuntimeError(f"vLLM double: {reason}")
        raise SystemExit

    @staticmethod
    def run_engine_core(*args: Any, dp_rank: int = 0, local_dp_rank: int = 0, **kwargs: Any) -> None:
        """Launch EngineCore busy loop in background process."""
        engine_core: Optional[EngineCoreProc] = None

        def signal_handler(signum: int, frame: Any) -> None:
            # core.py:1446-1463: log, then leave the busy loop
            logger.info("[shutdown] EngineCore: trigger received signal=%s", signal.Signals(signum).name)
            raise SystemExit

        signal.signal(signal.SIGTERM, signal_handler)
        signal.signal(signal.SIGINT, signal_handler)
        try:
            engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)
            engine_core.run_busy_loop()
        except SystemExit:
            raise
        except Exception as e:
            if engine_core is None:
                logger.exception("EngineCore failed to start.")
            else:
                logger.exception("EngineCore encountered a fatal error.")
            raise e
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
