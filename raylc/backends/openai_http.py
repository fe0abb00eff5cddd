"""OpenAI-compatible HTTP backend (``vllm serve``, hosted APIs) on one pooled httpx client.

``base_url`` is the API root including the version, e.g. ``http://host:8000/v1``;
requests go to ``{base_url}/chat/completions`` (mode ``chat``: the prompt is one user
message) or ``{base_url}/completions`` (mode ``completions``). Per actor, a thread pool of
``concurrency`` workers sends the requests through one ``httpx.Client`` that keeps up to
``concurrency`` connections open between requests (HTTP/1.1 keep-alive: no TCP and TLS
handshake per request; an idle connection is dropped after :data:`KEEPALIVE_S`, before
uvicorn's, hence ``vllm serve``'s, 5 s); :meth:`OpenAIBackend.close` closes them. Every wait on
the server (connecting, sending, each read, a free pooled connection) is limited to ``timeout_s``,
and a reply must be complete within twice that of the request (headers or a body that trickle in).
Each request is retried on HTTP 408, 429, 500, 502, 503 and 504, timeouts
and connection errors while retries remain (attempt ``n <= max_retries``) **or** while both the
request and the endpoint's current outage are younger than ``retry_budget_s`` (default 300 s,
longer than a vLLM server takes to restart). The outage is timed per backend (worker) from the
first failure after its last reply, so a restart is waited out, while an endpoint that stays
down costs each later request ``max_retries`` retries only. A request thus gives up after at
most ``retry_budget_s`` + one sleep (<= 75 s) + twice ``timeout_s`` (its last attempt's whole
reply), or after its ``max_retries``
retries if those take longer; its error says so ("...; gave up after 7 attempts over 301 s
(probe.max_retries 5, probe.retry_budget_s 300)"). Before retry ``n`` (1, 2, ...) it sleeps
``b = min(60, backoff_s * 2**(n-1)) * U(0.5, 1)``; when the reply has a ``Retry-After``
header (seconds or an HTTP date, capped at 60 s) it sleeps ``max(retry_after, b) * U(1, 1.25)``
instead: never less than the server asked, and spread over a quarter of it so that workers
told the same ``Retry-After`` do not all come back at the same moment. The jitter comes from a
RNG seeded by the job seed and the request's position, so the sleeps are the same on every run
with the same seed and replies. A request that still fails becomes a row with ``completion``
None and ``error`` naming the endpoint and the status.

A reply whose content is null or empty (``finish_reason: content_filter``, a reasoning model
that ran out of ``max_tokens``, a proxy that lost the text) is an error row too (``completion``
None, ``error`` "<endpoint>: empty completion (content null, finish_reason ...)"), so that it
counts against ``inference.max_error_fraction`` and is retried on resume; it is not retried
at once (the same request mostly gets the same reply). With ``probe.empty_ok: true`` it is an
answer instead (an empty string, scored as such).

Proxies and CA certificates come from the environment (``HTTPS_PROXY``, ``NO_PROXY``,
``SSL_CERT_FILE``; the system's CA store, as Python's ``ssl`` module has it), except that a
loopback ``base_url`` (127.0.0.1, localhost, ::1) is never sent through a proxy. Redirects are
followed (``Authorization`` is not sent to another host).

The API key is read from the environment variable named by ``api_key_env`` and is only
ever put in the ``Authorization`` header: it is not in ``repr``, errors, results, or the
pickled backend (re-read from the environment when unpickled on a Ray worker). A request
refused with HTTP 401/403, or another 4xx whose body speaks of an API key, authentication or
authorization (LiteLLM answers a bad key with HTTP 400), is reported as "HTTP 400 (invalid
API key?): check the key in $VAR" naming the variable, never the key.

``check_endpoint`` (run by the driver before any request, and by ``raylc check``) lists
``{base_url}/models`` once and refuses a ``model`` it does not list, unless a listed name is a
wildcard matching it (LiteLLM's ``local/*``) or ``probe.check_model`` is false; the endpoint
itself is checked either way. It returns the listed names and the model's window when the
server reports one (vLLM's ``/v1/models`` entries carry ``max_model_len``).

Usage check: the first time the server's ``prompt_tokens`` for a prompt and raylc's own count
(``tokenizer``, the one truncation uses) differ by more than ``usage_check_factor`` times and by
more than :data:`USAGE_SLACK_TOKENS` tokens (room for a chat template), the backend prints one
warning line on stderr (once per backend instance, i.e. per worker) and keeps the mismatch in
:attr:`OpenAIBackend.usage_mismatch`; the stored ``prompt_tokens`` stay the server's.

If ``max_model_len`` is set, prompts are fitted client-side (:mod:`raylc.text.truncation`)
with ``tokenizer`` (default: the approximate offline tokenizer; use ``hf:<name>`` for
exact counts; the server's chat template tokens are not counted, so leave a margin).
"""

