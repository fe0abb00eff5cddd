"""A fault-injecting OpenAI-compatible HTTP server serving the simulated probe (a test double).

Routes: ``POST /v1/chat/completions`` (the last user message is the prompt),
``POST /v1/completions`` and ``GET /v1/models``. Completions are
:meth:`SimulatedBackend.answer`; usage counts come from the default tokenizer.

Failure injection is deterministic: request attempt ``n`` of a given body fails with
``fail_status`` iff a hash of (``seed``, body, ``n``) falls below ``fail_rate`` (with a
``Retry-After: <retry_after>`` header when ``retry_after`` is set, e.g. on 429), stalls
for ``stall_s`` seconds iff another such hash falls below ``stall_rate`` (to exercise
client timeouts), and answers with content ``null_content`` (JSON null by default, or e.g.
``""``) and ``finish_reason: null_finish_reason`` (``content_filter``) iff a third falls
below ``null_rate`` (1.0: every reply). ``api_key`` makes ``Authorization: Bearer <key>``
required; a missing or wrong key gets HTTP ``auth_status`` (401, or 400 with LiteLLM's
message). Servers in the wild: a ``model`` with ``*`` is a wildcard route (``local/*``
serves any ``local/<x>``), ``listed_models`` replaces what ``/v1/models`` lists (default:
``[model]``), ``usage_scale`` scales the reported ``prompt_tokens`` (0.003: a server that
under-reports usage), and ``echo_key`` makes every error reply repeat the request's
``Authorization`` header in its message and in an ``X-Echo-Authorization`` header (servers
and proxies that do; the client must scrub it). Test hooks, all off by default: ``drop_rate``
closes the connection without a reply (a crashed worker or proxy), ``bad_json_rate`` answers
HTTP 200 with a body that is not JSON (a proxy's HTML page), ``error_body`` replaces the JSON
body of every error reply with these bytes, ``stall_models_s`` stalls ``GET /v1/models``,
``trickle_s`` sends each reply's body one byte every ``trickle_s`` seconds (its headers at once;
with ``trickle_headers`` its status line and headers too), and
``record`` keeps every request (method, path, headers, body: parsed JSON, or the raw bytes;
for a completion, ``null``: whether it got a null reply) in :attr:`SimulatedOpenAIServer.requests`.
:attr:`SimulatedOpenAIServer.stats` counts requests,
injected failures, null replies, the maximum number of requests in flight, and the TCP
connections clients opened (``connections``; HTTP/1.1 keep-alive: a client that pools its
connections opens few). :meth:`SimulatedOpenAIServer.stop` closes the connections still open, as
a server that goes away does (a pooled client must not keep talking to a stopped server).
``tls=(certfile, keyfile)`` serves HTTPS (each new connection costs a TLS handshake).

Run ``.venv/bin/python tests/doubles/openai_server.py --port 8000 [--job job.yaml]`` to serve a
job's simulated probe at ``http://127.0.0.1:8000/v1`` (model ``simulated``).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

from raylc.backends.config import SimulatedProbe
from raylc.backends.simulated import SimulatedBackend
from raylc.text.tokenize import get_tokenizer


def _unit(*parts: Any) -> float:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as uvicorn and other servers set it: the headers and the body go out in two writes,
    # and with Nagle's algorithm the second waits for the client's delayed ACK (~40 ms per reply on a
    # kept-alive connection)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._closed(self.connection)

    def _reply(self, status: int, payload: dict[str, Any], headers: Optional[dict[str, str]] = None) -> None:
        self._reply_bytes(status, json.dumps(payload).encode(), headers, "application/json")

    def _error(self, status: int, message: str, headers: Optional[dict[str, str]] = None) -> None:
        said = self.headers.get("Authorization")
        if self.server.owner.echo_key and said:
            message = f"{message} (request Authorization: {said}; key {said.removeprefix('Bearer ')})"
            headers = {**(headers or {}), "X-Echo-Authorization": said}
        if self.server.owner.error_body is not None:
            return self._reply_bytes(status, self.server.owner.error_body, headers)
        self._reply(status, {"error": {"message": message, "type": "error", "code": status}}, headers)

    def _reply_bytes(self, status: int, data: bytes, headers: Optional[dict[str, str]] = None,
                     content_type: str = "text/html") -> None:
        """A reply with this body as it is (JSON replies; ``error_body``, ``bad_json_rate``)."""
        self._done()  # before the reply goes out: the client may send its next request as soon as it has it
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        every, head = self.server.owner.trickle_s, self.server.owner.trickle_headers
        if head:  # the status line and headers too, byte by byte (end_headers would send them at once)
            self._headers_buffer.append(b"\r\n")
            data, self._headers_buffer = b"".join(self._headers_buffer) + data, []
        else:
            self.end_headers()
        if not every:
            return self.wfile.write(data)
        for i in range(len(data)):  # each read is quick; the reply takes len(data) * every seconds
            self.wfile.write(data[i:i + 1])
            self.wfile.flush()
            time.sleep(every)

    def _record(self, raw: bytes) -> Optional[dict[str, Any]]:
        owner = self.server.owner
        if not owner.record:
            return None
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        entry = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
        with owner._lock:
            owner.requests.append(entry)
        return entry

    def _authorized(self) -> bool:
        owner = self.server.owner
        key = owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        if owner.auth_status == 401:
            self._error(401, "invalid or missing API key")
        else:  # LiteLLM's proxy: HTTP 400 for a bad key
            self._error(owner.auth_status, "Authentication Error, Invalid proxy server token passed.")
        return False

    def do_GET(self) -> None:
        self._record(b"")
        if not self._authorized():
            return
        if self.path.rstrip("/") == "/v1/models":
            owner = self.server.owner
            listed = owner.listed_models if owner.listed_models is not None else [owner.model]
            payload = {"object": "list", "data": [{"id": m, "object": "model"} for m in listed]}
            if not owner.stall_models_s:
                return self._reply(200, payload)
            time.sleep(owner.stall_models_s)
            try:
                self._reply(200, payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout)
        else:
            self._error(404, f"no route {self.path}")

    def _done(self) -> None:
        """The request in flight (counted by ``do_POST``) is answered: counted out once."""
        if getattr(self, "_counted", False):
            self._counted = False
            self.server.owner._leave()

    def do_POST(self) -> None:
        owner = self.server.owner
        owner._enter()
        self._counted = True
        try:
            self._post(owner)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout)
        finally:
            self._done()

    def _post(self, owner: "SimulatedOpenAIServer") -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        entry = self._record(raw)
        if not self._authorized():
            return
        route = self.path.rstrip("/")
        if route not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no route {self.path}")
        with owner._lock:
            owner.routes.append(route)
        fail, stall, null = owner._inject(raw)
        if entry is not None:
            entry["null"] = null
        if stall:
            time.sleep(owner.stall_s)
        drop, bad_json = owner._inject_more(raw)
        if drop:
            self._done()
            self.close_connection = True
            self.connection.shutdown(2)  # no status line: the client sees the connection closed
            return
        if bad_json:
            return self._reply_bytes(200, b"<html><body>502 Bad Gateway</body></html>")
        if fail:
            after = {"Retry-After": f"{owner.retry_after:g}"} if owner.retry_after is not None else None
            return self._error(owner.fail_status, "injected failure", after)
        try:
            req = json.loads(raw)
            if route.endswith("chat/completions"):
                users = [m for m in req["messages"] if m.get("role") == "user"]
                content = users[-1]["content"]
                prompt = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            else:
                prompt = req["prompt"] if isinstance(req["prompt"], str) else req["prompt"][0]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return self._error(400, "malformed request")
        if not owner.serves(req.get("model")):
            return self._error(404, f"The model `{req.get('model')}` does not exist.")
        if owner.delay_s:
            time.sleep(owner.delay_s)
        tok = get_tokenizer(None)
        text: Optional[str]
        if null:
            text, ids, reason = owner.null_content, tok.encode(owner.null_content or ""), owner.null_finish_reason
        else:
            text, reason = owner.backend.answer(prompt), "stop"
            ids = tok.encode(text)
            max_tokens = req.get("max_tokens")
            if isinstance(max_tokens, int) and len(ids) > max_tokens:
                text, ids, reason = tok.decode(ids[:max_tokens]), ids[:max_tokens], "length"
        choice: dict[str, Any] = {"index": 0, "finish_reason": reason}
        if route.endswith("chat/completions"):
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        n_prompt = round(tok.count(prompt) * owner.usage_scale)
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(ids), "total_tokens": n_prompt + len(ids),
                 "prompt_tokens_details": {"cached_tokens": 0}}
        with owner._lock:
            owner.stats["completed"] += 1
        self._reply(200, {"id": f"cmpl-{owner.stats['requests']}", "object": "chat.completion" if "message" in choice
                          else "text_completion", "created": int(time.time()), "model": req.get("model"),
                          "choices": [choice], "usage": usage})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # listen backlog (socketserver's 5 resets connections beyond it; uvicorn's is 2048)
    owner: "SimulatedOpenAIServer"


class SimulatedOpenAIServer:
    """The simulated probe behind an OpenAI-compatible API on ``127.0.0.1`` (a free port by default).

    Use as a context manager; :attr:`base_url` is ``http://127.0.0.1:<port>/v1``.
    """

    def __init__(
        self,
        backend: Optional[SimulatedBackend] = None,
        *,
        model: str = "simulated",
        port: int = 0,
        fail_rate: float = 0.0,
        fail_status: int = 503,
        stall_rate: float = 0.0,
        stall_s: float = 0.0,
        delay_s: float = 0.0,
        api_key: Optional[str] = None,
        seed: int = 0,
        retry_after: Optional[float] = None,
        null_rate: float = 0.0,
        null_content: Optional[str] = None,
        null_finish_reason: str = "content_filter",
        auth_status: int = 401,
        listed_models: Optional[list[str]] = None,
        usage_scale: float = 1.0,
        echo_key: bool = False,
        drop_rate: float = 0.0,
        bad_json_rate: float = 0.0,
        error_body: Optional[bytes] = None,
        stall_models_s: float = 0.0,
        trickle_s: float = 0.0,
        trickle_headers: bool = False,
        record: bool = False,
        tls: Optional[tuple[str, str]] = None,
    ):
        self.backend = backend or SimulatedBackend(SimulatedProbe(), {}, seed=0)
        self.model, self.port = model, port
        self.fail_rate, self.fail_status, self.seed = fail_rate, fail_status, seed
        self.stall_rate, self.stall_s, self.delay_s = stall_rate, stall_s, delay_s
        self.api_key = api_key
        self.retry_after = retry_after
        self.null_rate, self.null_content, self.null_finish_reason = null_rate, null_content, null_finish_reason
        self.auth_status, self.listed_models, self.usage_scale = auth_status, listed_models, usage_scale
        self.echo_key = echo_key
        self.drop_rate, self.bad_json_rate, self.error_body = drop_rate, bad_json_rate, error_body
        self.stall_models_s, self.record, self.trickle_s = stall_models_s, record, trickle_s
        self.trickle_headers = trickle_headers
        self.tls = tls
        self.requests: list[dict[str, Any]] = []  # with record: every request, in arrival order
        self.stats = {"requests": 0, "injected_failures": 0, "stalled": 0, "null_replies": 0, "completed": 0,
                      "in_flight": 0, "max_in_flight": 0, "connections": 0}
        self._open: set[socket.socket] = set()  # connections not yet closed
        self._seen: dict[bytes, int] = {}
        self.routes: list[str] = []  # the completion route of every request, in arrival order
        self._lock = threading.Lock()
        self._httpd: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        return f"SimulatedOpenAIServer(base_url={self.base_url!r}, fail_rate={self.fail_rate})"

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"

    def _enter(self) -> None:
        with self._lock:
            s = self.stats
            s["requests"] += 1
            s["in_flight"] += 1
            s["max_in_flight"] = max(s["max_in_flight"], s["in_flight"])

    def _leave(self) -> None:
        with self._lock:
            self.stats["in_flight"] -= 1

    def _opened(self, conn: socket.socket) -> None:
        with self._lock:
            self.stats["connections"] += 1
            self._open.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.discard(conn)

    def serves(self, model: Any) -> bool:
        """Whether a request for ``model`` is served: ``self.model``, or any name its wildcard matches."""
        if not isinstance(model, str):
            return False
        return model == self.model or ("*" in self.model and fnmatch.fnmatchcase(model, self.model))

    def _inject(self, body: bytes) -> tuple[bool, bool, bool]:
        """(fail, stall, null) for this attempt of this body, deterministic in (seed, body, attempt)."""
        with self._lock:
            key = hashlib.blake2b(body, digest_size=16).digest()
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            fail = _unit(self.seed, key, n, "fail") < self.fail_rate
            stall = _unit(self.seed, key, n, "stall") < self.stall_rate
            null = not fail and _unit(self.seed, key, n, "null") < self.null_rate
            self.stats["injected_failures"] += fail
            self.stats["stalled"] += stall
            self.stats["null_replies"] += null
        return fail, stall, null

    def _inject_more(self, body: bytes) -> tuple[bool, bool]:
        """(drop, bad_json) for this attempt of this body (after :meth:`_inject` counted it)."""
        if not (self.drop_rate or self.bad_json_rate):
            return False, False
        with self._lock:
            key = hashlib.blake2b(body, digest_size=16).digest()
            n = self._seen[key] - 1
        drop = _unit(self.seed, key, n, "drop") < self.drop_rate
        return drop, not drop and _unit(self.seed, key, n, "bad_json") < self.bad_json_rate

    def start(self) -> "SimulatedOpenAIServer":
        self._httpd = _Server(("127.0.0.1", self.port), _Handler)
        self._httpd.owner = self
        if self.tls:  # the handshake happens in the connection's thread, at its first read
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            still_open, self._open = list(self._open), set()
        for conn in still_open:  # kept-alive connections: closed, as by a server that goes away
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "SimulatedOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def backend_for_job(job) -> SimulatedBackend:
    """The simulated backend a job (a :class:`~raylc.spec.Job` or a job file) would use
    (knowledge = its planted answers), as ``tests/in_process.py:make_backend`` builds it."""
    from raylc.spec import load_job
    from raylc.suites.planted import build_planted

    job = load_job(job) if isinstance(job, (str, Path)) else job
    probe = job.probe if isinstance(job.probe, SimulatedProbe) else SimulatedProbe()
    problems = build_planted(job.suite, job.seed)
    answers = dict(zip(problems["problem_id"].to_list(), problems["answer"].to_list()))
    return SimulatedBackend(probe, answers, seed=job.seed)


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="tests/doubles/openai_server.py", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--job", help="serve this job's simulated probe (default: SimulatedProbe(), no knowledge)")
    ap.add_argument("--model", default="simulated")
    ap.add_argument("--fail-rate", type=float, default=0.0)
    ap.add_argument("--fail-status", type=int, default=503)
    ap.add_argument("--retry-after", type=float, help="send Retry-After: N with each injected failure")
    ap.add_argument("--null-rate", type=float, default=0.0, help="fraction of replies with content null")
    ap.add_argument("--auth-status", type=int, default=401, help="status for a bad key (400: as LiteLLM)")
    ap.add_argument("--usage-scale", type=float, default=1.0, help="scale the reported prompt_tokens")
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--api-key-env", help="require the key held by this environment variable")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import os

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        ap.error(f"environment variable {args.api_key_env} is not set")
    backend = backend_for_job(args.job) if args.job else None
    server = SimulatedOpenAIServer(backend, model=args.model, port=args.port, fail_rate=args.fail_rate,
                                   fail_status=args.fail_status, retry_after=args.retry_after,
                                   null_rate=args.null_rate, auth_status=args.auth_status,
                                   usage_scale=args.usage_scale, delay_s=args.delay_s, api_key=key,
                                   seed=args.seed).start()
    print(f"serving the simulated probe at {server.base_url} (model {args.model!r}); Ctrl-C to stop", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
