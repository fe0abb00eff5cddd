"""The mapper contract shared by the table-level computations (DOLCE fits, sensitivity grids,
LongScore aggregation): ``mapper(fn, frames, *args)`` returns ``[fn(frame, *args) for frame
in frames]`` in input order, in this process (:func:`in_process`) or elsewhere, e.g.
:func:`raylc.run.tasks.map_tasks` (one Ray task per frame)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import polars as pl

__all__ = ["Mapper", "in_process"]

#: ``mapper(fn, frames, *args) -> [fn(frame, *args) for frame in frames]``.
Mapper = Callable[..., list]


def in_process(fn: Callable[..., Any], frames: Sequence[pl.DataFrame], *args: Any) -> list[Any]:
    """The default mapper: ``[fn(frame, *args) for frame in frames]`` in this process."""
    return [fn(frame, *args) for frame in frames]