from __future__ import annotations

import datetime
import email.utils
import fnmatch
import json
import math
import os
import random
import re
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import httpx

from raylc.backends.base import (
    Backend,
    BackendUnavailable,
    Generation,
    MaxTokens,
    Prompt,
    RawFlags,
    generation,
    prompt_parts,
    prompt_text,
    request_max_tokens,
    request_raw,
)
from raylc.backends.config import OpenAIProbe
from raylc.io.deadline import bounded, call_within, total_limit
from raylc.text.tokenize import get_tokenizer
from raylc.text.truncation import PromptTooLong, fit_to_window

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_SLEEP_S = 60.0
#: a Retry-After sleep is max(retry_after, backoff) times U(1, RETRY_AFTER_SPREAD)
RETRY_AFTER_SPREAD = 1.25
#: token counts closer than this are never flagged by the usage check (chat template tokens)
USAGE_SLACK_TOKENS = 64
#: seconds an idle pooled connection is kept (below uvicorn's default keep-alive of 5 s, so that
#: the client drops it before ``vllm serve`` does)
KEEPALIVE_S = 4.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: an error body that says the key is the problem, whatever the status
_AUTH_RE = re.compile(r"api[ _-]?key|authenticat|unauthori[sz]|credential|bearer", re.IGNORECASE)


