"""The inference pipeline: request rows through the stages the probe's backend gives
(:meth:`raylc.backends.registry.BackendPlugin.stages`), mapped over Ray Data actor pools, into
the run folder's checkpoint shards.

:func:`infer` is the one inference path of every suite and of judge calls: the pending request
rows become the run folder's request table (``requests/<attempt>/``), which Ray Data reads in
blocks on the workers (:class:`RequestFiles`); each stage of the backend is one ``map_batches``
over a pool of :class:`StageActor` (its function built once per actor, its settings from its
:class:`~raylc.backends.stages.PipelineStage`); the completions stream back to the driver into
the folder's shard writer, and the request table is removed when the stream ends.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import time
import weakref
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import polars as pl
import pyarrow as pa

from raylc.backends.registry import BackendPlugin, backend_of
from raylc.backends.stages import PipelineStage, ProblemSource, StageInputs
from raylc.run.errors import InferenceFailed
from raylc.run.folder import SHARDS, RunFolder
from raylc.run.session import _quiet_ray_data, ensure_ray, root_cause, verbose

if TYPE_CHECKING:
    from raylc.run.progress import InferProgress
    from raylc.spec import Job

FILE = "_request_file"


def block_rows(job: Job) -> int:
    """Request rows per file of the request table, the unit of work that streams back to the
    shards: the backend's ``block_factor`` batches (vLLM: one, text backends: four)."""
    return max(job.ray.batch_size * backend_of(job.probe).block_factor, 1)


@dataclass(frozen=True)
class RequestFiles:
    """Where a stream's request rows come from: request ``files`` of a run folder (run-relative),
    each read by the first stage's actor that takes it, on a worker, so the driver neither holds
    nor puts the requests. ``table``: the run-relative path of the suite's built table (the DOLCE
    problems that span references are rendered from, a sweep's samples), which the stages read
    (:class:`~raylc.backends.stages.StageInputs`); none for judge calls."""

    folder: RunFolder
    files: tuple[str, ...]
    table: str = ""

    def dataset(self) -> Any:
        """A dataset of file names, one per block: a task reads one file, so completions stream
        out a file at a time."""
        import ray.data

        return ray.data.from_items([{FILE: f} for f in self.files], override_num_blocks=len(self.files))

    def rows(self, batch: pa.Table) -> pl.DataFrame:
        """The request rows of the files a first-stage batch names."""
        import pyarrow.parquet as pq

        frames = []
        for f in batch.column(FILE).to_pylist():
            with self.folder.open_input(f) as fh:
                frames.append(pl.from_arrow(pq.read_table(fh)))
        return pl.concat(frames, how="vertical_relaxed")  # type: ignore[arg-type]

    def inputs(self) -> StageInputs:
        """What the stages read besides their rows: the problems by id, the suite's table."""
        if not self.table:
            return StageInputs(ProblemSource())
        return StageInputs(ProblemSource(open_file=partial(self.folder.input_file, self.table)),
                           self.folder.scan(self.table))


def _join(ledger: Any) -> None:
    """Record the actor this runs in with the stream's ``ledger`` (fire and forget), so that a
    failed stream can release it (:func:`release_actors`)."""
    if ledger is None:
        return
    import ray

    try:
        ledger.actor.remote(ray.get_runtime_context().current_actor)
    except Exception:  # a gone ledger never fails the actor
        pass


class StageActor:
    """A Ray Data actor of one stage of the backend's pipeline: the stage's function is built in
    the constructor (a failure is raised by each batch: one line, where a failed constructor has
    Ray print its creation-task traceback from the worker) and closed when Ray Data lets the
    actor go (``__ray_shutdown__`` drops the UDF: ``__del__``), or at the latest when the
    worker's interpreter exits (``atexit``, before its modules are torn down). The first stage
    reads its request rows from the files its batch names. ``ledger``: the stream's
    :class:`EngineLedger` (an engine pipeline's), which the actor joins first, so that an engine
    that fails to start is released with the stream."""

    def __init__(self, stage: PipelineStage, job: Job, source: RequestFiles, first: bool, ledger: Any = None):
        _join(ledger)
        self.stage, self.ledger = stage, ledger
        self.source = source if first else None
        self.fn: Any = None
        self._failed: Optional[BaseException] = None
        try:  # here, so that an engine starts while the prepare actors do
            self.fn = stage.fn(job, source.inputs())
        except Exception as exc:
            self._failed = exc
        else:
            if stage.max_restarts is not None:
                self._record("ready", time.time())
        close = weakref.WeakMethod(self._close)  # atexit must not keep the actor alive
        atexit.register(lambda: (method := close()) is not None and method())

    def _record(self, method: str, *args: Any) -> None:
        """Tell the ledger (fire and forget: a gone ledger never fails a batch)."""
        if self.ledger is not None:
            try:
                getattr(self.ledger, method).remote(*args)
            except Exception:
                pass

    def _rows(self, batch: pa.Table) -> pl.DataFrame:
        if self._failed is not None:
            raise self._failed
        return self.source.rows(batch) if self.source is not None else pl.from_arrow(batch)  # type: ignore[return-value]

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.fn(self._rows(batch)).to_arrow()

    def _close(self) -> None:
        """Close the stage's function once, whichever of ``__del__`` and ``atexit`` comes first."""
        fn, self.fn = getattr(self, "fn", None), None
        if fn is not None and hasattr(fn, "close"):
            fn.close()

    def __del__(self) -> None:
        self._close()


