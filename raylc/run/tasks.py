"""Ray tasks for per-task work (the DOLCE fits, LongScore per model and task): one task per
frame from the driver, results in order, a task's own error raised as itself."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

import polars as pl

from raylc.run.session import init_ray


def task_mapper(use_ray: Optional[bool], default: bool) -> Optional[Callable[..., list[Any]]]:
    """:func:`map_tasks` after joining RAY_ADDRESS (or starting a local Ray) when ``use_ray``
    (None: ``default``), else None (in process). For the commands that work on a table
    (``fit``, ``sensitivity``, ``longscore``)."""
    if not (default if use_ray is None else use_ray):
        return None
    init_ray(os.environ.get("RAY_ADDRESS"))
    return map_tasks


def map_tasks(fn: Callable[..., Any], frames: list[pl.DataFrame], *args: Any) -> list[Any]:
    """Run ``fn(frame, *args)`` as one Ray task per frame; results in input order. The shared
    ``args`` go to the object store once (not once per task); on a terminal a progress bar
    counts the finished tasks."""
    import ray

    remote = ray.remote(fn)
    shared = [ray.put(a) for a in args]
    refs = [remote.remote(frame, *shared) for frame in frames]
    if len(refs) > 1 and sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"{getattr(fn, '__name__', 'task')}: {len(refs)} Ray tasks", total=len(refs))
            pending = refs
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                bar.advance(task, len(done))
    return ray.get(refs)


def raising_own_errors(map_tasks: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """``map_tasks`` raising a task's own exception (Ray's ``RayTaskError.cause``)."""

    def mapped(fn: Callable[..., Any], items: list[Any], *args: Any) -> list[Any]:
        try:
            return map_tasks(fn, items, *args)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from None

    return mapped
