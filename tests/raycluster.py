"""A throwaway Ray head on 127.0.0.1 in its own temp dir, for submission tests, and the tests' helpers
for local ports and processes."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

_GIVEN: set[int] = set()
_RANDOM = random.SystemRandom()  # a test that seeds ``random`` must not make two workers pick alike


def _unshared_ports() -> list[range]:
    """Ports no other process is handed without asking: above Ray's worker ports (10002-19999,
    ``ray start --min/max-worker-port``) and outside the kernel's ephemeral range, from which
    every outgoing connection and every ``bind(0)`` takes one."""
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return [r for r in (range(20000, min(lo, 65536)), range(max(hi + 1, 20000), 65536)) if len(r) > 100]


def free_port() -> int:
    """A free 127.0.0.1 port for a server a test starts later. A port from ``bind(0)`` is
    ephemeral: between our close and the server's bind, an outgoing connection of a busy
    machine may take it (ci57: a ``ray start`` exited 1, "Failed to bind ... already
    occupied"). So it comes from outside that range, at random, not given before."""
    spans = _unshared_ports()
    for _ in range(1000):
        span = _RANDOM.choice(spans)
        port = _RANDOM.randrange(span.start, span.stop)
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError("no free port outside the ephemeral range")


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class LocalHead:
    """``ray start --head --block`` in a new process group; ``stop()`` ends only this cluster.
    ``agent_port_taken``: the job agent's HTTP port is held by this process, so the head never
    has a job agent (its Jobs API refuses every submission, as while an agent starts). A head
    that exits before its dashboard answers is started again on fresh ports (:attr:`STARTS`)."""

    STARTS = 3  # tries when ``ray start`` exits before its dashboard answers (a port taken in the meantime)

    def __init__(self, tmp: Path, num_cpus: int = 2, agent_port_taken: bool = False):
        self._tmp, self._num_cpus, self._agent_port_taken = tmp, num_cpus, agent_port_taken
        self._taken: Optional[socket.socket] = None
        self._gcs: Any = None
        self.starts = 0
        self._up = False  # the dashboard has answered
        self.log = open(tmp.parent / "ray-head.log", "wb")
        self._start()

    def _start(self) -> None:
        """``ray start`` on ports chosen now, in a temp dir of its own for each try."""
        self.starts += 1
        self.dashboard_port = free_port()
        self.gcs_port = free_port()
        self.agent_port = free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        if self._taken is not None:
            self._taken.close()
            self._taken = None
        if self._agent_port_taken:
            self._taken = socket.socket()
            self._taken.bind(("127.0.0.1", self.agent_port))
            self._taken.listen()
        self._gcs = None
        ray_bin = Path(sys.executable).parent / "ray"
        temp_dir = self._tmp if self.starts == 1 else self._tmp.with_name(f"{self._tmp.name}{self.starts}")
        cmd = [
            str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}", f"--num-cpus={self._num_cpus}", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
            f"--dashboard-agent-listen-port={self.agent_port}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--ray-client-server-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--temp-dir={temp_dir}", "--disable-usage-stats",
        ]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_AUTH_MODE"] = "disabled"  # loopback-only test cluster
        # Ray gives its dashboard 60 s to start, then exits; a CI machine at load 15 took longer
        # (ci33: "Failed to start the dashboard" after 74 s). The tests wait up to 300 s for it.
        env.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "300")
        # `ray job stop` sends SIGKILL 3 s after SIGTERM (Ray's default); a loaded machine can take
        # longer to store a shard and say it stopped. A run that ignores SIGTERM is still killed.
        env.setdefault("RAY_JOB_STOP_WAIT_TIME_S", "120")
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # job drivers use this venv
        self.log.write(f"--- start {self.starts}: {' '.join(cmd)}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def _log_tail(self, n: int = 2000) -> str:
        self.log.flush()
        return Path(self.log.name).read_bytes()[-n:].decode(errors="replace")

    def _until(self, ready, what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log_tail()
                if not self._up and self.starts < self.STARTS:  # before its dashboard answered: a port
                    self._kill_group()  # taken in the meantime ("already occupied"), or another start-up
                    self._start()  # failure; each try's output stays in the log
                    continue
                raise RuntimeError(f"ray head exited with {self.proc.returncode} (start {self.starts}); "
                                   f"the end of {self.log.name}:\n{tail}")
            if ready():
                return
            time.sleep(0.1)
        raise TimeoutError(f"ray head: {what} did not come up; the end of {self.log.name}:\n{self._log_tail()}")

    def _dashboard_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.address}/api/version", timeout=2) as r:
                self._up = self._up or r.status == 200
                return r.status == 200
        except OSError:
            return False

    def agent_registered(self) -> bool:
        """Whether the head can hand a submission to a job agent: what the job head reads before
        it does (Ray 2.60, ``ray/dashboard/modules/job/job_head.py``
        ``JobHead._get_head_node_agent_once``): the head node's id in the GCS's internal KV
        (namespace ``job``, key ``head_node_id``) and, under it, the address the head node's
        dashboard agent writes once its HTTP server listens (namespace ``dashboard``,
        ``DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX:<node id>``, ``ray/dashboard/agent.py``)."""
        from ray._raylet import GcsClient

        try:
            if self._gcs is None:
                self._gcs = GcsClient(address=f"127.0.0.1:{self.gcs_port}")
            node_id = self._gcs.internal_kv_get(b"head_node_id", b"job", timeout=5)
            return bool(node_id) and bool(self._gcs.internal_kv_get(
                b"DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX:" + node_id, b"dashboard", timeout=5))
        except Exception:  # the GCS is not up yet (an RpcError): not registered
            self._gcs = None
            return False

    def wait_dashboard(self, timeout: float = 300.0) -> None:
        """Until the dashboard answers ``GET /api/version`` (its job agent may still be starting)."""
        self._until(self._dashboard_answers, "the dashboard", time.monotonic() + timeout)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Until the Jobs API can take a job: the dashboard answers and the job agent is registered."""
        deadline = time.monotonic() + timeout
        self._until(self._dashboard_answers, "the dashboard", deadline)
        self._until(self.agent_registered, "the job agent", deadline)

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:  # a throwaway cluster: a graceful stop may take half a minute, so not long
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._kill_group()  # what is left of it, also after a failed start
        self.log.close()
        if self._taken is not None:
            self._taken.close()
