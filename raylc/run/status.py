"""What a run is doing, read from its manifest and lock alone (local or s3://): ``raylc status``
for one run (each stage's state; for inference the requests stored against planned, request
and token rates and an ETA) and ``raylc runs`` for a store's runs. A run whose manifest says a
stage is running but whose process is gone (killed, its node lost) is ``interrupted``."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Optional

import polars as pl

from raylc.io.errors import StoreError
from raylc.run.folder import MANIFEST, RunFolder, lock_alive, run_folders, store_kind
from raylc.run.manifest import Manifest
from raylc.run.progress import INFER, infer_progress


def _utc(seconds: Optional[float]) -> Optional[str]:
    """Epoch seconds as UTC text to the second; None for none, or for a time no calendar year holds."""
    try:
        return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        return None


def _when(value: Any) -> Optional[float]:
    """Epoch seconds of a manifest time (ISO text or a number)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return dt.datetime.fromisoformat(str(value)).timestamp()
    except (ValueError, OverflowError):  # not a time, or one that has no epoch seconds (year 1, +14:00)
        return None


def _since(now: float, value: Any) -> Optional[float]:
    """Seconds from a manifest time to ``now``; None where the manifest has none, or one that is
    not a time (a hand-edited manifest): unknown, never 0."""
    when = _when(value)
    return None if when is None else now - when


def _stage_names(manifest: Manifest) -> list[str]:
    """The run's stages in order: its plan (written when the run opens), else those it names."""
    return manifest.plan + [name for name in manifest.stages if name not in manifest.plan]


def stage_states(manifest: Manifest, alive: bool) -> dict[str, str]:
    """Each stage's state: the manifest's, except that a stage marked ``running`` by a process
    that is gone (``alive`` False) is ``interrupted``; stages not reached are ``pending``."""
    states = {}
    for name in _stage_names(manifest):
        record = manifest.stages.get(name)
        status = record.status if record is not None else "pending"
        states[name] = "interrupted" if status == "running" and not alive else status
    return states


def run_state(states: dict[str, str], alive: bool) -> str:
    """One word for the run: ``failed``, ``interrupted`` or ``stopped`` (at its prompt-token cap)
    if a stage is; ``done`` when every stage is; else ``running`` while its process lives,
    ``interrupted`` when it is gone."""
    values = set(states.values())
    for word in ("failed", "interrupted", "stopped"):
        if word in values:
            return word
    if values and values == {"done"}:
        return "done"
    return "running" if alive else "interrupted"


def run_status(folder: RunFolder, now: Optional[float] = None) -> dict[str, Any]:
    """The status of the run in ``folder``: run id, job, model, state, per-stage states, the
    inference progress, the budget a stage stopped at (``budget``: stage and
    :class:`~raylc.run.manifest.Budget`, or None) and the times (``age_s``: seconds since the
    last update, None when unknown); a :class:`StoreError` when there
    is no run there."""
    manifest = folder.manifest()
    if manifest is None:
        raise StoreError(f"{folder.uri()}: no raylc run here (no manifest.json; a run submitted with "
                         "--no-wait has one once it starts)")
    lock = folder.lock()
    alive = bool(lock) and lock_alive(lock)  # type: ignore[arg-type]
    states = stage_states(manifest, alive)
    now = time.time() if now is None else now
    return {
        # the run is its folder, what --run-id takes (a moved or copied run's manifest names another)
        "run_id": folder.run_id, "uri": folder.uri(), "job": manifest.job_name, "model": manifest.model,
        "state": run_state(states, alive), "stages": states,
        "seconds": {k: v.seconds for k, v in manifest.stages.items()},
        "rows": {k: v.rows for k, v in manifest.stages.items()},
        "infer": infer_progress(manifest.stages.get(INFER), states[INFER], now) if INFER in states else None,
        "budget": manifest.stopped(),
        "created_at": manifest.created_at, "updated_at": manifest.updated_at,
        "age_s": _since(now, manifest.updated_at),
    }


def list_runs(root: str, now: Optional[float] = None) -> pl.DataFrame:
    """One row per run in the store at ``root`` (a folder holding a manifest): run id, job,
    model, state, created (UTC, to the second), seconds since it was created (``age_s``) and
    since its last update (``updated_s``), newest first; a :class:`StoreError` when a local
    store does not exist."""
    kind = store_kind(root)
    if kind == "missing":
        raise StoreError(f"{root}: no such store (the folder does not exist)")
    if kind == "file":
        raise StoreError(f"{root}: not a store (a file, not a folder)")
    rows = []
    now = time.time() if now is None else now  # one instant for every run's ages
    for folder in run_folders(root):
        try:
            status = run_status(folder, now)
        except StoreError:
            if folder.has(MANIFEST):  # a run whose manifest this raylc cannot read: listed, not hidden
                rows.append({"run_id": folder.run_id, "state": "unreadable manifest"})
            continue  # else not a run (another folder in the store)
        rows.append({"run_id": folder.run_id, **{k: status[k] for k in ("job", "model", "state")},
                     "created": _utc(_when(status["created_at"])),
                     "age_s": _since(now, status["created_at"]), "updated_s": status["age_s"]})
    schema = {"run_id": pl.String, "job": pl.String, "model": pl.String, "state": pl.String,
              "created": pl.String, "age_s": pl.Float64, "updated_s": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort("age_s", nulls_last=True)