class EndpointRefused(BackendUnavailable):
    """:meth:`OpenAIBackend.check_endpoint`'s refusal; ``key`` is the probe field at fault
    (``base_url``, ``model`` or ``api_key_env``)."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class EndpointInfo:
    """What ``GET /models`` told: the names listed (None: no ``/models`` route) and the context
    window the server reports for ``model`` (vLLM's ``max_model_len``; None if it does not)."""

    models: Optional[tuple[str, ...]]
    max_model_len: Optional[int]


class _Retry(Exception):
    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


class _Fatal(Exception):
    pass


class _Auth(_Fatal):
    """The server refused the API key (or its absence)."""


def _retry_after(headers: Any) -> Optional[float]:
    """``Retry-After`` in seconds (a number or an HTTP date), None when absent or unreadable."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # "-0000": UTC
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - time.time())


def _error_detail(raw: bytes) -> tuple[str, str]:
    """(the error message of a JSON error body, the body as text for the auth test)."""
    text = raw[:4000].decode("utf-8", "replace")
    try:
        payload = json.loads(raw or b"{}")
        err = payload.get("error", payload.get("message", "")) if isinstance(payload, dict) else ""
        detail = err.get("message", "") if isinstance(err, dict) else str(err or "")
    except Exception:
        detail = ""
    return detail, text


def _count(value: Any) -> Optional[int]:
    """A token count from a reply's usage, None unless it is a non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _reason(exc: BaseException) -> str:
    """What a connection failure says: the OS's words (``Connection refused``) when an OSError
    caused it, else the exception's message, else its type."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpenAIBackend(Backend):
    """``generate(prompts)`` against an OpenAI-compatible endpoint, ``concurrency`` requests at a time."""

    name = "openai"

    def __init__(self, probe: OpenAIProbe, seed: int = 0):
        self.probe = probe
        self.seed = seed
        self.base_url = probe.base_url.rstrip("/")
        self.endpoint = self._endpoint(probe.mode == "chat")
        self._setup()

    def _setup(self) -> None:
        env = self.probe.api_key_env
        if env and not os.environ.get(env):
            raise BackendUnavailable(f"environment variable {env} (probe.api_key_env) is not set")
        self._key: Optional[str] = os.environ.get(env) if env else None
        self._tokenizer = get_tokenizer(self.probe.tokenizer)
        self._lock = threading.Lock()
        #: the first (server's, raylc's) prompt token counts that failed the usage check, if any
        self.usage_mismatch: Optional[tuple[int, int]] = None
        #: ``time.monotonic()`` of the first retryable failure since the last reply (None: no outage)
        self._failing_since: Optional[float] = None
        self._client = self._new_client()

    def _new_client(self) -> httpx.Client:
        """The pooled client: ``concurrency`` kept connections, no proxy for a loopback host."""
        n = self.probe.concurrency
        url = httpx.URL(self.base_url)
        client = httpx.Client(
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=KEEPALIVE_S),
            timeout=self.probe.timeout_s,
            follow_redirects=True,
            trust_env=url.host not in _LOOPBACK,
            verify=ssl.create_default_context() if url.scheme == "https" else True,
        )
        bounded(client)  # each request within total_limit (_send), its headers included
        return client

    def _http(self) -> httpx.Client:
        """The client, opened again if :meth:`close` closed it."""
        if self._client.is_closed:
            with self._lock:
                if self._client.is_closed:
                    self._client = self._new_client()
        return self._client

    def close(self) -> None:
        """Close the kept connections (a later request opens new ones)."""
        self._client.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"probe": self.probe, "seed": self.seed, "base_url": self.base_url, "endpoint": self.endpoint}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def __repr__(self) -> str:
        return (
            f"OpenAIBackend(base_url={self.base_url!r}, model={self.probe.model!r}, mode={self.probe.mode!r}, "
            f"concurrency={self.probe.concurrency})"
        )

    # --- HTTP -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _send(self, url: str, body: Optional[bytes], timeout: float) -> Any:
        """JSON response of one request; :class:`_Retry` or :class:`_Fatal` on failure. A reply
        not all arrived ``2 * timeout`` seconds after the request was sent (its headers and body
        trickling in, each read quick) is a :class:`_Retry` (:func:`raylc.io.deadline.total_limit`;
        the body alone if the client's pools did not take :func:`~raylc.io.deadline.bounded`);
        each connect and read alone is bounded by ``timeout``."""
        deadline = time.monotonic() + 2 * timeout
        try:
            with total_limit(2 * timeout), self._http().stream(
                    "POST" if body else "GET", url, content=body, headers=self._headers(), timeout=timeout) as resp:
                status = resp.status_code
                if 200 <= status < 300:
                    raw = bytearray()
                    for chunk in resp.iter_bytes():  # the body's limit, should an httpcore not take bounded()
                        raw += chunk
                        if time.monotonic() > deadline:
                            raise _Retry(f"no complete answer within {2 * timeout:g} s")
                else:
                    try:
                        detail, text = _error_detail(resp.read() or b"")
                    except Exception:  # an error body that cannot be read: the status alone
                        detail, text = "", ""
        except httpx.TimeoutException:
            if time.monotonic() >= deadline:
                raise _Retry(f"no complete answer within {2 * timeout:g} s") from None
            raise _Retry(f"timed out after {timeout:g} s") from None
        except httpx.TooManyRedirects:
            raise _Fatal("too many redirects") from None
        except httpx.DecodingError as exc:  # a body whose Content-Encoding does not decode
            raise _Fatal(f"response is not readable ({_one_line(self._scrub(str(exc)))})") from None
        except (httpx.TransportError, OSError) as exc:
            if isinstance(exc, (TimeoutError, socket.timeout)):
                raise _Retry(f"timed out after {timeout:g} s") from None
            raise _Retry(f"connection error ({_one_line(self._scrub(_reason(exc)))})") from None
        if not 200 <= status < 300:
            after = _retry_after(resp.headers)
            said = f" ({_one_line(self._scrub(detail))})" if detail else ""
            if status in RETRY_STATUS:
                raise _Retry(f"HTTP {status}{said}", after) from None
            if status in (401, 403) or (400 <= status < 500 and _AUTH_RE.search(text)):
                env = self.probe.api_key_env
                hint = (f"check the key in ${env}" if env else
                        "no key was sent; set probe.api_key_env to the environment variable holding it")
                raise _Auth(f"HTTP {status} (invalid API key?): {hint}"
                            + (f"; server said{said}" if said else "")) from None
            raise _Fatal(f"HTTP {status}{said}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise _Fatal("response is not JSON") from None

    def _endpoint(self, chat: Optional[bool] = None) -> str:
        """``/chat/completions`` or ``/completions`` (``chat`` None: the probe's ``mode``)."""
        chat = self.probe.mode == "chat" if chat is None else chat
        return self.base_url + ("/chat/completions" if chat else "/completions")

    def _body(self, prompt: str, max_tokens: int, chat: Optional[bool] = None) -> bytes:
        p, s = self.probe, self.probe.generation
        body: dict[str, Any] = {"model": p.model}
        if self._endpoint(chat).endswith("/chat/completions"):
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(temperature=s.temperature, top_p=s.top_p, max_tokens=max_tokens)
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        return json.dumps(body).encode()

    def _check_usage(self, reported: int, ours: int, endpoint: str) -> None:
        """Warn once (per backend instance) when the server's prompt token count (for a request
        sent to ``endpoint``) is off ours by more than ``usage_check_factor`` times and
        :data:`USAGE_SLACK_TOKENS` tokens."""
        factor = self.probe.usage_check_factor
        hi, lo = max(reported, ours), min(reported, ours)
        if factor is None or hi - lo <= USAGE_SLACK_TOKENS or hi <= factor * max(lo, 1):
            return
        with self._lock:
            if self.usage_mismatch is not None:
                return
            self.usage_mismatch = (reported, ours)
        print(
            f"warning: {endpoint} reported {reported} prompt tokens for a prompt of {ours} tokens by raylc's count "
            f"(tokenizer {self.probe.tokenizer or 'default'}), more than probe.usage_check_factor = {factor:g}x "
            "apart: the prompt_tokens stored in infer/ are the server's and may be wrong (check the server and "
            "probe.tokenizer; reported once per actor)",
            file=sys.stderr, flush=True,
        )

    def _parse(self, data: Any, prompt: str, latency: float, cut: int, chat: Optional[bool] = None) -> Generation:
        endpoint = self._endpoint(chat)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") if endpoint.endswith("/chat/completions") else choice.get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            return generation(prompt_tokens=self._tokenizer.count(prompt), latency_s=latency,
                              error=f"{endpoint}: unexpected response (no choices)", truncated_tokens=cut)
        if isinstance(text, list):  # content parts
            text = "".join(str(part.get("text") or "") for part in text if isinstance(part, dict))
        elif text is not None and not isinstance(text, str):
            text = str(text)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        completion_tokens, reported, cached = (
            _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens")),
            _count(details.get("cached_tokens")))
        ours = None
        if reported is None or (self.probe.usage_check_factor is not None and self.usage_mismatch is None):
            ours = self._tokenizer.count(prompt)
            if reported is not None:
                self._check_usage(reported, ours, endpoint)
        finish, error = choice.get("finish_reason"), None
        if not (text or "").strip():
            if self.probe.empty_ok:
                text = text or ""
            else:
                why = "max_tokens ran out first" if finish == "length" else "probe.empty_ok: true accepts empty answers"
                error = (f"{endpoint}: empty completion (content {'null' if text is None else 'empty'}, "
                         f"finish_reason {finish}; {why})")
                text = None
        return generation(
            text,
            prompt_tokens=reported if reported is not None else ours,
            generated_tokens=completion_tokens if completion_tokens is not None else self._tokenizer.count(text or ""),
            cached_tokens=cached,
            finish_reason=finish,
            latency_s=latency,
            error=error,
            truncated_tokens=cut,
        )

    def _request(self, index: int, prompt: str, cut: int, max_tokens: int, chat: Optional[bool] = None) -> Generation:
        p = self.probe
        rng = random.Random(f"{self.seed}:{index}")
        body, endpoint = self._body(prompt, max_tokens, chat), self._endpoint(chat)
        t0 = time.perf_counter()
        attempts, last, gave_up = 0, "", False
        while True:
            attempts += 1
            try:
                data = self._send(endpoint, body, p.timeout_s)
            except _Fatal as exc:
                self._outage(False)
                last = str(exc)
                break
            except _Retry as exc:
                last = str(exc)
                if not self._retry(attempts, time.perf_counter() - t0):
                    gave_up = True
                    break
                delay = min(MAX_SLEEP_S, p.backoff_s * 2 ** min(attempts - 1, 30)) * rng.uniform(0.5, 1.0)
                if exc.retry_after is not None:  # never earlier than asked, and not all workers at once
                    delay = max(delay, min(MAX_SLEEP_S, exc.retry_after)) * rng.uniform(1.0, RETRY_AFTER_SPREAD)
                time.sleep(delay)
            else:
                self._outage(False)
                return self._parse(data, prompt, time.perf_counter() - t0, cut, chat)
        elapsed = time.perf_counter() - t0
        if gave_up and (attempts > 1 or p.retry_budget_s > 0):
            last += (f"; gave up after {attempts} attempt{'s' if attempts > 1 else ''} over "
                     f"{elapsed:.{1 if elapsed < 100 else 0}f} s "
                     f"(probe.max_retries {p.max_retries}, probe.retry_budget_s {p.retry_budget_s:g})")
        elif attempts > 1:
            last += f" after {attempts} attempts"
        return generation(
            prompt_tokens=self._tokenizer.count(prompt), latency_s=elapsed,
            error=self._scrub(f"{endpoint}: {last}"), truncated_tokens=cut,
        )

    def _outage(self, failed: bool) -> float:
        """Seconds the endpoint has been failing (0 after a reply, which ends the outage)."""
        now = time.monotonic()
        with self._lock:
            if not failed:
                self._failing_since = None
                return 0.0
            if self._failing_since is None:
                self._failing_since = now
            return now - self._failing_since

    def _retry(self, attempts: int, elapsed: float) -> bool:
        """Whether a request that failed (retryably) on attempt ``attempts``, ``elapsed`` s after it
        started, is retried: while retries remain, or while both it and the outage are younger
        than ``retry_budget_s`` (module docstring)."""
        outage = self._outage(True)
        budget = self.probe.retry_budget_s
        return attempts <= self.probe.max_retries or (elapsed < budget and outage < budget)

    # --- public ---------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None,
                 raw: RawFlags = None) -> list[Generation]:
        """One result dict per prompt, in order; at most ``concurrency`` requests in flight. In
        ``chat`` mode a prompt whose ``raw`` flag is set goes to ``/completions`` as it is (no
        chat template), as LongBench v1 ``pred.py`` sends its few-shot and code datasets."""
        p = self.probe
        limits = request_max_tokens(max_tokens, len(prompts), p.generation.max_tokens)
        chat = [False if r else None for r in request_raw(raw, len(prompts))]  # None: the probe's mode
        fitted: list[Optional[str]] = []
        cuts: list[int] = []
        results: list[Optional[Generation]] = [None] * len(prompts)
        for i, (prompt, limit) in enumerate(zip(prompts, limits)):
            text, cut = prompt_text(prompt), 0
            if p.max_model_len is not None:
                try:
                    text, cut = fit_to_window(*prompt_parts(prompt), self._tokenizer, p.max_model_len, limit,
                                              p.truncation)
                except PromptTooLong as exc:
                    results[i] = generation(prompt_tokens=self._tokenizer.count(text), latency_s=None,
                                            error=f"prompt too long: {exc}")  # nothing sent: not timed
                    text = None
            fitted.append(text)
            cuts.append(cut)
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            workers = min(p.concurrency, len(todo))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="raylc-openai") as pool:
                done = pool.map(lambda i: self._request(i, fitted[i], cuts[i], limits[i], chat[i]), todo)  # type: ignore[arg-type]
                for i, r in zip(todo, done):
                    results[i] = r
        return results  # type: ignore[return-value]

    def check_endpoint(self, section: str = "probe") -> EndpointInfo:
        """Raise a one-line :class:`EndpointRefused` naming the endpoint if it cannot serve ``model``
        (one ``GET /models``, at most ``min(timeout_s, 10)`` s a read and twice that in all,
        :func:`raylc.io.deadline.call_within`); else what ``/models`` told."""
        url = self.base_url
        limit = min(self.probe.timeout_s, 10.0)
        try:
            data = call_within(lambda: self._send(f"{url}/models", None, limit), 2 * limit)
        except TimeoutError as exc:
            raise EndpointRefused(f"OpenAI endpoint {url} is unavailable: {exc}", "base_url") from None
        except _Auth as exc:
            raise EndpointRefused(f"OpenAI endpoint {url} rejected the request: {exc}", "api_key_env") from None
        except (_Retry, _Fatal) as exc:
            msg = str(exc)
            if msg.startswith("HTTP 404"):
                return EndpointInfo(None, None)  # no /models route: reachable, cannot list models
            raise EndpointRefused(f"OpenAI endpoint {url} is unavailable: {msg}", "base_url") from None
        listing = data.get("data") if isinstance(data, dict) else None
        entries = [m for m in listing if isinstance(m, dict)] if isinstance(listing, list) else []
        model = self.probe.model
        listed = [str(m.get("id")) for m in entries if m.get("id") is not None]
        window = next((_count(m.get("max_model_len")) for m in entries if m.get("id") == model), None)
        info = EndpointInfo(tuple(listed), window or None)
        if not self.probe.check_model:
            return info
        if listed and not any(m == model or ("*" in m and fnmatch.fnmatchcase(model, m)) for m in listed):
            raise EndpointRefused(
                f"OpenAI endpoint {url} does not serve model {model!r} (serves: {', '.join(listed[:10])}); "
                f"set {section}.check_model: false if it routes names it does not list", "model"
            )
        return info