class EngineStageActor(StageActor):
    """An asynchronous stage (an engine): Ray Data keeps ``concurrent_batches`` batches in flight
    on it. A dead engine (:class:`~raylc.backends.base.EngineDead`) ends the process
    (``os._exit``) so that Ray restarts the actor and retries its batches, until the stream's
    engines died more than the stage's ``max_restarts`` times (counted by the ``ledger``): then
    the batch fails with :class:`EngineRestartsExceeded`."""

    async def __call__(self, batch: pa.Table) -> pa.Table:  # type: ignore[override]
        from raylc.backends.base import EngineDead

        rows = self._rows(batch)
        entered = time.time()
        try:
            out = await self.fn(rows)
        except EngineDead as exc:
            allowed, label = self.stage.max_restarts or 0, self.stage.label or self.stage.name
            died = await self._count_death()
            if died > allowed:
                raise EngineRestartsExceeded(
                    f"the {label} died {died} times, more than {self.stage.restarts_key} = {allowed} allows "
                    f"(last: {exc})") from None
            print(f"raylc: {label} died ({exc}); exiting so that Ray restarts this actor", file=sys.stderr,
                  flush=True)
            os._exit(1)
        self._record("batch", entered, time.time(), out.height)
        return out.to_arrow()

    async def _count_death(self) -> int:
        """This engine's death counted once in the stream's ledger, however many of its batches
        saw it (60 s at most; without a ledger, as the first)."""
        if getattr(self, "_death", None) is None:
            self._death = asyncio.ensure_future(self._ask_ledger())
        return await asyncio.shield(self._death)

    async def _ask_ledger(self) -> int:
        if self.ledger is None:
            return 1
        try:
            return int(await asyncio.wait_for(self.ledger.died.remote(), 60))
        except Exception:  # the ledger is gone or silent: restart rather than fail the run
            return 1


class EngineLedger:
    """One stream's engine record (a Ray actor, no CPU). ``died`` counts engine deaths: the bound of
    the engine stage's ``max_restarts`` (``probe.max_engine_restarts``), kept by raylc itself
    since Ray 2.64 takes ``max_restarts`` out of ``map_batches`` (Ray 2.60
    ``data/dataset.py:226-242``) and Ray Data's own default restarts an actor without end.
    ``ready`` and ``batch`` record when engines were built and when each batch entered and left
    an engine (wall clock), so that :meth:`summary` can tell the engines' busy window from the
    stream's start-up (``bench_real``; ``--verbose``). ``actor`` records the handle of each
    actor of the stream (prepare and engine), so that a failed stream can release them
    (:func:`release_actors`)."""

    def __init__(self) -> None:
        self.members: dict[str, Any] = {}  # actor id -> handle (a restarted actor keeps its id)
        self.count = 0
        self.ready_at: list[float] = []
        self.first_in: Optional[float] = None
        self.last_out: Optional[float] = None
        self.requests = 0
        self.batches = 0

    def died(self) -> int:
        self.count += 1
        return self.count

    def actor(self, handle: Any) -> None:
        self.members[handle._actor_id.hex()] = handle

    def actors(self) -> list[Any]:
        """The stream's actors recorded, as handles."""
        return list(self.members.values())

    def ready(self, at: float) -> None:
        self.ready_at.append(at)

    def batch(self, entered: float, left: float, requests: int) -> None:
        self.first_in = entered if self.first_in is None else min(self.first_in, entered)
        self.last_out = left if self.last_out is None else max(self.last_out, left)
        self.requests += requests
        self.batches += 1

    def summary(self) -> dict[str, Any]:
        """Deaths, engine build times, first batch in, last batch out (``time.time()``), requests."""
        return {"deaths": self.count, "ready_at": list(self.ready_at), "first_in": self.first_in,
                "last_out": self.last_out, "requests": self.requests, "batches": self.batches}


class EngineRestartsExceeded(RuntimeError):
    """The stream's engines died more often than their stage's ``max_restarts`` allows."""


