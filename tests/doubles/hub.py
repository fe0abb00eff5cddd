"""A Hugging Face Hub stand-in on 127.0.0.1 (a test double): it serves the ``config.json`` of the
repos it is given, as ``huggingface_hub.hf_hub_download`` asks for it (``HEAD`` then ``GET`` of
``/<repo>/resolve/main/config.json``); any other path is a 404.

huggingface_hub reads ``HF_ENDPOINT`` when it is imported, so the commands that use the stand-in
run in a new interpreter (:func:`raylc_with_hub`), each through ``tests/cli_runner.py``.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

TESTS = Path(__file__).resolve().parents[1]
_SCRIPT = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom cli_runner import raylc\n"
           "print(json.dumps([[p.returncode, p.stdout, p.stderr] for p in "
           "(raylc(*args) for args in json.loads(sys.argv[2]))]))")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "_Server"

    def _head(self) -> Optional[bytes]:
        repo, sep, _ = self.path.split("?")[0].lstrip("/").partition("/resolve/main/config.json")
        body = self.server.configs.get(repo) if sep else None
        self.send_response(200 if body is not None else 404)
        if body is not None:
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", '"cafe"')
        self.send_header("Content-Length", str(len(body)) if body is not None else "0")
        self.end_headers()
        return body

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        body = self._head()
        if body is not None:
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    configs: dict[str, bytes]


class HubStandIn:
    """The Hub serving ``configs`` (repo id -> config.json as a dict); a context manager, whose
    :attr:`url` is the value for ``HF_ENDPOINT``."""

    def __init__(self, configs: Mapping[str, dict]):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.configs = {repo: json.dumps(config).encode() for repo, config in configs.items()}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "HubStandIn":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def raylc_with_hub(hub: HubStandIn, commands: Sequence[Sequence[str]], cache: Path, cwd: Path,
                   env: Optional[Mapping[str, str]] = None) -> list[tuple[int, str, str]]:
    """``raylc *args`` for each of ``commands`` in one new interpreter whose Hub is ``hub`` (an empty
    Hugging Face cache in ``cache``, ``HF_HUB_OFFLINE`` unset): ``(exit code, stdout, stderr)`` each."""
    base = {k: v for k, v in (env if env is not None else os.environ).items()
            if k not in ("HF_HUB_OFFLINE", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "RAY_ADDRESS")}
    argv = json.dumps([[str(a) for a in command] for command in commands])
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(TESTS), argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**base, "HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    return [tuple(r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]
