"""The infer stage's progress record in a run's manifest, which ``raylc status`` reads
(:func:`infer_progress`): requests stored before this attempt, to run, done
so far, errors, tokens and times."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import polars as pl

INFER = "infer"  # the stage whose progress the manifest records while it runs


class InferProgress:
    """This attempt's record ``manifest["stages"]["infer"]["progress"]``, opened with the
    requests ``reused`` from earlier attempts; ``save`` writes the manifest (and so refreshes
    the run's lock: a long infer stage stays visibly alive). ``log``: where a progress line goes
    (requests stored of those to run, the rate since the first shard, the time left), at most
    once per ``every_s`` seconds and once more when every request is stored: raylc's own count,
    in place of Ray Data's bars, whose totals are estimates."""

    def __init__(self, manifest: dict[str, Any], reused: int, save: Callable[[], None],
                 log: Optional[Callable[[str], None]] = None, every_s: float = 10.0):
        now = time.time()
        self._log, self._every_s, self._logged_at = log, every_s, now
        self.record: dict[str, Any] = {
            "reused": reused, "to_run": 0, "done": 0, "errors": 0, "prompt_tokens": 0, "generated_tokens": 0,
            "started_at": now, "updated_at": now}
        manifest["stages"].setdefault(INFER, {"status": "running"})["progress"] = self.record
        self._save = save

    def planned(self, rows: int) -> None:
        """Count ``rows`` more requests to run (saved with the next :meth:`stored`, or by the caller)."""
        self.record["to_run"] += rows

    def stored(self, batch: pl.DataFrame) -> None:
        """Count a flushed batch of completions (errors apart, tokens of successes only) and save."""
        progress = self.record
        ok = batch["error"].is_null() if "error" in batch.columns else pl.Series([True] * batch.height)
        progress["done"] += batch.height
        progress["errors"] += batch.height - int(ok.sum())
        for col in ("prompt_tokens", "generated_tokens"):
            if col in batch.columns:
                progress[col] += int(batch.filter(ok)[col].fill_null(0).sum() or 0)
        progress["updated_at"] = time.time()
        if "first_at" not in progress:  # the steady rate counts from the first shard (after Ray's and engines' start)
            progress["first_at"], progress["first_done"] = progress["updated_at"], progress["done"]
        self._save()
        finished = progress["done"] >= progress["to_run"]
        if self._log is not None and (finished or progress["updated_at"] - self._logged_at >= self._every_s):
            self._logged_at = progress["updated_at"]
            self._log(self.line())

    def line(self) -> str:
        """``[infer] 45,000/220,428 requests stored (20%), about 2 min left``: this attempt's
        count and the time left at the rate since the first shard, as ``raylc status`` gives them."""
        now = self.record["updated_at"]
        p = infer_progress({"progress": self.record}, "running", now)
        done, total = p["stored"] - self.record["reused"], p["planned"] - self.record["reused"]
        text = f"[infer] {done:,}/{total:,} requests stored ({done / max(total, 1):.0%})"
        if done < total and "eta_s" in p:
            text += f", about {duration(p['eta_s'])} left"
        if p.get("errors"):
            text += f", {p['errors']:,} errors"
        return text


def infer_progress(stage: dict[str, Any], state: str, now: float) -> dict[str, Any]:
    """Requests stored and planned, rates and (while ``state`` is running) an ETA from the infer
    stage's progress record (:class:`raylc.run.progress.InferProgress`): the ETA uses the
    rate since the first stored shard, which leaves out Ray's and the engines' start; seconds
    since the last shard, or, before any, since the stage started. For a finished stage, its counts."""
    progress = stage.get("progress")
    if stage.get("status") == "done" or not progress:
        rows = stage.get("rows", {})
        return {"stored": rows.get("requests"), "planned": rows.get("requests")}
    started, updated = float(progress["started_at"]), float(progress["updated_at"])
    elapsed = max(updated - started, 1e-9)
    done, to_run = int(progress["done"]), int(progress["to_run"])
    rate = done / elapsed if done else 0.0
    out = {
        "stored": int(progress["reused"]) + done, "planned": int(progress["reused"]) + to_run,
        "errors": int(progress["errors"]), "requests_per_s": rate,
        "prompt_tokens_per_s": int(progress["prompt_tokens"]) / elapsed if done else 0.0,
        "generated_tokens_per_s": int(progress["generated_tokens"]) / elapsed if done else 0.0,
    }
    if done:
        out["last_update_s"] = now - updated
    else:
        out["waiting_s"] = now - started
    first_at, first_done = progress.get("first_at"), int(progress.get("first_done") or 0)
    steady = 0.0
    if first_at and updated > float(first_at) and done > first_done:
        steady = (done - first_done) / (updated - float(first_at))
    if state == "running" and (steady or rate) > 0:  # after the first shard: the start-up is not in the rate
        out["eta_s"] = max(to_run - done, 0) / (steady or rate)
    return out


def duration(seconds: Optional[float]) -> str:
    """``42 s``, ``3 min``, ``2.5 h``, ``4.0 d``."""
    if seconds is None:
        return ""
    for unit, size, limit in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 172800)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}" if unit != "h" else f"{seconds / size:.1f} h"
    return f"{seconds / 86400:.1f} d"
