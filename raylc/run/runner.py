"""The stage runner: a run of an :class:`Evaluation`'s stages in its run folder, with resume.

An :class:`Evaluation` (DOLCE, :mod:`raylc.dolce.evaluation`; length sweeps,
:mod:`raylc.sweep.evaluation`) names its stages, their outputs and one function per stage;
:func:`run_job` runs them in order. Stages already marked done in the manifest of the same
run (same job fingerprint) are not run again, so re-running a crashed run picks up at the
first unfinished stage. A stage function is given the :class:`Run`: its folder
(:class:`raylc.run.folder.RunFolder`, the run's storage), its job and log, and the run layer's
inference (:meth:`Run.infer`, :meth:`Run.generate`) and Ray tasks (:meth:`Run.mapper`).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import io
import os
import platform
import signal
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, Protocol, Sequence

import polars as pl

from raylc import __version__
from raylc.backends.registry import backend_of
from raylc.io.errors import StoreUnavailable
from raylc.io.names import UnsafeName, path_segment
from raylc.io.schemas import TableSchema
from raylc.run import pipeline, session
from raylc.run.budget import Count, TokenBudget
from raylc.run.checkpoint import JUDGE_REQUESTS, prompt_request_ids, sent_tokens
from raylc.run.errors import BudgetReached, InferenceFailed, NothingWritten, RunError, RunInterrupted
from raylc.run.folder import JUDGE_SHARDS, SHARDS, RunFolder, check_store
from raylc.run.manifest import Manifest, StageRecord
from raylc.run.progress import InferProgress
from raylc.run.tasks import map_tasks, raising_own_errors
from raylc.spec import Job

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

    def report_tables(self, job: Job) -> tuple[TableSchema, ...]: ...

    def print_report(self, tables: dict[str, pl.DataFrame]) -> None: ...


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
        stored = f"{len(run.folder.completed())} requests stored"
    except Exception:  # the store itself may be what failed; the line still says how to resume
        stored = "stored requests kept"
    where = f"during {run.interrupted}" if run.interrupted else "between stages"
    return RunInterrupted(f"{how} {where}; {stored}; re-run with --run-id {run.run_id} to resume", signum)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "raylc": __version__}
    for pkg in ("ray", "polars", "pyarrow", "numpy", "scipy", "pydantic", "diptest"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def default_run_id(job: Job) -> str:
    """``<job name>-<UTC time>-<fingerprint>``: the UTC time to the second and the first 6 hex
    digits of the job's fingerprint, so that jobs started in the same second (one per seed)
    get runs of their own. A safe path segment (:func:`raylc.io.names.path_segment`; raises
    :class:`RunError` when the job's name makes it unsafe, e.g. a leading '.' or too long)."""
    run_id = f"{job.name}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%d-%H%M%S')}-{job.fingerprint()[:6]}"
    try:
        return path_segment(run_id, "run id (from the job's name)")
    except UnsafeName as exc:
        raise RunError(str(exc)) from None


@dataclass
@dataclass
class Run:
    """A run: its folder (all its storage: tables, manifest, lock, requests, shards), its job,
    manifest and log, and what a stage function needs of the run layer besides storage:
    inference (:meth:`infer`, :meth:`inference_rows`, :meth:`generate`) and Ray tasks (:meth:`mapper`)."""

    folder: RunFolder
    job: Job
    manifest: Manifest
    log: Callable[[str], None] = print
    built: Optional[pl.DataFrame] = None  # the build stage's table, made before the run wrote anything
    current: Optional[str] = None  # the stage running
    interrupted: Optional[str] = None  # the stage a signal interrupted (:func:`run_job`)

    @property
    def run_id(self) -> str:
        return self.folder.run_id

    def save(self) -> None:
        """Write the manifest (last, after the tables it describes) and refresh the lock."""
        self.folder.save(self.manifest)

    def done(self, stage: Stage) -> bool:
        """Marked done in the manifest and every output present and readable (else redone)."""
        state = self.manifest.stages.get(stage.name)
        return state is not None and state.status == "done" and all(self.folder.has(rel) for rel in stage.outputs)

    def infer(self, pending: Iterable[pl.DataFrame], count: Count, table: str = "", reused: int = 0) -> None:
        """Send ``pending`` request rows through the probe (:func:`raylc.run.pipeline.infer`);
        ``count``: their prompt tokens as the plan counts them, for the job's prompt-token cap
        (:mod:`raylc.run.budget`; :class:`BudgetReached` once the rows that fit are stored, when
        some do not); ``table``: the run-relative suite table (DOLCE problems that span references
        are rendered from, a sweep's samples); ``reused``: the stage's requests already stored
        (for the progress ``raylc status`` shows)."""
        budget, pending = self._capped(self.job, pending, count, lambda: self.folder.read(table))
        progress = InferProgress(self.manifest, reused, self.save, log=self.log)
        pipeline.infer(self.folder, self.job, pending, progress, self.log, table=table)
        self._stop_at(budget, "infer")

    def _capped(self, job: Job, pending: Iterable[pl.DataFrame], count: Count,
                problems: Callable[[], Any]) -> tuple[Optional[TokenBudget], Iterable[pl.DataFrame]]:
        """The cap's budget (None: no cap) and the ``pending`` rows that fit it, counted exactly
        by ``job.probe``'s backend when it can (``problems()``: the table spans are rendered
        from), else by ``count``."""
        cap = self.job.inference.max_prompt_tokens
        if cap is None:
            return None, pending
        budget = TokenBudget(cap, self._sent()[0])
        exact = backend_of(job.probe).prompt_counter(job, problems)
        return budget, self._within(budget, pending, exact or count)

    def _stop_at(self, budget: Optional[TokenBudget], stage: str) -> None:
        """:class:`BudgetReached` when the cap left requests out (once the kept ones are stored)."""
        if budget is not None and budget.left_out:
            raise budget.reached(*self._sent(), self.current or stage, self.run_id)

    def _within(self, budget: TokenBudget, pending: Iterable[pl.DataFrame], count: Count) -> Iterator[pl.DataFrame]:
        """The pending rows that fit the cap, and a line when some do not (before any is sent)."""
        yield from budget.select(pending, count)
        if budget.left_out:
            self.log(f"[{self.current or 'infer'}] prompt-token cap {budget.max_prompt_tokens:,}: {budget.kept:,} "
                     f"requests fit, {budget.left_out:,} wait for a higher cap")

    def _sent(self) -> tuple[int, int]:
        """Prompt tokens (the backend's count) the run has sent, the probe's and the judge's,
        which share the cap: its stored successes' and every answered failure's
        (:func:`~raylc.run.checkpoint.sent_tokens`, one read of each stage's shards); and its
        stored successes."""
        probe, judge = (sent_tokens(self.folder, shards) for shards in (SHARDS, JUDGE_SHARDS))
        return probe[0] + judge[0], probe[1] + judge[1]

    def inference_rows(self, reused: int, total: int) -> Rows:
        """The infer stage's counts from the stored shards; :class:`InferenceFailed` when more of
        the ``total`` requests failed than ``inference.max_error_fraction`` allows."""
        rows, first = self.folder.accounting(reused)
        allowed = self.job.inference.max_error_fraction
        if rows["errors"] > allowed * total:  # type: ignore[operator]
            raise InferenceFailed(
                f"{self.folder.uri('infer')}: {rows['errors']} of {total} requests failed (allowed: {allowed:.1%}), "
                f"e.g. {first}; re-run with --run-id {self.run_id} to retry only the failed ones")
        return rows  # type: ignore[return-value]

    def generate(self, prompts: pl.Series, job: Job, count: Count) -> pl.DataFrame:
        """Completions of ``prompts`` (a ``completion`` column, in their order) from ``job.probe``
        (the judge's calls), through the inference path into the run's ``judge/`` shards: a
        resumed run sends only the prompts without a stored completion. The calls share the
        run's prompt-token cap with the probe's (``count``: a call row's prompt tokens as the
        plan counts them, as :meth:`infer`'s). A failed call's completion is null."""
        ids = prompt_request_ids(job.probe_fingerprint(), prompts)
        requests = JUDGE_REQUESTS.check(pl.DataFrame({"request_id": ids, "context": prompts.cast(pl.String)}).select(
            "request_id", task=pl.lit("judge"), head=pl.lit(""), context="context", tail=pl.lit("")))
        done = self.folder.completed(JUDGE_SHARDS)
        pending = requests.filter(~done.among(requests["request_id"])).unique("request_id", maintain_order=True)
        reused = requests["request_id"].n_unique() - pending.height
        if requests.height:
            self.log(f"[judge] {reused} judge calls kept from earlier attempts, {pending.height} to run")
        if pending.height:
            budget, chunks = self._capped(job, [pending], count, lambda: None)
            progress = InferProgress(self.manifest, reused, self.save, log=self.log, stage=self.current or "judge",
                                     label="judge")
            pipeline.infer(self.folder, job, chunks, progress, self.log, shards=JUDGE_SHARDS)
            self._stop_at(budget, "judge")
        stored = self.folder.completions(JUDGE_SHARDS)
        stored = stored.select("request_id", "completion") if stored.height else pl.DataFrame(
            schema={"request_id": pl.String, "completion": pl.String})
        return requests.select("request_id").join(stored, on="request_id", how="left", maintain_order="left")

    def mapper(self) -> Callable[..., list[Any]]:
        """A mapper of per-task work, ``mapper(fn, items, *args)``: one Ray task per item from
        the driver (:func:`raylc.run.tasks.map_tasks`; Ray joined or started), results in order,
        waited for at most ``ray.no_progress_timeout_s`` without one finishing (null: 1800 s).
        An error raised by ``fn`` is raised as itself, not Ray's wrapper."""
        session.ensure_ray(self.job)
        return raising_own_errors(partial(map_tasks, no_progress_s=self.job.ray.no_progress_timeout_s))


def open_run(job: Job, run_id: Optional[str]) -> Run:
    """The run ``run_id`` of ``job`` in its store (a new one, or the one to resume), its manifest
    stamped with the job; a :class:`RunError` when the id is unsafe or names a run of another job."""
    try:  # the run's folder: nothing is ever written outside <store>/<run_id>/
        run_id = path_segment(run_id, "run id") if run_id else default_run_id(job)
    except UnsafeName as exc:
        raise RunError(str(exc)) from None
    folder = RunFolder(job.store.path, run_id)
    existing = folder.manifest()
    if existing is not None and existing.fingerprint != job.fingerprint():
        raise RunError(
            f"{folder.uri()}: run exists with a different job spec (fingerprint "
            f"{existing.fingerprint} != {job.fingerprint()}); use another --run-id"
        )
    stamp = dict(run_id=run_id, job=job.resolved(), fingerprint=job.fingerprint(), seed=job.seed, versions=_versions())
    if existing is None:
        manifest = Manifest(**stamp, created_at=dt.datetime.now(dt.timezone.utc).isoformat())
    else:
        manifest = existing.model_copy(update=stamp)
    return Run(folder, job, manifest)


def _ended(run: Run, name: str, status: str, t0: float, budget: Any = None) -> None:
    """Record and save a stage that failed, was interrupted or stopped at its budget, its
    progress kept (``raylc status``). A store failing now leaves the error on its way to the user."""
    progress = run.manifest.stages[name].progress if name in run.manifest.stages else None
    run.manifest.stages[name] = StageRecord(status=status, seconds=round(time.perf_counter() - t0, 3),  # type: ignore[arg-type]
                                            progress=progress, budget=budget)
    with suppress(Exception):
        run.save()


def _stage(run: Run, stage: Stage, upstream_redone: bool) -> bool:
    """Run one stage unless it (and everything upstream) is done already; True if it ran."""
    name = stage.name
    if not upstream_redone and run.done(stage):
        run.log(f"[{name}] done already, skipped")
        return False
    run.manifest.stages[name] = StageRecord(status="running")
    run.current = name
    run.save()
    t0 = time.perf_counter()
    try:
        rows = stage.fn(run)
    except ValueError as exc:  # the stage's data cannot go on (a family's one-line message)
        _ended(run, name, "failed", t0)
        raise RunError(str(exc)) from exc
    except BudgetReached as exc:  # the prompt-token cap: recorded; the same run with a higher cap resumes
        _ended(run, name, "stopped", t0, exc.budget)
        raise
    except KeyboardInterrupt:  # SIGINT or SIGTERM (run_job): recorded, and redone on resume
        run.interrupted = name
        _ended(run, name, "interrupted", t0)
        raise
    except Exception:  # inference failed, a store or backend gave out, a stored table is damaged:
        # `failed` (else the stage stayed `running` and `status` called it interrupted); redone on resume
        _ended(run, name, "failed", t0)
        raise
    seconds = round(time.perf_counter() - t0, 3)
    run.manifest.stages[name] = StageRecord(status="done", rows=rows, seconds=seconds)
    run.save()
    counts = ", ".join(f"{k}={'unknown' if v is None else v}" for k, v in rows.items())
    run.log(f"[{name}] {counts} ({seconds:.1f} s)")
    return True


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


def _opened(job: Job, evaluation: Evaluation, run_id: Optional[str], log: Callable[[str], None],
            overrides: Optional[dict[str, Any]]) -> tuple[Run, list[Stage]]:
    """The run, opened, built (its build table) and locked, and its stages; a store failing
    before the first write is :class:`NothingWritten`."""
    try:
        run = open_run(job, run_id)
        run.manifest.overrides = dict(overrides or {})  # this invocation's overrides (--set, --store, --seed)
        run.log = log
        stages = [Stage(*stage) for stage in evaluation.stages(job)]
        run.manifest.plan = [stage.name for stage in stages]  # the stages to come (raylc status)
        run.built = prebuild(job, evaluation, run, stages[0])
        run.folder.acquire()
    except StoreUnavailable as exc:
        raise NothingWritten(f"{exc}; nothing was written") from None
    return run, stages


def run_job(job: Job, evaluation: Evaluation, run_id: Optional[str] = None, log: Callable[[str], None] = print,
            overrides: Optional[dict[str, Any]] = None) -> Run:
    """Run every stage of ``evaluation`` for ``job``; returns the finished :class:`Run`
    (:func:`raylc.evaluate.evaluate` picks the evaluation from the suite). Before anything is
    written: a local store must be a writable folder (:func:`check_store`), and a cluster
    (``ray.address``, RAY_ADDRESS) must answer within ``ray.connect_timeout_s``
    (:class:`raylc.run.session.RayUnavailable`); a store failing before the first write
    is :class:`NothingWritten`. SIGINT and SIGTERM end the run with :class:`RunInterrupted`."""
    check_store(job.store.path)
    run: Optional[Run] = None
    with _signals_interrupt():
        try:
            if job.ray.cluster()[0]:
                session.ensure_ray(job)
            opened, stages = _opened(job, evaluation, run_id, log, overrides)
            run = opened
            try:
                run.save()
                log(f"run {run.run_id} -> {run.folder.uri()}")
                run_stages(run, stages)
            finally:
                run.folder.release()
        except KeyboardInterrupt as exc:
            raise _interrupted(run, getattr(exc, "signum", signal.SIGINT)) from None
    return run


def run_stages(run: Run, stages: Sequence[Stage]) -> None:
    """Run the stages in order, each unless done already (a redone stage invalidates everything
    downstream of it); then stamp the manifest and log the stage table."""
    redone = False
    for stage in stages:
        redone = _stage(run, stage, redone) or redone
    run.current = None
    run.manifest.finished_at = dt.datetime.now(dt.timezone.utc).isoformat()
    run.save()
    run.log(stage_table(run.manifest))


def stage_table(manifest: Manifest) -> str:
    """Per-stage status, wall time and counts (requests, tokens, errors for infer) as text."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"run {manifest.run_id}")
    for col in ("stage", "status", "seconds", "counts"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for stage, state in manifest.stages.items():
        counts = ", ".join(f"{k}={'unknown' if v is None else f'{v:,}'}" for k, v in (state.rows or {}).items())
        table.add_row(stage, state.status, f"{state.seconds or 0:.1f}", counts)
    buf = io.StringIO()
    Console(file=buf, width=120, markup=False).print(table)
    return buf.getvalue().rstrip()
