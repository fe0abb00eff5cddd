"""The run skeleton: one run folder ``<store>/<run_id>/``, its manifest, lock and stage loop.

An :class:`Evaluation` (DOLCE, :mod:`raylc.dolce.evaluation`; length sweeps,
:mod:`raylc.sweep.evaluation`) names its stages, their outputs and one function per stage;
:func:`run_job` runs them in order. Stages already marked done in the manifest of the same
run (same job fingerprint) are not run again, so re-running a crashed run picks up at the
first unfinished stage. The stage functions reach storage, inference and Ray only through
the :class:`Run` they are given: its tables are those of its folder (:class:`raylc.run.folder.RunFolder`),
and the infer stage's progress record is kept by :class:`raylc.run.progress.InferProgress`.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import io
import os
import platform
import signal
import socket
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, NamedTuple, Optional, Protocol, Sequence

import numpy as np
import polars as pl

from raylc import __version__
from raylc.backends.registry import backend_of
from raylc.io.names import UnsafeName, path_segment
from raylc.io.store import Store, StoreUnavailable
from raylc.run import checkpoint, ray_exec
from raylc.run.folder import RunFolder
from raylc.run.inference import PROBLEM_ROW_GROUP
from raylc.run.progress import InferProgress
from raylc.spec import Job

MANIFEST = "manifest.json"
LOCK = "_lock.json"
LOCK_STALE_S = 900.0  # a lock whose owner has not written for this long is taken over


class RunError(RuntimeError):
    """A run that cannot start or continue; the message is one line: whatever a cause brings in
    (an engine's log line, a Ray traceback's text) has its lines joined by " / "."""

    def __init__(self, message: object = "") -> None:
        super().__init__(" / ".join(ln.strip() for ln in str(message).splitlines() if ln.strip()))


class InferenceFailed(RunError):
    """More requests failed than ``inference.max_error_fraction`` allows (exit code 1)."""


class NothingWritten(StoreUnavailable):
    """The store failed before the run wrote anything: nothing to resume (exit code 1)."""


Rows = dict[str, int]  #: what a stage reports: counts for the manifest and the log


class Stage(NamedTuple):
    """One stage of an evaluation: its name, the run-relative outputs that must exist for it to
    count as done (a folder, a Parquet file or another file), and its function. An evaluation
    may give it as a plain ``(name, outputs, fn)`` tuple."""

    name: str
    outputs: tuple[str, ...]
    fn: Callable[["Run"], Rows]


class Evaluation(Protocol):
    """What a family implements once (DOLCE, length sweeps): the table its build stage makes
    from the job (checked before anything is written), its stages in order, the plan of what a
    run would send, the report tables it writes, and how to print them."""

    def build(self, job: Job) -> pl.DataFrame: ...

    def stages(self, job: Job) -> Sequence[Stage]: ...

    def plan(self, job: Job, budget_tokens: Optional[int] = None, **options: Any) -> Any: ...

    def tokenizer_spec(self, job: Job) -> Optional[str]: ...

    def request_lengths(self, job: Job, tokenizer: Any, samples_cap: int) -> tuple[Any, Any, float]: ...

    def report_tables(self, job: Job) -> tuple[str, ...]: ...

    def print_report(self, tables: dict[str, pl.DataFrame]) -> None: ...


class RunInterrupted(Exception):
    """SIGINT or SIGTERM ended the run: a one-line message; ``exit_code`` is 128 + the signal
    (130, 143). The stage in progress is ``interrupted`` in the manifest, the lock released."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class _Signalled(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread during :func:`run_job`: the stage unwinds as on
    Ctrl-C (``except Exception`` does not catch it, ``finally`` blocks run)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM (Ray Jobs' ``ray job stop``) raise :class:`_Signalled` in the main
    thread; a second one while the run cleans up exits at once. Previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if fired:
            os.write(2, f"{signal.Signals(signum).name} again: exiting without cleanup\n".encode())
            os._exit(128 + signum)
        fired.append(signum)
        raise _Signalled(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _interrupted(run: Optional["Run"], signum: int) -> RunInterrupted:
    """The one line for an interrupted run: the stage, the requests stored (with a completion,
    which a resumed run skips) and how to resume."""
    how = "interrupted" if signum == signal.SIGINT else f"interrupted ({signal.Signals(signum).name})"
    if run is None:
        return RunInterrupted(f"{how} before the run started; nothing was written", signum)
    try:
        stored = f"{checkpoint.completed_keys(run.store, run.run_id).size} requests stored"
    except Exception:  # the store itself may be what failed; the line still says how to resume
        stored = "stored requests kept"
    where = f"during {run.interrupted}" if run.interrupted else "between stages"
    return RunInterrupted(f"{how} {where}; {stored}; re-run with --run-id {run.run_id} to resume", signum)


def check_store(root: str) -> None:
    """A local store must be a folder this process can write (it is created when missing): else
    one :class:`RunError` line, before anything runs or is written. An ``s3://`` store is checked
    by the run's first write (:class:`NothingWritten`)."""
    if "://" in root:
        return
    path = os.path.abspath(root)
    near = path
    while not os.path.exists(near) and os.path.dirname(near) != near:
        near = os.path.dirname(near)  # the folder the store will be created in
    if not os.path.isdir(near):
        what = "is a file" if near == path else f"is inside a file ({near})"
        raise RunError(f"{root}: the store {what}, not a folder (store.path or --store); nothing was written")
    if not os.access(near, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(near).f_flag & os.ST_RDONLY)
        why = "read-only file system" if read_only else "permission denied"
        where = "" if near == path else f" ({near})"
        raise RunError(f"{root}: the store is not writable{where}: {why}; nothing was written")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "raylc": __version__}
    for pkg in ("ray", "polars", "pyarrow", "numpy", "scipy", "pydantic", "diptest"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def default_run_id(job: Job) -> str:
    """``<job name>-<UTC time>``, a safe path segment (:func:`raylc.io.names.path_segment`; raises
    :class:`RunError` when the job's name makes it unsafe, e.g. a leading '.' or too long)."""
    run_id = f"{job.name}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    try:
        return path_segment(run_id, "run id (from the job's name)")
    except UnsafeName as exc:
        raise RunError(str(exc)) from None


@dataclass
class Run(RunFolder):
    """A run: its folder's tables (:class:`RunFolder`: ``read``, ``write``, ``write_parts``,
    ``iter_rows``, ``num_rows``), its manifest and lock, and what a stage function needs of the
    run layer: the job, the log, the inference path (request table -> Ray Data -> checkpoint
    shards), the stored completions, and Ray."""

    manifest: dict[str, Any] = field(default_factory=dict)
    interrupted: Optional[str] = None  # the stage a signal interrupted (:func:`run_job`)
    job: Optional[Job] = None
    log: Callable[[str], None] = print
    built: Optional[pl.DataFrame] = None  # the build stage's table, made before the run wrote anything
    PROBLEM_ROW_GROUP: ClassVar[int] = PROBLEM_ROW_GROUP  # row groups of a problems table the inference path reads

    # ---- manifest and lock ----------------------------------------------------------------
    def save(self) -> None:
        """Write the manifest (last, after the tables it describes) and refresh the lock."""
        self.manifest["updated_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        self.store.write_json(self.manifest, self.run_id, MANIFEST)
        self.store.write_json(_lock_record(), self.run_id, LOCK)

    def acquire(self) -> None:
        """Take the run's lock; refuse while another live process holds it."""
        held = self.store.read_json(self.run_id, LOCK)
        if held and lock_alive(held):
            raise RunError(
                f"{self.store.uri(self.run_id)}: run is in use by pid {held.get('pid')} on {held.get('host')} "
                f"since {held.get('started_at')} (lock {LOCK}); wait for it or choose another --run-id"
            )
        self.store.write_json(_lock_record(), self.run_id, LOCK)

    def release(self) -> None:
        held = self.store.read_json(self.run_id, LOCK)
        if held and held.get("pid") == os.getpid() and held.get("host") == socket.gethostname():
            self.store.delete(self.run_id, LOCK)

    def done(self, stage: Stage) -> bool:
        """Marked done in the manifest and every output present and readable (else redone)."""
        state = self.manifest.get("stages", {}).get(stage.name, {})
        return state.get("status") == "done" and all(self.has(rel) for rel in stage.outputs)

    # ---- inference and Ray, for the stage functions ---------------------------------------
    def completed(self) -> "np.ndarray":
        """Keys of the requests stored with a completion (:func:`checkpoint.completed_keys`)."""
        return checkpoint.completed_keys(self.store, self.run_id)

    is_completed = staticmethod(checkpoint.is_completed)

    def completions(self) -> pl.DataFrame:
        """Every stored generation, one row per request (:func:`checkpoint.load_completions`)."""
        return checkpoint.load_completions(self.store, self.run_id)

    def shards(self) -> Iterator[pl.DataFrame]:
        """The stored checkpoint shards, one frame each."""
        return checkpoint.iter_shards(self.store, self.run_id)

    def infer(self, pending: Iterable[pl.DataFrame], table: str = "", reused: int = 0) -> None:
        """Send ``pending`` request rows through the probe (:func:`infer_requests`); ``table``:
        the run-relative suite table (DOLCE problems that span references are rendered from, a
        sweep's samples); ``reused``: the stage's requests already stored (for the progress
        ``raylc status`` shows)."""
        infer_requests(self, pending, table=tuple(table.split("/")) if table else (), reused=reused)

    def inference_rows(self, reused: int, total: int) -> Rows:
        """The infer stage's counts from the stored shards; :class:`InferenceFailed` when more of
        the ``total`` requests failed than ``inference.max_error_fraction`` allows."""
        rows, first = checkpoint.stored_accounting(self.store, self.run_id, reused)
        check_errors(self, rows, total, first)
        return rows

    def mapper(self) -> Callable[..., list[Any]]:
        """A mapper of per-task work, ``mapper(fn, items, *args)``: one Ray task per item from
        the driver (:func:`ray_exec.map_tasks`; Ray joined or started), results in order. An
        error raised by ``fn`` is raised as itself, not Ray's wrapper."""
        ray_exec.ensure_ray(self.job)  # type: ignore[arg-type]
        return _raising_own_errors(ray_exec.map_tasks)

    def generate(self, prompts: pl.Series, job: Job) -> pl.DataFrame:
        """Generations for ``prompts`` from ``job``'s probe on Ray (the judge's calls)."""
        ray_exec.ensure_ray(self.job)  # type: ignore[arg-type]
        return ray_exec.generate_on_ray(prompts, job)


def _raising_own_errors(map_tasks: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """``map_tasks`` raising a task's own exception (Ray's ``RayTaskError.cause``)."""

    def mapped(fn: Callable[..., Any], items: list[Any], *args: Any) -> list[Any]:
        try:
            return map_tasks(fn, items, *args)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from None

    return mapped


_STARTED = dt.datetime.now(dt.timezone.utc).isoformat()


def _lock_record() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started_at": _STARTED, "heartbeat": time.time()}


def lock_alive(held: dict[str, Any]) -> bool:
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
    try:  # the run's folder: nothing is ever written outside <store>/<run_id>/
        run_id = path_segment(run_id, "run id") if run_id else default_run_id(job)
    except UnsafeName as exc:
        raise RunError(str(exc)) from None
    existing = store.read_json(run_id, MANIFEST)
    if existing is not None and existing.get("fingerprint") != job.fingerprint():
        raise RunError(
            f"{store.uri(run_id)}: run exists with a different job spec (fingerprint "
            f"{existing.get('fingerprint')} != {job.fingerprint()}); use another --run-id"
        )
    run = Run(store, run_id, existing or {}, job=job)
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


def _progress(run: Run, name: str) -> dict[str, Any]:
    """The stage's progress record, kept when it fails or is interrupted (``raylc status``)."""
    progress = run.manifest["stages"].get(name, {}).get("progress")
    return {"progress": progress} if progress else {}


def _stage(run: Run, stage: Stage, upstream_redone: bool) -> bool:
    """Run one stage unless it (and everything upstream) is done already; True if it ran."""
    name = stage.name
    if not upstream_redone and run.done(stage):
        run.log(f"[{name}] done already, skipped")
        return False
    run.manifest["stages"][name] = {"status": "running"}
    run.save()
    t0 = time.perf_counter()
    try:
        rows = stage.fn(run)
    except ValueError as exc:  # the stage's data cannot go on (a family's one-line message)
        run.manifest["stages"][name] = {**_progress(run, name), "status": "failed",
                                        "seconds": round(time.perf_counter() - t0, 3)}
        with suppress(Exception):
            run.save()
        raise RunError(str(exc)) from exc
    except KeyboardInterrupt:  # SIGINT or SIGTERM (run_job): recorded, and redone on resume
        run.interrupted = name
        run.manifest["stages"][name] = {**_progress(run, name), "status": "interrupted",
                                        "seconds": round(time.perf_counter() - t0, 3)}
        with suppress(Exception):
            run.save()
        raise
    seconds = round(time.perf_counter() - t0, 3)
    run.manifest["stages"][name] = {"status": "done", "rows": rows, "seconds": seconds}
    run.save()
    counts = ", ".join(f"{k}={'unknown' if v is None else v}" for k, v in rows.items())
    run.log(f"[{name}] {counts} ({seconds:.1f} s)")
    return True


def write_shards(run: Run, batches: Iterable[pl.DataFrame], progress: InferProgress) -> None:
    """Write ``batches`` (a lazy stream from the actor pool) as shards as they come, each flush
    counted in ``progress``. First the backend's checks: its endpoint before Ray starts (fail
    fast, before any shard), the cluster (GPUs) once Ray is up; a failed actor pool keeps what
    finished and raises :class:`InferenceFailed` with its root cause."""
    job: Job = run.job  # type: ignore[assignment]
    backend = backend_of(job.probe)
    backend.check_endpoint(job)
    ray_exec.ensure_ray(job)
    try:
        backend.check_cluster(job, run.log)
    except RuntimeError as exc:
        raise InferenceFailed(str(exc)) from None
    writer = checkpoint.ShardWriter(run.store, run.run_id, job.inference.shard_rows, job.inference.shard_seconds,
                                    on_flush=progress.stored)
    try:
        for batch in batches:
            writer.add(batch)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: keep what finished
        writer.flush()
        raise
    except Exception as exc:  # a failed actor pool: keep what finished, report the root cause
        writer.flush()
        cause = ray_exec.root_cause(exc)
        raise InferenceFailed(
            f"{job.probe.backend} inference failed: {cause} (finished requests are "
            f"kept; re-run with --run-id {run.run_id} to continue)"
        ) from None
    writer.flush()


def infer_requests(run: Run, pending: Iterable[pl.DataFrame], table: tuple[str, ...] = (), reused: int = 0) -> None:
    """The one inference path: the ``pending`` request rows (chunks) become a request table in
    the run folder (``requests/<attempt>/``), which Ray Data reads in blocks on the workers and
    streams through the probe's prepare and engine stages (:func:`ray_exec.stream_requests`)
    into checkpoint shards; the table is removed when the stream ends. ``table``: the
    run-relative path parts of the suite's built table (:class:`ray_exec.RequestSource`); ``reused``:
    the requests stored by earlier attempts (:class:`InferProgress`)."""
    job: Job = run.job  # type: ignore[assignment]
    progress = InferProgress(run.manifest, reused, run.save, log=run.log)

    def counted(chunks: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        for chunk in chunks:
            progress.planned(chunk.height)
            yield chunk

    files = checkpoint.write_requests(run.store, run.run_id, counted(pending), ray_exec.block_rows(job))
    run.save()  # the planned count, before the first completion
    try:
        if files:
            source = ray_exec.RequestSource(run.store.root, files, table=(run.run_id, *table) if table else ())
            write_shards(run, ray_exec.stream_requests(source, job), progress)
    finally:
        run.store.delete(run.run_id, checkpoint.REQUEST_DIR)


def check_errors(run: Run, rows: dict[str, int], total: int, first: Optional[str]) -> None:
    """Raise :class:`InferenceFailed` when more of the ``total`` requests failed than
    ``inference.max_error_fraction`` allows (``first``: one of the errors)."""
    job: Job = run.job  # type: ignore[assignment]
    if rows["errors"] > job.inference.max_error_fraction * total:
        raise InferenceFailed(
            f"{run.store.uri(run.run_id, 'infer')}: {rows['errors']} of {total} requests failed "
            f"(allowed: {job.inference.max_error_fraction:.1%}), e.g. {first}; re-run with --run-id "
            f"{run.run_id} to retry only the failed ones"
        )


def prebuild(job: Job, evaluation: Evaluation, run: Run, build: Stage) -> Optional[pl.DataFrame]:
    """The build stage's table when the run's build is still to do, else None. Built before the
    run writes anything, so a bad data file or pool is one :class:`RunError` line and leaves no
    run folder behind."""
    if run.done(build):
        return None
    try:
        return evaluation.build(job)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def run_job(job: Job, evaluation: Evaluation, run_id: Optional[str] = None, log: Callable[[str], None] = print,
            overrides: Optional[dict[str, Any]] = None) -> Run:
    """Run every stage of ``evaluation`` for ``job``; returns the finished :class:`Run`
    (:func:`raylc.evaluate.evaluate` picks the evaluation from the suite). Before anything is
    written: a local store must be a writable folder (:func:`check_store`), and a cluster
    (``ray.address``, RAY_ADDRESS) must answer within ``ray.connect_timeout_s``
    (:class:`raylc.run.ray_exec.RayUnavailable`); a store failing before the first write
    is :class:`NothingWritten`. SIGINT and SIGTERM end the run with :class:`RunInterrupted`."""
    check_store(job.store.path)
    run: Optional[Run] = None
    with _signals_interrupt():
        try:
            if job.ray.address or os.environ.get("RAY_ADDRESS"):
                ray_exec.ensure_ray(job)
            try:
                opened = open_run(job, run_id)
                # this invocation's overrides (``--set``, ``--store``, ``--seed``)
                opened.manifest["overrides"] = dict(overrides or {})
                opened.log = log
                stages = [Stage(*stage) for stage in evaluation.stages(job)]
                opened.manifest["plan"] = [stage.name for stage in stages]  # the stages to come (raylc status)
                opened.built = prebuild(job, evaluation, opened, stages[0])
                opened.acquire()
            except StoreUnavailable as exc:
                raise NothingWritten(f"{exc}; nothing was written") from None
            run = opened
            try:
                run.save()
                log(f"run {run.run_id} -> {run.store.uri(run.run_id)}")
                run_stages(run, stages)
            finally:
                run.release()
        except KeyboardInterrupt as exc:
            raise _interrupted(run, getattr(exc, "signum", signal.SIGINT)) from None
    return run


def run_stages(run: Run, stages: Sequence[Stage]) -> None:
    """Run the stages in order, each unless done already (a redone stage invalidates everything
    downstream of it); then stamp the manifest and log the stage table."""
    redone = False
    for stage in stages:
        redone = _stage(run, stage, redone) or redone
    run.manifest["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    run.save()
    run.log(stage_table(run.manifest))


def stage_table(manifest: dict[str, Any]) -> str:
    """Per-stage status, wall time and counts (requests, tokens, errors for infer) as text."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"run {manifest.get('run_id', '?')}")
    for col in ("stage", "status", "seconds", "counts"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for stage, state in manifest.get("stages", {}).items():
        counts = ", ".join(f"{k}={'unknown' if v is None else f'{v:,}'}" for k, v in (state.get("rows") or {}).items())
        table.add_row(stage, state.get("status", "?"), f"{state.get('seconds', 0):.1f}", counts)
    buf = io.StringIO()
    Console(file=buf, width=120).print(table)
    return buf.getvalue().rstrip()
