"""Run a job: each stage's table under ``<store>/<run_id>/<stage>/``, a manifest beside them.

Stages already marked done in the manifest of the same run (same job fingerprint) are
not run again, so re-running a crashed run picks up at the first unfinished stage.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import polars as pl

from raylc import __version__
from raylc.backends import make_backend
from raylc.pipeline import checkpoint, ray_exec, stages
from raylc.spec import Job
from raylc.store import Store

MANIFEST = "manifest.json"
LOCK = "_lock.json"
LOCK_STALE_S = 900.0  # a lock whose owner has not written for this long is taken over
OUTPUTS = {
    "build": ["build/problems.parquet"],
    "sample": ["sample/spans.parquet"],
    "infer": ["infer"],
    "score": ["score/observations.parquet"],
    "fit": ["fits/problems.parquet", "fits/tasks.parquet"],
    "report": ["report/categories.parquet", "report/summary.md", "report/categories.png", "report/lambda_k.png"],
}


class RunError(RuntimeError):
    """A run that cannot start or continue; the message is one line."""


class InferenceFailed(RunError):
    """More requests failed than ``inference.max_error_fraction`` allows (exit code 1)."""


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "raylc": __version__}
    for pkg in ("ray", "polars", "pyarrow", "numpy", "scipy", "pydantic", "diptest"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def default_run_id(job: Job) -> str:
    return f"{job.name}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}"


@dataclass
class Run:
    """A run folder and its manifest."""

    store: Store
    run_id: str
    manifest: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        """Write the manifest (last, after the tables it describes) and refresh the lock."""
        self.manifest["updated_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        self.store.write_json(self.manifest, self.run_id, MANIFEST)
        self.store.write_json(_lock_record(), self.run_id, LOCK)

    def acquire(self) -> None:
        """Take the run's lock; refuse while another live process holds it."""
        held = self.store.read_json(self.run_id, LOCK)
        if held and _lock_alive(held):
            raise RunError(
                f"{self.store.uri(self.run_id)}: run is in use by pid {held.get('pid')} on {held.get('host')} "
                f"since {held.get('started_at')} (lock {LOCK}); wait for it or choose another --run-id"
            )
        self.store.write_json(_lock_record(), self.run_id, LOCK)

    def release(self) -> None:
        held = self.store.read_json(self.run_id, LOCK)
        if held and held.get("pid") == os.getpid() and held.get("host") == socket.gethostname():
            self.store.delete(self.run_id, LOCK)

    def done(self, stage: str) -> bool:
        """Marked done in the manifest and every output present and readable (else redone)."""
        state = self.manifest.get("stages", {}).get(stage, {})
        if state.get("status") != "done":
            return False
        for rel in OUTPUTS[stage]:
            parts = rel.split("/")
            ok = self.store.table_ok(self.run_id, *parts) if rel.endswith(".parquet") or "." not in rel else self.store.exists(self.run_id, *parts)
            if not ok:
                return False
        return True

    def read(self, rel: str) -> pl.DataFrame:
        return self.store.read_table(self.run_id, *rel.split("/"))

    def write(self, df: pl.DataFrame, rel: str) -> None:
        self.store.write_table(df, self.run_id, *rel.split("/"))


_STARTED = dt.datetime.now(dt.timezone.utc).isoformat()


def _lock_record() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started_at": _STARTED, "heartbeat": time.time()}


def _lock_alive(held: dict[str, Any]) -> bool:
    """Whether the lock's owner may still be running: same host -> its pid exists; else a recent heartbeat."""
    if held.get("host") == socket.gethostname():
        if held.get("pid") == os.getpid():
            return False
        try:
            os.kill(int(held.get("pid", -1)), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, ValueError, OverflowError):
            return True
        return True
    return time.time() - float(held.get("heartbeat", 0)) < LOCK_STALE_S


def open_run(job: Job, run_id: Optional[str]) -> Run:
    store = Store(job.store.path)
    run_id = run_id or default_run_id(job)
    existing = store.read_json(run_id, MANIFEST)
    if existing is not None and existing.get("fingerprint") != job.fingerprint():
        raise RunError(
            f"{store.uri(run_id)}: run exists with a different job spec (fingerprint "
            f"{existing.get('fingerprint')} != {job.fingerprint()}); use another --run-id"
        )
    run = Run(store, run_id, existing or {})
    run.manifest.update(
        run_id=run_id,
        job=job.resolved(),
        fingerprint=job.fingerprint(),
        seed=job.seed,
        versions=_versions(),
    )
    run.manifest.setdefault("created_at", dt.datetime.now(dt.timezone.utc).isoformat())
    run.manifest.setdefault("stages", {})
    return run


