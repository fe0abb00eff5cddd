"""A throwaway Ray head on 127.0.0.1 in its own temp dir, for submission tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalHead:
    """``ray start --head --block`` in a new process group; ``stop()`` ends only this cluster."""

    def __init__(self, tmp: Path, num_cpus: int = 2):
        self.dashboard_port = free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        ray_bin = Path(sys.executable).parent / "ray"
        cmd = [
            str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
            f"--port={free_port()}", f"--num-cpus={num_cpus}", "--include-dashboard=true",
            "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--ray-client-server-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--temp-dir={tmp}", "--disable-usage-stats",
        ]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_AUTH_MODE"] = "disabled"  # loopback-only test cluster
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # job drivers use this venv
        self.log = open(tmp.parent / "ray-head.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray head exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.address}/api/version", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(1.0)
        raise TimeoutError("ray head did not come up")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:  # a throwaway cluster: a graceful stop may take half a minute, so not long
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()
