"""The double's engine core child process: its handle in the frontend, and its ``main``.

The real vLLM starts ``EngineCoreProc.run_engine_core`` with ``multiprocessing`` (fork, or spawn in a
Ray actor or once CUDA is initialised). The double starts ``python -c`` with ``subprocess`` instead
(a spawn re-imports the parent's ``__main__`` -- pytest, or a Ray worker -- which can take a second;
this takes a few tens of milliseconds) with the same environment and the same file descriptors 1
and 2 (stdout, stderr; stdin is ``/dev/null``, as ``multiprocessing`` makes it). Two pipes link
them:

* ready pipe (child -> frontend): the child writes ``R`` once started; the frontend keeps the read
  end as the process's ``sentinel`` (as ``multiprocessing.Process.sentinel``): it reaches end of file
  when the child exits, however it exits (SIGKILL included).
* control pipe (frontend -> child): one JSON line (name and configuration), then commands
  (``shutdown``, ``die <reason>``). End of file (the frontend closed it or died) stops the child
  cleanly, so a child never outlives its frontend.

``EngineCoreProcess`` has the attributes of ``multiprocessing.Process`` that vLLM's
``CoreEngineProcManager`` uses (``name``, ``pid``, ``exitcode``, ``sentinel``, ``is_alive``,
``join``, ``terminate``, ``kill``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # at run time subprocess is imported in start(): the child imports this module too
    import subprocess

# tests/doubles (this file is tests/doubles/vllm/_double/proc.py): put first on the child's sys.path
DOUBLES_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from vllm._double.proc import child_main; child_main()"
)


class EngineCoreProcess:
    """Handle of one engine core child process (frontend side)."""

    def __init__(self, name: str, vllm_config: dict[str, Any]):
        self.name = name
        self._vllm_config = vllm_config
        self._popen: Optional["subprocess.Popen[bytes]"] = None
        self.sentinel: Optional[int] = None
        self._control: Optional[int] = None
        self._lock = threading.Lock()
        self.monitored = False  # a monitor thread owns (and closes) the sentinel

    def start(self) -> None:
        import subprocess  # not at module level: the child imports this module too

        ready_r, ready_w = os.pipe()
        control_r, control_w = os.pipe()
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-c", _CHILD_CODE, DOUBLES_DIR, str(ready_w), str(control_r)],
                stdin=subprocess.DEVNULL, pass_fds=(ready_w, control_r))
        except BaseException:
            os.close(ready_r)
            os.close(control_w)
            raise
        finally:
            os.close(ready_w)
            os.close(control_r)
        self.sentinel = ready_r
        self._control = control_w
        self.send(json.dumps({"name": self.name, "vllm_config": self._vllm_config}, default=str))

    # ---------------------------------------------------------------- multiprocessing.Process API
    @property
    def pid(self) -> Optional[int]:
        return None if self._popen is None else self._popen.pid

    @property
    def exitcode(self) -> Optional[int]:
        return None if self._popen is None else self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def join(self, timeout: Optional[float] = None) -> None:
        if self._popen is None:
            return
        import subprocess

        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self._popen is not None and self._popen.poll() is None:
            try:
                self._popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def __repr__(self) -> str:
        code = self.exitcode
        state = "initial" if self._popen is None else "started" if code is None else f"stopped exitcode={code}"
        return f"<EngineCoreProcess name={self.name!r} pid={self.pid} {state}>"

    # ---------------------------------------------------------------- the double's protocol
    def wait_ready(self) -> bool:
        """Block until the child reports ready (True) or exits (False)."""
        if self.sentinel is None:
            return False
        return os.read(self.sentinel, 1) == b"R"

    def send(self, line: str) -> None:
        """Send one line to the child (nothing if it is gone)."""
        with self._lock:
            if self._control is None:
                return
            data = (line.rstrip("\n") + "\n").encode()
            try:
                while data:
                    data = data[os.write(self._control, data):]
            except OSError:  # BrokenPipeError: the child has exited
                pass

    def close_control(self) -> None:
        """End of file on the control pipe: the child leaves its loop and exits with code 0."""
        with self._lock:
            if self._control is not None:
                os.close(self._control)
                self._control = None

    def close_sentinel(self) -> None:
        with self._lock:
            if self.sentinel is not None:
                os.close(self.sentinel)
                self.sentinel = None


def stop_processes(procs: list[EngineCoreProcess], timeout: Optional[float] = None) -> None:
    """Stop the children quietly: ``shutdown`` and end of file on their control pipes (the command
    also reaches a child whose pipe a fork of this process keeps open), then SIGKILL after
    ``timeout`` (5 s). The real ``v1/utils.py:shutdown`` sends SIGTERM, which the core logs."""
    timeout = 5.0 if timeout is None else timeout
    for proc in procs:
        proc.send("shutdown")
        proc.close_control()
    for proc in procs:
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if not proc.monitored:
            proc.close_sentinel()


# ------------------------------------------------------------------------------------------ child


class _NewLineFormatter(logging.Formatter):
    """vLLM's ``NewLineFormatter`` (``logging_utils/formatter.py``): the prefix is repeated on every
    line of the message (traceback included), lines joined by ``\\r\\n``."""

    def __init__(self, fmt: str, datefmt: str, process_name: str):
        super().__init__(fmt, datefmt)
        self.process_name = process_name

    def format(self, record: logging.LogRecord) -> str:
        record.vllm_process_name = self.process_name
        record.fileinfo = record.filename
        msg = super().format(record)
        if record.message != "":
            parts = msg.split(record.message)
            msg = msg.replace("\n", "\r\n" + parts[0])
        return msg


def _configure_logging(process_name: str) -> None:
    """vLLM's default logging configuration (``logger.py``, ``envs.py``): a handler on the "vllm"
    logger writing to ``VLLM_LOGGING_STREAM`` (stdout by default), level ``VLLM_LOGGING_LEVEL``."""
    if not int(os.environ.get("VLLM_CONFIGURE_LOGGING", "1")):
        return
    level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    stream_name = os.environ.get("VLLM_LOGGING_STREAM", "ext://sys.stdout")
    stream = sys.stderr if stream_name == "ext://sys.stderr" else sys.stdout
    fmt = (f"{os.environ.get('VLLM_LOGGING_PREFIX', '')}(%(vllm_process_name)s "
           "pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s")
    handler = logging.StreamHandler(stream)
    handler.setLevel(level)
    handler.setFormatter(_NewLineFormatter(fmt, "%m-%d %H:%M:%S", process_name))
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.handlers = [handler]
    vllm_logger.setLevel(level)
    vllm_logger.propagate = False


def child_main() -> None:
    """The child's entry point: read the configuration, run ``EngineCoreProc.run_engine_core`` and
    end as ``multiprocessing.process.BaseProcess._bootstrap`` does (``Process <name>:`` and the
    traceback on stderr, exit code 1, if it raised)."""
    ready_fd, control_fd = int(sys.argv[2]), int(sys.argv[3])
    control = os.fdopen(control_fd, "rb")
    payload = json.loads(control.readline() or b"{}")
    name = payload.get("name", "EngineCore")
    exitcode = 1
    try:
        if not payload:
            raise SystemExit(0)  # the frontend went away before sending the configuration
        _configure_logging(name)
        from vllm.v1.engine.core import EngineCoreProc

        EngineCoreProc.run_engine_core(vllm_config=payload["vllm_config"], ready_fd=ready_fd, control=control)
        exitcode = 0
    except SystemExit as e:
        if e.code is None:
            exitcode = 0
        elif isinstance(e.code, int):
            exitcode = e.code
        else:
            sys.stderr.write(str(e.code) + "\n")
            exitcode = 1
    except BaseException:
        exitcode = 1
        sys.stderr.write(f"Process {name}:\n")
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    os._exit(exitcode)
