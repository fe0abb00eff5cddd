"""A stage's progress record in a run's manifest (:class:`raylc.run.manifest.Progress`), which
``raylc status`` reads for the infer stage (:func:`infer_progress`): requests stored before this
attempt, to run, done so far, errors, tokens and times."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import polars as pl

from raylc.run.manifest import Manifest, Progress, StageRecord

INFER = "infer"  # the stage whose progress ``raylc status`` shows


class InferProgress:
    """This attempt's record of inference during ``stage`` (``manifest.stages[stage].progress``),
    opened with the requests ``reused`` from earlier attempts; ``save`` writes the manifest (and
    so refreshes the run's lock: a long infer stage stays visibly alive). ``log``: where a
    progress line goes (requests stored of those to run, the time left as :func:`infer_progress`
    estimates it), at most once per ``every_s`` seconds and once more when every request is stored:
    raylc's own count, in place of Ray Data's bars, whose totals are estimates. ``label`` starts
    the line (``[infer]``, ``[judge]``); ``clock`` gives the time (epoch seconds)."""

    def __init__(self, manifest: Manifest, reused: int, save: Callable[[], None],
                 log: Optional[Callable[[str], None]] = None, every_s: float = 10.0, stage: str = INFER,
                 label: str = INFER, clock: Optional[Callable[[], float]] = None):
        self._clock = clock or time.time
        now = self._clock()
        self._log, self._every_s, self._logged_at, self._label = log, every_s, now, label
        self.record = Progress(reused=reused, started_at=now, updated_at=now)
        manifest.stages.setdefault(stage, StageRecord(status="running")).progress = self.record
        self._save = save

    def save(self) -> None:
        """Write the manifest with this record (the planned count, before the first completion)."""
        self._save()

    def planned(self, rows: int) -> None:
        """Count ``rows`` more requests to run (saved with the next :meth:`stored`, or by the caller)."""
        self.record.to_run += rows

    def stored(self, batch: pl.DataFrame) -> None:
        """Count a flushed batch of completions (errors apart, tokens of successes only) and save."""
        progress = self.record
        ok = batch["error"].is_null() if "error" in batch.columns else pl.Series([True] * batch.height)
        progress.done += batch.height
        progress.errors += batch.height - int(ok.sum())
        for col in ("prompt_tokens", "generated_tokens"):
            if col in batch.columns:
                setattr(progress, col, getattr(progress, col) + int(batch.filter(ok)[col].fill_null(0).sum() or 0))
        progress.updated_at = self._clock()
        progress.recent = _thinned([*(progress.recent or []), (progress.updated_at, progress.done)])
        self._save()
        finished = progress.done >= progress.to_run
        if self._log is not None and (finished or progress.updated_at - self._logged_at >= self._every_s):
            self._logged_at = progress.updated_at
            self._log(self.line())

    def line(self) -> str:
        """``[infer] 45,000/220,428 requests stored (20%), about 2 min left``: this attempt's
        count and the time left, as ``raylc status`` gives them."""
        p = infer_progress(StageRecord(status="running", progress=self.record), "running", self.record.updated_at)
        done, total = p["stored"] - self.record.reused, p["planned"] - self.record.reused
        text = f"[{self._label}] {done:,}/{total:,} requests stored ({done / max(total, 1):.0%})"
        if done < total and "eta_s" in p:
            text += f", about {duration(p['eta_s'])} left"
        if p.get("errors"):
            text += f", {p['errors']:,} errors"
        return text


RECENT_POINTS = 64  # shard points kept for the ETA's window, spread over the attempt


def _thinned(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """``points`` (oldest first) without the inner point whose neighbours lie closest together
    while there are more than :data:`RECENT_POINTS`: the first and the newest stay, and the rest
    stay spread evenly over the attempt."""
    while len(points) > RECENT_POINTS:
        gap = min(range(1, len(points) - 1), key=lambda i: points[i + 1][0] - points[i - 1][0])
        points = points[:gap] + points[gap + 1:]
    return points


def eta_rate(progress: Progress, now: float) -> float:
    """Requests per second for the ETA: those stored from the newest shard point (the last shard
    aside) at least half the attempt's elapsed time old, else from the stage's start, up to
    ``now``. A burst of shards moves it little, a stall lowers it steadily, and the start-up leaves
    the window once the run has gone on twice as long as its first shard took."""
    since = now - (now - progress.started_at) / 2
    t0, d0 = progress.started_at, 0
    for t, done in (progress.recent or [])[:-1]:
        if t <= since:
            t0, d0 = t, done
    return (progress.done - d0) / (now - t0) if now > t0 else 0.0


def infer_progress(stage: Optional[StageRecord], state: str, now: float) -> dict[str, Any]:
    """Requests stored and planned, rates and (while ``state`` is running) an ETA (at
    :func:`eta_rate`) from the infer stage's progress record (:class:`InferProgress`); seconds
    since the last shard, or, before any, since the stage started. For a finished stage, its
    counts (None: not started)."""
    progress = stage.progress if stage is not None else None
    if stage is None or stage.status == "done" or progress is None:
        rows = (stage.rows if stage is not None else None) or {}
        return {"stored": rows.get("requests"), "planned": rows.get("requests")}
    started, updated = progress.started_at, progress.updated_at
    elapsed = max(updated - started, 1e-9)
    done, to_run = progress.done, progress.to_run
    rate = done / elapsed if done else 0.0
    out: dict[str, Any] = {
        "stored": progress.reused + done, "planned": progress.reused + to_run,
        "errors": progress.errors, "requests_per_s": rate,
        "prompt_tokens_per_s": progress.prompt_tokens / elapsed if done else 0.0,
        "generated_tokens_per_s": progress.generated_tokens / elapsed if done else 0.0,
    }
    if done:
        out["last_update_s"] = now - updated
    else:
        out["waiting_s"] = now - started
    eta = eta_rate(progress, max(now, updated)) if done else 0.0
    if state == "running" and eta > 0:
        out["eta_s"] = max(to_run - done, 0) / eta
    return out


def duration(seconds: Optional[float]) -> str:
    """``42 s``, ``3 min``, ``2.5 h``, ``4.0 d``."""
    if seconds is None:
        return ""
    for unit, size, limit in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}" if unit != "h" else f"{seconds / size:.1f} h"
    return f"{seconds / 86400:.1f} d"
