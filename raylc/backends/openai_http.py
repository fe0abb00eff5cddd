"""OpenAI-compatible HTTP backend (``vllm serve``, hosted APIs), standard library only.

``base_url`` is the API root including the version, e.g. ``http://host:8000/v1``;
requests go to ``{base_url}/chat/completions`` (mode ``chat``: the prompt is one user
message) or ``{base_url}/completions`` (mode ``completions``). Per actor, a thread pool of
``concurrency`` workers sends the requests; each is retried on HTTP 408/429/5xx, timeouts
and connection errors up to ``max_retries`` times, sleeping
``min(60, backoff_s * 2**attempt) * U(0.5, 1)`` (jitter from a RNG seeded by the job seed
and the request's position; a larger ``Retry-After`` wins). A request that still fails
becomes a row with ``completion`` None and ``error`` naming the endpoint and the status.

The API key is read from the environment variable named by ``api_key_env`` and is only
ever put in the ``Authorization`` header: it is not in ``repr``, errors, results, or the
pickled backend (re-read from the environment when unpickled on a Ray worker).

If ``max_model_len`` is set, prompts are fitted client-side (:mod:`raylc.truncation`)
with ``tokenizer`` (default: the approximate offline tokenizer; use ``hf:<name>`` for
exact counts; the server's chat template tokens are not counted, so leave a margin).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

from raylc.backends.base import (
    Backend, BackendUnavailable, Generation, MaxTokens, Prompt, generation, prompt_parts, prompt_text, request_max_tokens,
)
from raylc.spec import OpenAIProbe
from raylc.tokenize import get_tokenizer
from raylc.truncation import PromptTooLong, fit_to_window

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_SLEEP_S = 60.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class _Retry(Exception):
    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


class _Fatal(Exception):
    pass


def _retry_after(headers: Any) -> Optional[float]:
    try:
        return float(headers.get("Retry-After")) if headers is not None and headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None


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
        self.endpoint = self.base_url + ("/chat/completions" if probe.mode == "chat" else "/completions")
        self._setup()

    def _setup(self) -> None:
        env = self.probe.api_key_env
        if env and not os.environ.get(env):
            raise BackendUnavailable(f"environment variable {env} (probe.api_key_env) is not set")
        self._key: Optional[str] = os.environ.get(env) if env else None
        self._tokenizer = get_tokenizer(self.probe.tokenizer)
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

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
        """JSON response of one request; :class:`_Retry` or :class:`_Fatal` on failure."""
        req = urllib.request.Request(url, data=body, headers=self._headers(), method="POST" if body else "GET")
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            status, after = exc.code, _retry_after(exc.headers)
            detail = ""
            try:
                payload = json.loads(exc.read() or b"{}")
                err = payload.get("error", payload.get("message", "")) if isinstance(payload, dict) else ""
                detail = err.get("message", "") if isinstance(err, dict) else str(err or "")
            except Exception:
                pass
            msg = f"HTTP {status}" + (f" ({_one_line(self._scrub(detail))})" if detail else "")
            if status in RETRY_STATUS:
                raise _Retry(msg, after) from None
            raise _Fatal(msg) from None
        except (TimeoutError, socket.timeout):
            raise _Retry(f"timed out after {timeout:g} s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise _Retry(f"timed out after {timeout:g} s") from None
            reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
            raise _Retry(f"connection error ({_one_line(self._scrub(reason))})") from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise _Retry(f"connection error ({type(exc).__name__})") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise _Fatal("response is not JSON") from None

    def _body(self, prompt: str, max_tokens: int) -> bytes:
        p, s = self.probe, self.probe.sampling
        body: dict[str, Any] = {"model": p.model}
        if p.mode == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(temperature=s.temperature, top_p=s.top_p, max_tokens=max_tokens)
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        return json.dumps(body).encode()

    def _parse(self, data: Any, prompt: str, latency: float, cut: int) -> Generation:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") if self.probe.mode == "chat" else choice.get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            return generation(prompt_tokens=self._tokenizer.count(prompt), latency_s=latency,
                              error=f"{self.endpoint}: unexpected response (no choices)", truncated_tokens=cut)
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        completion_tokens = usage.get("completion_tokens")
        return generation(
            text,
            prompt_tokens=usage.get("prompt_tokens") if usage.get("prompt_tokens") is not None
            else self._tokenizer.count(prompt),
            generated_tokens=completion_tokens if completion_tokens is not None else self._tokenizer.count(text or ""),
            cached_tokens=details.get("cached_tokens"),
            finish_reason=choice.get("finish_reason"),
            latency_s=latency,
            truncated_tokens=cut,
        )

    def _request(self, index: int, prompt: str, cut: int, max_tokens: int) -> Generation:
        rng = random.Random(f"{self.seed}:{index}")
        body = self._body(prompt, max_tokens)
        t0 = time.perf_counter()
        attempts, last = 0, ""
        while True:
            attempts += 1
            try:
                data = self._send(self.endpoint, body, self.probe.timeout_s)
            except _Fatal as exc:
                last = str(exc)
                break
            except _Retry as exc:
                last = str(exc)
                if attempts > self.probe.max_retries:
                    break
                delay = min(MAX_SLEEP_S, self.probe.backoff_s * 2 ** (attempts - 1)) * rng.uniform(0.5, 1.0)
                if exc.retry_after is not None:
                    delay = max(delay, min(MAX_SLEEP_S, exc.retry_after))
                time.sleep(delay)
            else:
                return self._parse(data, prompt, time.perf_counter() - t0, cut)
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return generation(
            prompt_tokens=self._tokenizer.count(prompt), latency_s=time.perf_counter() - t0,
            error=self._scrub(f"{self.endpoint}: {last}{tries}"), truncated_tokens=cut,
        )

    # --- public ---------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None) -> list[Generation]:
        """One result dict per prompt, in order; at most ``concurrency`` requests in flight."""
        p = self.probe
        limits = request_max_tokens(max_tokens, len(prompts), p.sampling.max_tokens)
        fitted: list[Optional[str]] = []
        cuts: list[int] = []
        results: list[Optional[Generation]] = [None] * len(prompts)
        for i, (prompt, limit) in enumerate(zip(prompts, limits)):
            text, cut = prompt_text(prompt), 0
            if p.max_model_len is not None:
                try:
                    text, cut = fit_to_window(*prompt_parts(prompt), self._tokenizer, p.max_model_len, limit, p.truncation)
                except PromptTooLong as exc:
                    results[i] = generation(prompt_tokens=self._tokenizer.count(text), error=f"prompt too long: {exc}")
                    text = None
            fitted.append(text)
            cuts.append(cut)
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            with ThreadPoolExecutor(max_workers=min(p.concurrency, len(todo)), thread_name_prefix="raylc-openai") as pool:
                done = pool.map(lambda i: self._request(i, fitted[i], cuts[i], limits[i]), todo)  # type: ignore[arg-type]
                for i, r in zip(todo, done):
                    results[i] = r
        return results  # type: ignore[return-value]

    def check_endpoint(self) -> None:
        """Raise a one-line :class:`BackendUnavailable` naming the endpoint if it cannot serve ``model``."""
        url = self.base_url
        try:
            data = self._send(f"{url}/models", None, min(self.probe.timeout_s, 10.0))
        except (_Retry, _Fatal) as exc:
            msg = str(exc)
            if msg.startswith("HTTP 404"):
                return  # no /models route: reachable, cannot list models
            if msg.startswith(("HTTP 401", "HTTP 403")):
                where = f"${self.probe.api_key_env}" if self.probe.api_key_env else "no api_key_env set"
                raise BackendUnavailable(f"OpenAI endpoint {url} rejected the request: {msg} (API key: {where})") from None
            raise BackendUnavailable(f"OpenAI endpoint {url} is unavailable: {msg}") from None
        models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
        if models and self.probe.model not in models:
            raise BackendUnavailable(
                f"OpenAI endpoint {url} does not serve model {self.probe.model!r} (serves: {', '.join(map(str, models[:10]))})"
            )