def _stage(run: Run, name: str, fn: Callable[[], dict[str, int]], log: Callable[[str], None], upstream_redone: bool) -> bool:
    """Run one stage unless it (and everything upstream) is done already; True if it ran."""
    if not upstream_redone and run.done(name):
        log(f"[{name}] done already, skipped")
        return False
    run.manifest["stages"][name] = {"status": "running"}
    run.save()
    t0 = time.perf_counter()
    rows = fn()
    seconds = round(time.perf_counter() - t0, 3)
    run.manifest["stages"][name] = {"status": "done", "rows": rows, "seconds": seconds}
    run.save()
    log(f"[{name}] {', '.join(f'{k}={v}' for k, v in rows.items())} ({seconds:.1f} s)")
    return True


def run_job(job: Job, run_id: Optional[str] = None, log: Callable[[str], None] = print) -> Run:
    """Run every stage of ``job``; returns the finished :class:`Run`."""
    run = open_run(job, run_id)
    run.acquire()
    try:
        run.save()
        log(f"run {run.run_id} -> {run.store.uri(run.run_id)}")
        _run_stages(job, run, log)
    finally:
        run.release()
    return run


def _run_stages(job: Job, run: Run, log: Callable[[str], None]) -> None:
    def do_build() -> dict[str, int]:
        problems = stages.build(job)
        run.write(problems, "build/problems.parquet")
        return {"problems": problems.height}

    def do_sample() -> dict[str, int]:
        spans = stages.sample(run.read("build/problems.parquet"), job)
        run.write(spans, "sample/spans.parquet")
        return {"spans": spans.height}

    def do_infer() -> dict[str, int]:
        problems = run.read("build/problems.parquet")
        spans = checkpoint.with_request_ids(run.read("sample/spans.parquet"), problems, job)
        stored = checkpoint.load_completions(run.store, run.run_id)
        done = stored.filter(pl.col("error").is_null())["request_id"] if stored.height else pl.Series([], dtype=pl.String)
        pending = spans.filter(~pl.col("request_id").is_in(done.implode()))
        log(f"[infer] {spans.height - pending.height} completions kept from earlier attempts, {pending.height} to run")
        if pending.height:
            if job.probe.backend == "openai":  # fail fast, before any shard, when the endpoint is down
                make_backend(job, problems).check_endpoint()
            ray_exec.ensure_ray(job)
            try:
                ray_exec.check_gpus(job, log)
            except RuntimeError as exc:
                raise InferenceFailed(str(exc)) from None
            writer = checkpoint.ShardWriter(run.store, run.run_id, job.inference.shard_rows, job.inference.shard_seconds)
            try:
                for batch in ray_exec.infer_on_ray(pending, problems, job):
                    writer.add(batch)
            except Exception as exc:  # a failed actor pool: keep what finished, report the root cause
                writer.flush()
                raise InferenceFailed(
                    f"{job.probe.backend} inference failed: {ray_exec.root_cause(exc)} (finished requests are "
                    f"kept; re-run with --run-id {run.run_id} to continue)"
                ) from None
            writer.flush()
        completions = checkpoint.load_completions(run.store, run.run_id).join(
            spans.select("request_id"), on="request_id", how="semi")
        rows = checkpoint.accounting(completions, reused=spans.height - pending.height)
        if rows["errors"] > job.inference.max_error_fraction * spans.height:
            first = completions.filter(pl.col("error").is_not_null())["error"][0]
            raise InferenceFailed(
                f"{run.store.uri(run.run_id, 'infer')}: {rows['errors']} of {spans.height} requests failed "
                f"(allowed: {job.inference.max_error_fraction:.1%}), e.g. {first}; re-run with --run-id "
                f"{run.run_id} to retry only the failed ones"
            )
        return rows

    def do_score() -> dict[str, int]:
        keys = ["task", "problem_id", "C", "start"]
        problems = run.read("build/problems.parquet")
        spans = checkpoint.with_request_ids(run.read("sample/spans.parquet"), problems, job)
        completions = spans.join(run.read("infer").select("request_id", "completion", "error"), on="request_id", how="left")
        answered = completions.filter(pl.col("error").is_null() & pl.col("completion").is_not_null())
        obs = stages.score(answered.sort(keys), problems, job)
        run.write(obs, "score/observations.parquet")
        return {"observations": obs.height}

    def do_fit() -> dict[str, int]:
        ray_exec.ensure_ray(job)
        problems, tasks = stages.fit(run.read("score/observations.parquet"), job, mapper=ray_exec.map_tasks)
        run.write(problems, "fits/problems.parquet")
        run.write(tasks, "fits/tasks.parquet")
        return {"problems": problems.height, "tasks": tasks.height}

    def do_report() -> dict[str, int]:
        from raylc.report import write_report

        fits = run.read("fits/problems.parquet"), run.read("fits/tasks.parquet")
        tables = stages.report(*fits, run.read("build/problems.parquet"), run.read("score/observations.parquet"))
        write_report(run, tables, fits)
        return {name: t.height for name, t in tables.items()}

    redone = False  # a redone stage invalidates everything downstream of it
    for name, fn in zip(stages.STAGES, (do_build, do_sample, do_infer, do_score, do_fit, do_report)):
        redone = _stage(run, name, fn, log, redone) or redone
    run.manifest["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    run.save()
    from raylc.report import stage_table

    log(stage_table(run.manifest))
