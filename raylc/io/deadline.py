"""A remote call with a total time limit. Socket timeouts (httpx's, urllib's) bound each
connect and each read, so a server that sends a byte every few seconds never trips them;
:func:`call_within` bounds the whole call."""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

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