def bound(cls: type, name: str, **kwargs: Any) -> type:
    """``cls`` named ``name`` (Ray Data names the pool ``MapBatches(<name>)``) with its constructor
    arguments bound into the class itself, which is pickled with the UDF, instead of
    ``fn_constructor_kwargs``, which Ray Data puts in the object store and which Ray warns a
    restarted actor may find gone (ray-project/ray#53727). Ray 2.60 still logs that warning once
    per driver for a restartable pool (measured); the restart tests pass."""

    def __init__(self: Any) -> None:
        cls.__init__(self, **kwargs)

    return type(name, (cls,), {"__init__": __init__, "__qualname__": name, "__module__": cls.__module__})


def _configure_data(job: Job, backend: BackendPlugin) -> None:
    """Ray Data settings for an inference stream. A backend without the no-progress guard
    (``no_progress_guard``: vLLM) runs without Ray Data's ``DataContext.execution_no_progress_timeout_s``
    (1800 s by default) unless ``ray.no_progress_timeout_s`` sets one: a batch of 128K-token
    prompts, or the wait for a GPU node, can take longer than any fixed limit, and a dead engine
    is handled by the actor restarts instead."""
    import ray.data

    _quiet_ray_data()
    ctx = ray.data.DataContext.get_current()
    if job.ray.no_progress_timeout_s is not None:
        ctx.execution_no_progress_timeout_s = job.ray.no_progress_timeout_s
    elif not backend.no_progress_guard:
        ctx.execution_no_progress_timeout_s = -1  # off (no_progress_guard.py: -1 disables it)
    else:  # Ray Data's default, also after an earlier stream of this process set another
        ctx.execution_no_progress_timeout_s = ray.data.DataContext().execution_no_progress_timeout_s
    # Ray Data's bars only with --verbose: their totals are estimates (docs/runs.md); raylc logs
    # its own count of stored requests (raylc.run.progress.InferProgress)
    ctx.enable_progress_bars = verbose()
    ctx.print_on_execution_start = False
    ctx.raise_original_map_exception = True  # a failed map raises the user code's exception: one clear line


def _map_batches(stage: PipelineStage, first: bool) -> dict[str, Any]:
    """A stage's ``map_batches`` arguments: its actor pool, CPUs, Ray options and batch size (the
    first stage takes one request file a call)."""
    import ray.data

    k = stage.concurrent_batches
    calls = {"max_concurrent_calls_per_actor": k, "max_tasks_in_flight_per_actor": 2 * k} if k else {}
    return {"batch_size": 1 if first else stage.batch_size, "batch_format": "pyarrow",
            "compute": ray.data.ActorPoolStrategy(size=stage.actors, **calls), "num_cpus": stage.num_cpus,
            **stage.options}


def pipeline_stages(job: Job) -> list[PipelineStage]:
    """The stages of ``job.probe``'s backend, which :func:`check_placeable` checks and
    :func:`stream` runs."""
    return backend_of(job.probe).stages(job, verbose())


def stream(source: RequestFiles, job: Job, ledger: Any = None,
           stages: Optional[list[PipelineStage]] = None) -> Iterator[pl.DataFrame]:
    """Completion rows of the requests through ``stages`` (default :func:`pipeline_stages`),
    streamed in batches as they finish (any order). An engine pipeline (a stage with ``max_restarts``) records
    its actors in ``ledger`` (an :class:`EngineLedger` actor, a new one by default); when its
    stream fails, is interrupted or is abandoned, they are killed (:func:`release_actors`), so
    that they hold no GPU or CPU in a long-lived Ray session."""
    if not source.files:
        return
    import ray

    _configure_data(job, backend_of(job.probe))
    stages = pipeline_stages(job) if stages is None else stages
    if any(stage.max_restarts is not None for stage in stages):
        ledger = ledger if ledger is not None else ray.remote(num_cpus=0)(EngineLedger).remote()
    else:
        ledger = None
    ds = source.dataset()
    for i, stage in enumerate(stages):
        actor = EngineStageActor if stage.concurrent_batches else StageActor
        udf = bound(actor, f"{stage.name.capitalize()}Actor", stage=stage, job=job, source=source, first=i == 0,
                    ledger=ledger)
        ds = ds.map_batches(udf, **_map_batches(stage, i == 0))
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            yield pl.from_arrow(batch)  # type: ignore[misc]
    except BaseException:  # failed, interrupted, or abandoned by its reader (GeneratorExit)
        if ledger is not None:
            release_actors(ledger)
        raise


