"""The infer stage's progress record in a run's manifest, which ``raylc status`` reads
(:func:`raylc.run.status.infer_progress`): requests stored before this attempt, to run, done
so far, errors, tokens and times."""

from __future__ import annotations

import time
from typing import Any, Callable

import polars as pl

INFER = "infer"  # the stage whose progress the manifest records while it runs


class InferProgress:
    """This attempt's record ``manifest["stages"]["infer"]["progress"]``, opened with the
    requests ``reused`` from earlier attempts; ``save`` writes the manifest (and so refreshes
    the run's lock: a long infer stage stays visibly alive)."""

    def __init__(self, manifest: dict[str, Any], reused: int, save: Callable[[], None]):
        now = time.time()
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
