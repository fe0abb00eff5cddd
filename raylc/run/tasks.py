"""Ray tasks for per-task work (the DOLCE fits, LongScore per model and task): one task per
frame from the driver, results in order, a task's own error raised as itself, and a limit on
how long the driver waits without any task finishing."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack, suppress
from typing import Any, Callable, Optional

import polars as pl

from raylc.run.session import RayUnavailable, init_ray

NO_PROGRESS_S = 1800.0  # the default limit without a finished task (Ray Data's no-progress default)


class TasksStalled(RayUnavailable):
    """No Ray task of a :func:`map_tasks` call finished within its limit (no node to run it,
    or a task that hangs); the message is one line. The pending tasks were cancelled."""


def task_mapper(use_ray: Optional[bool], default: bool) -> Optional[Callable[..., list[Any]]]:
    """:func:`map_tasks` after joining RAY_ADDRESS (or starting a local Ray) when ``use_ray``
    (None: ``default``), else None (in process). For the commands that work on a table
    (``fit``, ``sensitivity``, ``longscore``)."""
    if not (default if use_ray is None else use_ray):
        return None
    init_ray(os.environ.get("RAY_ADDRESS"))
    return map_tasks


def map_tasks(fn: Callable[..., Any], frames: list[pl.DataFrame], *args: Any,
              no_progress_s: Optional[float] = None) -> list[Any]:
    """Run ``fn(frame, *args)`` as one Ray task per frame; results in input order. The shared
    ``args`` go to the object store once (not once per task); on a terminal a progress bar
    counts the finished tasks. A task's error is raised as soon as it arrives;
    :class:`TasksStalled` when no task finishes for ``no_progress_s`` seconds (None:
    :data:`NO_PROGRESS_S`; a job's ``ray.no_progress_timeout_s``). Either way, and on Ctrl-C,
    the tasks still pending are cancelled."""
    import ray

    limit = NO_PROGRESS_S if no_progress_s is None else no_progress_s
    name = getattr(fn, "__name__", "task")
    remote = ray.remote(fn)
    shared = [ray.put(a) for a in args]
    refs = [remote.remote(frame, *shared) for frame in frames]
    with ExitStack() as stack:
        bar = None
        if len(refs) > 1 and sys.stderr.isatty():
            from rich.progress import Progress

            bar = stack.enter_context(Progress(transient=True))
            counted = bar.add_task(f"{name}: {len(refs)} Ray tasks", total=len(refs))
        pending, results, index = refs, [None] * len(refs), {ref: i for i, ref in enumerate(refs)}
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=limit)
                if not done:
                    raise TasksStalled(
                        f"{name}: no Ray task finished in {limit:g} s ({len(pending)} of {len(refs)} still pending, "
                        "now cancelled): is a node with a free CPU alive? A job's ray.no_progress_timeout_s sets "
                        "this limit; a table command runs in process with --no-ray")
                for ref, value in zip(done, ray.get(done)):  # a task's error, now rather than after the others
                    results[index[ref]] = value
                if bar is not None:
                    bar.advance(counted, len(done))
        except BaseException:  # a stall, a task's error, Ctrl-C: the others stop too
            for ref in pending:
                with suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
    return results


def raising_own_errors(map_tasks: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """``map_tasks`` raising a task's own exception (Ray's ``RayTaskError.cause``)."""

    def mapped(fn: Callable[..., Any], items: list[Any], *args: Any) -> list[Any]:
        try:
            return map_tasks(fn, items, *args)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from None

    return mapped
