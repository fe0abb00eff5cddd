"""Run a job: each stage's table under ``<store>/<run_id>/<stage>/``, a manifest beside them.

Stages already marked done in the manifest of the same run (same job fingerprint) are
not run again, so re-running a crashed run picks up at the first unfinished stage.
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
from dataclasses import dataclass, field
from contextlib import contextmanager, suppress
from typing import Any, Callable, Iterable, Iterator, Optional

import polars as pl
import pyarrow.parquet as pq

from raylc import __version__
from raylc.backends import make_backend
from raylc.names import UnsafeName, path_segment
from raylc.pipeline import checkpoint, ray_exec, stages
from raylc.pipeline.inference import PROBLEM_ROW_GROUP
from raylc.plan import prefix_order
from raylc.spec import LENGTH_SUITES, Job
from raylc.store import Store, StoreUnavailable

MANIFEST = "manifest.json"
LOCK = "_lock.json"
LOCK_STALE_S = 900.0  # a lock whose owner has not written for this long is taken over
SAMPLE_PROBLEMS = 8  # problems sampled at a time
SPAN_CHUNK_ROWS = 5_000  # spans read at a time (request ids, skip set, feeding the actor pool)
OBS_BUCKET_ROWS = 10_000  # observations merged at a time by the score stage (about)
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


class NothingWritten(StoreUnavailable):
    """The store failed before the run wrote anything: nothing to resume (exit code 1)."""


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
    """``<job name>-<UTC time>``, a safe path segment (:func:`raylc.names.path_segment`; raises
    :class:`RunError` when the job's name makes it unsafe, e.g. a leading '.' or too long)."""
    run_id = f"{job.name}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    try:
        return path_segment(run_id, "run id (from the job's name)")
    except UnsafeName as exc:
        raise RunError(str(exc)) from None


@dataclass
class Run:
    """A run folder and its manifest."""

    store: Store
    run_id: str
    manifest: dict[str, Any] = field(default_factory=dict)
    interrupted: Optional[str] = None  # the stage a signal interrupted (:func:`run_job`)

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

    def done(self, stage: str, outputs: Optional[dict[str, list[str]]] = None) -> bool:
        """Marked done in the manifest and every output present and readable (else redone)."""
        state = self.manifest.get("stages", {}).get(stage, {})
        if state.get("status") != "done":
            return False
        for rel in (outputs or OUTPUTS)[stage]:
            parts = rel.split("/")
            ok = self.store.table_ok(self.run_id, *parts) if rel.endswith(".parquet") or "." not in rel else self.store.exists(self.run_id, *parts)
            if not ok:
                return False
        return True

    def read(self, rel: str) -> pl.DataFrame:
        return self.store.read_table(self.run_id, *rel.split("/"))

    def write(self, df: pl.DataFrame, rel: str, row_group_size: Optional[int] = None) -> None:
        self.store.write_table(df, self.run_id, *rel.split("/"), row_group_size=row_group_size)

    def write_parts(self, parts: Iterable[pl.DataFrame], rel: str, empty: pl.DataFrame) -> int:
        """Write frames of one schema as one Parquet file, a row group each, streamed to the
        store as they come (memory holds one frame; the file appears when complete); ``empty``
        is written when there are none. Returns the number of rows."""
        rows = 0
        with self.store.open_output(self.run_id, *rel.split("/")) as out:
            writer = None
            for part in parts:
                table = part.to_arrow()
                writer = writer or pq.ParquetWriter(out, table.schema, compression="zstd")
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
                rows += part.height
            if writer is None:
                writer = pq.ParquetWriter(out, empty.to_arrow().schema, compression="zstd")
                writer.write_table(empty.to_arrow())
            writer.close()
        return rows

    def iter_rows(self, rel: str, rows: int) -> Iterator[pl.DataFrame]:
        """A Parquet file in frames of at most ``rows`` rows, read one row group at a time."""
        with self.store.open_input(self.run_id, *rel.split("/")) as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=rows):
                yield pl.from_arrow(batch)  # type: ignore[misc]

    def read_bytes(self, rel: str) -> bytes:
        """A stored file's bytes, as written (a Parquet table stays compressed)."""
        with self.store.open_input(self.run_id, *rel.split("/")) as fh:
            return fh.read()

    def num_rows(self, rel: str) -> int:
        """Rows of a Parquet file, from its footer."""
        with self.store.open_input(self.run_id, *rel.split("/")) as fh:
            return pq.read_metadata(fh).num_rows


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


