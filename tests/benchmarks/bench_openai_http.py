"""Requests/s of the OpenAI-compatible backend against the test server on 127.0.0.1 (issue #30 item 5).

The fault-injecting test server (tests/doubles/openai_server.py, no faults, ``--delay-s`` of
fixed latency per request, none by default) runs in a process of its own, as ``vllm serve``
would; this process sends ``--requests`` short chat requests through
:class:`raylc.backends.openai_http.OpenAIBackend` (``probe.concurrency`` requests in flight)
for each ``--concurrency`` setting, after a warm-up of as many requests, and prints for each:
requests/s, and the TCP connections the server saw, warm-up included (a client that pools its connections opens
at most ``concurrency``; one that does not opens one per request).

With ``--tls`` the server speaks HTTPS (a self-signed certificate made with ``openssl``), as a
hosted API does: then a client that opens a connection per request also pays a TLS handshake per
request.

Run: .venv/bin/python tests/benchmarks/bench_openai_http.py [--requests 2000] [--concurrency 8,32] [--delay-s 0] [--tls]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from raylc.backends import openai_http  # noqa: E402
from raylc.backends.config import OpenAIProbe  # noqa: E402
from raylc.backends.openai_http import OpenAIBackend  # noqa: E402


def _serve(conn, delay_s: float, tls) -> None:
    """The server process: starts the server, sends its URL, answers "stats" with its counters, stops on "stop"."""
    from doubles.openai_server import SimulatedOpenAIServer

    with SimulatedOpenAIServer(delay_s=delay_s, tls=tls) as server:
        conn.send(server.base_url)
        while (msg := conn.recv()) != "stop":
            conn.send(dict(server.stats) if msg == "stats" else None)


def transport() -> str:
    """The HTTP library the backend sends with."""
    for name in ("httpx", "urllib"):
        if hasattr(openai_http, name):
            return name
    return "unknown"


def run(base_url: str, conn, requests: int, concurrency: int) -> tuple[float, int]:
    """(requests/s, connections the server saw, warm-up included) for ``requests`` requests at ``concurrency``."""
    probe = OpenAIProbe(backend="openai", base_url=base_url, model="simulated", concurrency=concurrency,
                        max_retries=0, retry_budget_s=0.0, timeout_s=30.0, usage_check_factor=None)
    backend = OpenAIBackend(probe, seed=0)
    try:
        prompts = [f"Request {i}. What is the code of vault V-{i}?" for i in range(requests)]
        conn.send("stats")
        before = conn.recv()
        backend.generate(prompts[:concurrency])  # warm-up: tokenizers loaded, connections opened
        t0 = time.perf_counter()
        results = backend.generate(prompts)
        elapsed = time.perf_counter() - t0
        conn.send("stats")
        after = conn.recv()
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    errors = [r["error"] for r in results if r["error"] is not None]
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return requests / elapsed, after["connections"] - before["connections"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", default="8,32", help="comma-separated (8: OpenAIProbe's default)")
    ap.add_argument("--delay-s", type=float, default=0.0, help="fixed server latency per request")
    ap.add_argument("--tls", action="store_true",
                    help="HTTPS with a self-signed certificate (needs the openssl command)")
    args = ap.parse_args()
    tls = None
    if args.tls:
        tmp = Path(tempfile.mkdtemp(prefix="bench-openai-tls-"))
        tls = (str(tmp / "cert.pem"), str(tmp / "key.pem"))
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", tls[1], "-out", tls[0]],
                       check=True, capture_output=True)
        os.environ["SSL_CERT_FILE"] = tls[0]  # the client trusts it (ssl's default verify paths)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child, args.delay_s, tls), daemon=True)
    server.start()
    try:
        base_url = parent.recv()
        for c in (int(x) for x in args.concurrency.split(",")):
            rate, connections = run(base_url, parent, args.requests, c)
            scheme = "https" if tls else "http"
            print(f"transport {transport():6s} {scheme:5s} concurrency {c:3d}  {args.requests} requests  "
                  f"delay {args.delay_s:g} s  {rate:8.1f} requests/s  {connections} TCP connections", flush=True)
    finally:
        parent.send("stop")
        server.join(10)


if __name__ == "__main__":
    main()
