"""A remote call with a total time limit. Socket timeouts (httpx's, urllib's) bound each
connect and each read, so a server that sends a byte every few seconds never trips them;
:func:`call_within` bounds the whole call in a thread of its own, and a :func:`bounded` httpx
client bounds each request of a thread within :func:`total_limit`."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, TypeVar

import httpcore
import httpx

T = TypeVar("T")


def call_within(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()`` in a daemon thread, waited for at most ``timeout_s`` seconds in all: its result,
    or its exception raised here; :class:`TimeoutError` when it has not returned by then (the
    thread is left to end on its own per-read timeouts, or with the process)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="raylc-call-within", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"no complete answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- httpx: a total limit on each request, headers included ---------------------------------

_LIMIT = threading.local()  # .end: time.monotonic() by which this thread's request must be done


@contextmanager
def total_limit(seconds: float) -> Iterator[None]:
    """Bound the reads and writes of this thread's requests on a :func:`bounded` client to
    ``seconds`` in all (the status line and headers included, which a per-read timeout does not
    bound either); past it a read or write raises httpcore's ``ReadTimeout`` /
    ``WriteTimeout``, which httpx raises as its own."""
    before = getattr(_LIMIT, "end", None)
    _LIMIT.end = time.monotonic() + seconds if before is None else min(before, time.monotonic() + seconds)
    try:
        yield
    finally:
        _LIMIT.end = before


def _left(timeout: Optional[float], late: type[Exception]) -> Optional[float]:
    """The per-read ``timeout`` cut to what is left of the thread's :func:`total_limit`."""
    end = getattr(_LIMIT, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise late("the request's total time limit passed")
    return left if timeout is None else min(timeout, left)


class _LimitedStream(httpcore.NetworkStream):
    """A connection whose every read and write ends by its thread's :func:`total_limit`."""

    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: Optional[str] = None,
                  timeout: Optional[float] = None) -> httpcore.NetworkStream:
        try:
            left = _left(timeout, httpcore.ConnectTimeout)
        except httpcore.ConnectTimeout:
            self._stream.close()  # as httpcore's own streams do when the handshake fails
            raise
        return _LimitedStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _LimitedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with :class:`_LimitedStream` connections."""

    def __init__(self, backend: httpcore.NetworkBackend):
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None, local_address: Optional[str] = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _LimitedStream(self._backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                        local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _LimitedStream(self._backend.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                                socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bounded(client: httpx.Client) -> bool:
    """Give ``client``'s connection pools (its own and its proxies') connections that keep
    :func:`total_limit`; True when every pool took it. httpx has no public door for a network
    backend, so this sets httpcore's ``ConnectionPool._network_backend`` (httpcore 1.0) before
    the pool opens a connection; a pool without it is left as it is (False)."""
    took = True
    for transport in (client._transport, *client._mounts.values()):
        if transport is None:  # a NO_PROXY host: no transport of its own
            continue
        pool = getattr(transport, "_pool", None)
        if pool is None or not isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
            took = False
            continue
        if not isinstance(pool._network_backend, _LimitedBackend):
            pool._network_backend = _LimitedBackend(pool._network_backend)
    return took