def release_actors(ledger: Any, timeout_s: float = 10.0) -> int:
    """Kill (no restart) every actor ``ledger`` recorded, and return how many. Ray Data does not
    stop the actors of a failed stream: in a long-lived Ray session its prepare and engine actors,
    an engine that failed to start included, would hold their GPUs or CPUs until the driver
    exits. A finished stream's actors are let go by Ray Data, which shuts their engines down."""
    import ray

    try:
        actors = ray.get(ledger.actors.remote(), timeout=timeout_s)
    except Exception:  # the ledger is gone: nothing to release through it
        return 0
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # gone already
            pass
    return len(actors)


def infer(folder: RunFolder, job: Job, pending: Iterable[pl.DataFrame], progress: InferProgress,
          log: Callable[[str], None], table: str = "", shards: str = SHARDS) -> None:
    """The one inference path: the ``pending`` request rows (chunks, counted in ``progress``)
    become the folder's request table, which streams through the probe's pipeline
    (:func:`stream`) into the folder's checkpoint shards under ``shards``; the table is removed
    when the stream ends. ``table``: the run-relative path of the suite's built table."""

    def counted(chunks: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        for chunk in chunks:
            progress.planned(chunk.height)
            yield chunk

    files = folder.write_requests(counted(pending), block_rows(job))
    progress.save()  # the planned count, before the first completion
    try:
        if files:
            stages = pipeline_stages(job)
            write_shards(folder, job, stages, stream(RequestFiles(folder, files, table), job, stages=stages), progress,
                         log, shards)
    finally:
        folder.drop_requests()


#: what to change when a local Ray lacks a resource an actor needs (GPUs first: the usual case)
_REMEDIES = {
    "GPU": "submit the job to a cluster with GPUs, or run vLLM on CPUs: probe.device: cpu with vLLM's CPU build",
    "accelerator": "submit the job to a cluster with that accelerator, or remove probe.accelerator_type",
    "CPU": "lower the actor's CPUs, e.g. ray.actor_num_cpus or probe.engine_num_cpus, or raise ray.num_cpus",
}


def check_placeable(stages: list[PipelineStage], job: Job, log: Callable[[str], None]) -> None:
    """Each stage's actor must fit on one alive node: its CPUs, GPUs and accelerator type. Ray
    Data waits for its actors without a limit, so an actor no node can hold is a run that never
    ends. A local Ray started here never grows: RuntimeError; a cluster's autoscaler may add a
    node that fits: a warning."""
    import ray

    if not ray.is_initialized():  # no cluster to ask (a stream run in process)
        return
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    for stage in stages:
        need = {"CPU": stage.num_cpus, "GPU": stage.options.get("num_gpus") or 0}
        if stage.options.get("accelerator_type"):
            need[f"accelerator_type:{stage.options['accelerator_type']}"] = 0.001
        need = {k: v for k, v in need.items() if v}
        if any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
            continue
        most = {k: max((n.get(k, 0) for n in nodes), default=0) for k in need}
        largest = ", ".join(f"{k} {v:g}" for k, v in most.items())
        msg = (f"each {stage.label or stage.name} actor needs " + ", ".join(f"{k} {v:g}" for k, v in need.items())
               + f" on one node; the Ray cluster's largest node has {largest}")
        if not job.ray.cluster()[0]:
            short = {k.partition("_type:")[0] for k, v in need.items() if most[k] < v}  # accelerator_type:X
            remedy = next((text for kind, text in _REMEDIES.items() if kind in short), _REMEDIES["CPU"])
            raise RuntimeError(f"{msg} and this local Ray instance cannot grow ({remedy})")
        log(f"warning: {msg}; Ray waits until the cluster adds a node that fits")


def write_shards(folder: RunFolder, job: Job, stages: list[PipelineStage], batches: Iterable[pl.DataFrame],
                 progress: InferProgress, log: Callable[[str], None], shards: str = SHARDS) -> None:
    """Write ``batches`` (a lazy stream from the actor pools of ``stages``) as shards as they
    come, each flush counted in ``progress``. First the checks: the backend's endpoint before Ray
    starts (fail fast, before any shard), then that every actor of ``stages`` fits on an alive node
    (:func:`check_placeable`); a failed pipeline keeps what finished and raises
    :class:`InferenceFailed` with its root cause."""
    backend_of(job.probe).check_endpoint(job)
    ensure_ray(job)
    try:
        check_placeable(stages, job, log)
    except RuntimeError as exc:
        raise InferenceFailed(str(exc)) from None
    writer = folder.shard_writer(job.inference.shard_rows, job.inference.shard_seconds, progress.stored, shards)
    try:
        for batch in batches:
            writer.add(batch)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: keep what finished
        writer.flush()
        raise
    except Exception as exc:  # a failed pipeline: keep what finished, report the root cause
        writer.flush()
        raise InferenceFailed(
            f"{job.probe.backend} inference failed: {root_cause(exc)} (finished requests are "
            f"kept; re-run with --run-id {folder.run_id} to continue)"
        ) from None
    writer.flush()