def _stage(run: Run, name: str, fn: Callable[[], dict[str, int]], log: Callable[[str], None], upstream_redone: bool,
           outputs: Optional[dict[str, list[str]]] = None) -> bool:
    """Run one stage unless it (and everything upstream) is done already; True if it ran."""
    if not upstream_redone and run.done(name, outputs):
        log(f"[{name}] done already, skipped")
        return False
    run.manifest["stages"][name] = {"status": "running"}
    run.save()
    t0 = time.perf_counter()
    try:
        rows = fn()
    except KeyboardInterrupt:  # SIGINT or SIGTERM (run_job): recorded, and redone on resume
        run.interrupted = name
        run.manifest["stages"][name] = {"status": "interrupted", "seconds": round(time.perf_counter() - t0, 3)}
        with suppress(Exception):
            run.save()
        raise
    seconds = round(time.perf_counter() - t0, 3)
    run.manifest["stages"][name] = {"status": "done", "rows": rows, "seconds": seconds}
    run.save()
    log(f"[{name}] {', '.join(f'{k}={v}' for k, v in rows.items())} ({seconds:.1f} s)")
    return True


def _fit_parquet(data: bytes, job: Job) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The fit stage on an observation table given as Parquet bytes (run as a Ray task)."""
    return stages.fit(pl.read_parquet(io.BytesIO(data)), job, mapper=ray_exec.map_tasks)


def score_observations(run: Run, job: Job) -> int:
    """The score stage: every stored completion scored, as ``score/observations.parquet``
    sorted by (task, problem_id, C, start), a span stored twice keeping its last score (as in
    :func:`checkpoint.load_completions`; a run's shards hold only its own spans' requests, as
    the run is tied to the job's fingerprint). Returns the number of observations.

    Two passes bound the driver's memory by a shard and a bucket, not by the run: the
    problems, in (task, problem_id) order, are cut into buckets of about
    :data:`OBS_BUCKET_ROWS` spans; pass 1 scores each shard and writes its observations of
    each bucket as a temporary part ``score/.parts/b<bucket>/part-<shard>.parquet``; pass 2
    merges each bucket's parts (:func:`stages.merge_observations`, in shard order) and streams
    the buckets, in order, into the table."""
    problems = run.read("build/problems.parquet").sort("task", "problem_id")
    per_bucket = max(1, OBS_BUCKET_ROWS * problems.height // max(run.num_rows("sample/spans.parquet"), 1))
    buckets = problems.select("problem_id", _bucket=pl.int_range(pl.len(), dtype=pl.Int64) // per_bucket)
    run.store.delete(run.run_id, "score", ".parts")  # left by an interrupted attempt
    seen: set[int] = set()
    for i, shard in enumerate(checkpoint.iter_shards(run.store, run.run_id)):
        obs = stages.score(shard.filter(pl.col("error").is_null() & pl.col("completion").is_not_null()), problems, job)
        groups = obs.join(buckets, on="problem_id", how="left", maintain_order="left").partition_by(
            "_bucket", as_dict=True, maintain_order=True)
        for (b,), part in groups.items():
            run.write(part.drop("_bucket"), f"score/.parts/b{b:06d}/part-{i:06d}.parquet")
            seen.add(int(b))  # type: ignore[arg-type]
    merged = (stages.merge_observations([run.read(f"score/.parts/b{b:06d}")]) for b in sorted(seen))
    n = run.write_parts(merged, "score/observations.parquet", stages.merge_observations([]))
    run.store.delete(run.run_id, "score", ".parts")
    return n


def write_shards(job: Job, run: Run, batches: Iterable[pl.DataFrame], log: Callable[[str], None]) -> None:
    """Write ``batches`` (a lazy stream from the actor pool) as shards as they come. First
    checks the endpoint of an OpenAI-compatible backend and the GPUs; a
    failed actor pool keeps what finished and raises :class:`InferenceFailed` with its root cause."""
    if job.probe.backend == "openai":  # fail fast, before any shard, when the endpoint is down
        make_backend(job, None).check_endpoint()
    ray_exec.ensure_ray(job)
    try:
        ray_exec.check_gpus(job, log)
    except RuntimeError as exc:
        raise InferenceFailed(str(exc)) from None
    writer = checkpoint.ShardWriter(run.store, run.run_id, job.inference.shard_rows, job.inference.shard_seconds)
    try:
        for batch in batches:
            writer.add(batch)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: keep what finished
        writer.flush()
        raise
    except Exception as exc:  # a failed actor pool: keep what finished, report the root cause
        writer.flush()
        cause = ray_exec.root_cause(exc)
        if job.probe.backend == "vllm" and cause.startswith(("ActorDiedError", "RayActorError")):
            cause += (f" (an engine actor died more often than probe.max_engine_restarts = "
                      f"{job.probe.max_engine_restarts} allows; its log has vLLM's reason)")
        raise InferenceFailed(
            f"{job.probe.backend} inference failed: {cause} (finished requests are "
            f"kept; re-run with --run-id {run.run_id} to continue)"
        ) from None
    writer.flush()


def infer_requests(job: Job, run: Run, pending: Iterable[pl.DataFrame], log: Callable[[str], None],
                   problems: tuple[str, ...] = ()) -> None:
    """The one inference path: the ``pending`` request rows (chunks) become a request table in
    the run folder (``requests/<attempt>/``), which Ray Data reads in blocks on the workers and
    streams through the probe's prepare and engine stages (:func:`ray_exec.stream_requests`)
    into checkpoint shards; the table is removed when the stream ends. ``problems``: the
    run-relative path of the problems table that DOLCE span references are rendered from."""
    files = checkpoint.write_requests(run.store, run.run_id, pending, ray_exec.block_rows(job))
    try:
        if files:
            source = ray_exec.RequestSource(run.store.root, files, problems=(run.run_id, *problems) if problems else ())
            write_shards(job, run, ray_exec.stream_requests(source, job), log)
    finally:
        run.store.delete(run.run_id, checkpoint.REQUEST_DIR)


def check_errors(job: Job, run: Run, rows: dict[str, int], total: int, first: Optional[str]) -> None:
    """Raise :class:`InferenceFailed` when more of the ``total`` requests failed than
    ``inference.max_error_fraction`` allows (``first``: one of the errors)."""
    if rows["errors"] > job.inference.max_error_fraction * total:
        raise InferenceFailed(
            f"{run.store.uri(run.run_id, 'infer')}: {rows['errors']} of {total} requests failed "
            f"(allowed: {job.inference.max_error_fraction:.1%}), e.g. {first}; re-run with --run-id "
            f"{run.run_id} to retry only the failed ones"
        )


def prebuild(job: Job, run: Run) -> Optional[pl.DataFrame]:
    """The build stage's table (problems, or a length-controlled suite's samples) when the run's
    build is still to do, else None. Built before the run writes anything, so a bad data file
    or pool is one :class:`RunError` line and leaves no run folder behind."""
    from raylc.pipeline import length

    length_suite = job.suite.kind in LENGTH_SUITES
    if run.done("build", length.OUTPUTS if length_suite else OUTPUTS):
        return None
    try:
        return length.build_samples(job) if length_suite else stages.build(job)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def run_job(job: Job, run_id: Optional[str] = None, log: Callable[[str], None] = print) -> Run:
    """Run every stage of ``job``; returns the finished :class:`Run`. Before anything is
    written: a local store must be a writable folder (:func:`check_store`), and a cluster
    (``ray.address``, RAY_ADDRESS) must answer within ``ray.connect_timeout_s``
    (:class:`raylc.pipeline.ray_exec.RayUnavailable`); a store failing before the first write
    is :class:`NothingWritten`. SIGINT and SIGTERM end the run with :class:`RunInterrupted`."""
    check_store(job.store.path)
    run: Optional[Run] = None
    with _signals_interrupt():
        try:
            if job.ray.address or os.environ.get("RAY_ADDRESS"):
                ray_exec.ensure_ray(job)
            try:
                opened = open_run(job, run_id)
                built = prebuild(job, opened)
                opened.acquire()
            except StoreUnavailable as exc:
                raise NothingWritten(f"{exc}; nothing was written") from None
            run = opened
            try:
                run.save()
                log(f"run {run.run_id} -> {run.store.uri(run.run_id)}")
                if job.suite.kind in LENGTH_SUITES:
                    from raylc.pipeline.length_runner import run_length_stages

                    run_length_stages(job, run, log, built)
                else:
                    _run_stages(job, run, log, built)
            finally:
                run.release()
        except KeyboardInterrupt as exc:
            raise _interrupted(run, getattr(exc, "signum", signal.SIGINT)) from None
    return run


def _run_stages(job: Job, run: Run, log: Callable[[str], None], built: Optional[pl.DataFrame] = None) -> None:
    def do_build() -> dict[str, int]:
        problems = built if built is not None else stages.build(job)
        # small row groups: an inference actor reads the few problems its batch names
        run.write(problems, "build/problems.parquet", row_group_size=PROBLEM_ROW_GROUP)
        return {"problems": problems.height}

    def do_sample() -> dict[str, int]:
        problems = run.read("build/problems.parquet").sort("task", "problem_id")
        chunks = (stages.sample(problems.slice(i, SAMPLE_PROBLEMS), job)
                  for i in range(0, problems.height, SAMPLE_PROBLEMS))  # each sorted, and in order
        return {"spans": run.write_parts(chunks, "sample/spans.parquet", stages.sample(problems.clear(), job))}

    def do_infer() -> dict[str, int]:
        problems = run.read("build/problems.parquet")
        total = run.num_rows("sample/spans.parquet")
        done = checkpoint.completed_keys(run.store, run.run_id)
        add_ids = checkpoint.request_ids(problems, job)

        def span_chunks() -> Iterator[pl.DataFrame]:
            """The spans table with request ids, chunk by chunk."""
            return (add_ids(chunk) for chunk in run.iter_rows("sample/spans.parquet", SPAN_CHUNK_ROWS))

        # a fresh run has nothing to skip: no pass over the spans just to count
        reused = (sum(int(checkpoint.is_completed(chunk["request_id"], done).sum()) for chunk in span_chunks())
                  if done.size else 0)
        log(f"[infer] {reused} completions kept from earlier attempts, {total - reused} to run")
        if total > reused:
            # spans sharing a prefix (same problem and start) back to back, for vLLM's prefix cache
            pending = (prefix_order(chunk.filter(~checkpoint.is_completed(chunk["request_id"], done)))
                       for chunk in span_chunks())
            infer_requests(job, run, pending, log, problems=("build", "problems.parquet"))
        del done
        rows, first = checkpoint.stored_accounting(run.store, run.run_id, reused)
        check_errors(job, run, rows, total, first)
        return rows

    def do_score() -> dict[str, int]:
        return {"observations": score_observations(run, job)}

    def do_fit() -> dict[str, int]:
        ray_exec.ensure_ray(job)
        try:  # in a Ray task: the driver holds the compressed table only
            [(problems, tasks)] = ray_exec.map_tasks(_fit_parquet, [run.read_bytes("score/observations.parquet")], job)
        except Exception as exc:  # the task's own error (e.g. a one-line ObservationError), not Ray's wrapper
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from None
        run.write(problems, "fits/problems.parquet")
        run.write(tasks, "fits/tasks.parquet")
        return {"problems": problems.height, "tasks": tasks.height}

    def do_report() -> dict[str, int]:
        from raylc.report import write_report

        fits = run.read("fits/problems.parquet"), run.read("fits/tasks.parquet")
        # lambda_q per chunk, then over the chunks: memory holds one chunk of the observations
        lam_q = stages.partial_lengths(pl.concat(
            [stages.partial_lengths(chunk) for chunk in run.iter_rows("score/observations.parquet", OBS_BUCKET_ROWS)]
            or [pl.DataFrame(schema={"problem_id": pl.String, "lam_q": pl.Int64})]))
        tables = stages.report(*fits, run.read("build/problems.parquet"), lam_q)
        write_report(run, tables, fits)
        return {name: t.height for name, t in tables.items()}

    run_stages(run, dict(zip(stages.STAGES, (do_build, do_sample, do_infer, do_score, do_fit, do_report))), log)


def run_stages(run: Run, fns: dict[str, Callable[[], dict[str, int]]], log: Callable[[str], None],
               outputs: Optional[dict[str, list[str]]] = None) -> None:
    """Run the stages in order, each unless done already (a redone stage invalidates everything
    downstream of it); then stamp the manifest and log the stage table."""
    redone = False
    for name, fn in fns.items():
        redone = _stage(run, name, fn, log, redone, outputs) or redone
    run.manifest["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    run.save()
    from raylc.report import stage_table

    log(stage_table(run.manifest))
