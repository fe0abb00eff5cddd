"""Thin Ray layer: start or join Ray, map per-row stages over Ray Data, per-task stages over Ray tasks."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import polars as pl
import pyarrow as pa

from raylc.backends.registry import ENGINE, backend_of
from raylc.spec import Job


def ensure_ray(job: Job) -> None:
    """Join the cluster at ``ray.address`` or RAY_ADDRESS, else start a local Ray sized to the
    machine. A cluster that does not answer within ``ray.connect_timeout_s`` is a
    :class:`RayUnavailable` (one line naming the address and where it came from)."""
    address, source = ((job.ray.address, "ray.address") if job.ray.address
                       else (os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS"))
    init_ray(address, job.ray.num_cpus, job.ray.include_dashboard, timeout_s=job.ray.connect_timeout_s, source=source)


_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (\S.*)$")


def root_cause(exc: BaseException) -> str:
    """One line: the innermost exception of a chain (Ray wraps user-code errors twice). An
    actor that died in its constructor (``ActorDiedError``) carries the user code's error only
    as traceback text: its last ``Type: message`` line is the cause."""
    chain = [exc]
    while chain[-1].__cause__ is not None and chain[-1].__cause__ is not chain[-1]:
        chain.append(chain[-1].__cause__)  # type: ignore[arg-type]
    # a task's own exception (RayTaskError.cause), not what Ray chained under it (an empty SystemException)
    tasks = [e for e in chain if isinstance(getattr(e, "cause", None), BaseException) and type(e).__name__.startswith(
        "RayTaskError")]
    if tasks and not str(chain[-1]).strip():  # Ray Data appends its retry advice to the message: the first line
        cause = tasks[-1].cause  # type: ignore[attr-defined]
        return f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}".strip()
    for e in chain:
        if getattr(e, "_actor_init_failed", False):
            raised = [m for m in map(_RAISED.match, (ln.strip() for ln in str(e).splitlines())) if m]
            if raised:
                return f"{raised[-1].group(1).rsplit('.', 1)[-1]}: {raised[-1].group(2)}"
        elif type(e).__name__ in ("ActorDiedError", "RayActorError"):  # its process exited mid-task
            first = (str(e).strip().splitlines() or [""])[0]
            return f"{type(e).__name__}: {first}"
    text = str(chain[-1]).strip().splitlines()
    return f"{type(chain[-1]).__name__}: {text[-1] if text else ''}".strip()


class RayUnavailable(RuntimeError):
    """The Ray cluster named by an address did not answer (in time); the message is one line."""


CONNECT_TIMEOUT_S = 60.0  # default of ray.connect_timeout_s
REFUSED_GRACE_S = 5.0  # a refused connection is retried this long (a head that is starting), then fails
# an HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, the Ray Client
# server) answers with its own SETTINGS frame (RFC 9113 §3.4), a silent port with nothing
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _who(address: str, source: Optional[str]) -> tuple[str, str]:
    """(the address and where it came from, what to do about it) for a one-line error."""
    if source == "RAY_ADDRESS":
        return f"RAY_ADDRESS={address} (from the environment)", "unset RAY_ADDRESS to start a local Ray"
    if source:
        return f"{source} {address} (from the job file)", f"fix {source}, or remove it to start a local Ray"
    return f"Ray address {address}", "check the address"


def check_ray_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S, source: Optional[str] = None) -> None:
    """Raise :class:`RayUnavailable` unless a gRPC server (Ray's GCS) answers at ``address``
    (``host:port`` or ``ray://host:port``) within ``timeout_s``: ``ray.init`` itself waits for
    an unreachable GCS far longer (Ray 2.60, ``_private/node.py`` ``Node._init_gcs_client``:
    ``NUM_REDIS_GET_RETRIES`` = 20 attempts, each a ``GcsClient`` that waits for the cluster id,
    about 40 s, printing a GCS warning every 30 s). A TCP connect, then an HTTP/2 preface
    whose SETTINGS reply proves a gRPC server listens (skipped with RAY_USE_TLS, where the TLS
    handshake comes first). A refused connection is retried for :data:`REFUSED_GRACE_S`.
    ``auto``, ``local`` and addresses without a port are left to ``ray.init``."""
    who, hint = _who(address, source)
    host, sep, port = address.split("://", 1)[-1].strip().rstrip("/").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    host = host.strip("[]")
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no reply"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RayUnavailable(f"{who} did not answer within {timeout_s:g} s ({last}); {hint}")
        try:
            with socket.create_connection((host, int(port)), timeout=remaining) as sock:
                if tls:
                    return
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(_H2_HELLO)
                head = b""
                while len(head) < 9:
                    chunk = sock.recv(9 - len(head))
                    if not chunk:
                        break
                    head += chunk
            if len(head) == 9 and head[3] == 4:  # frame type 4: SETTINGS
                return
            raise RayUnavailable(
                f"{who} answered, but not as a Ray cluster (no gRPC reply: expected the GCS address, "
                f"host:6379, not the dashboard's); {hint}")
        except socket.gaierror as exc:
            raise RayUnavailable(f"{who}: cannot resolve {host!r} ({exc.strerror}); {hint}") from None
        except ConnectionRefusedError:
            last = "connection refused"
            if time.monotonic() - start >= min(REFUSED_GRACE_S, timeout_s):
                raise RayUnavailable(f"{who} refused the connection (no Ray cluster there); {hint}") from None
        except (socket.timeout, TimeoutError):
            last = "no reply"
            continue
        except OSError as exc:  # reset, host or network unreachable: retried until the deadline
            last = exc.strerror or type(exc).__name__
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None, include_dashboard: bool = False,
             timeout_s: float = CONNECT_TIMEOUT_S, source: Optional[str] = None) -> None:
    """``ray.init`` once per process: join ``address`` if given, else start a local instance.
    An address is checked first (:func:`check_ray_address`, within ``timeout_s``); ``source``
    says where it came from for the error (``RAY_ADDRESS``, ``ray.address``; default:
    RAY_ADDRESS when ``address`` is its value). Failing to join is a :class:`RayUnavailable`.
    A Python SIGTERM handler set before (``raylc run``'s) is set again after: the core worker
    that ``ray.init`` starts installs absl's failure signal handler, SIGTERM included, which
    prints a stack and aborts the process."""
    import ray

    if ray.is_initialized():
        return
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        _init(address, num_cpus, include_dashboard, timeout_s, source)
    finally:
        if callable(sigterm):
            signal.signal(signal.SIGTERM, sigterm)


VERBOSE_ENV = "RAYLC_VERBOSE"


def verbose() -> bool:
    """Whether Ray's own logs reach the console (``raylc --verbose``, or RAYLC_VERBOSE=1)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def _quiet_core_worker(ray: Any) -> None:
    """Keep the driver's core worker (C++) from printing error-level lines that are not errors
    while ``ray.init`` creates it: Ray Data passes every actor its transformer as an object
    reference, and the core worker logs "constructor arguments in the object store" at error
    level for each actor with restarts (ray-project/ray#57733). RAY_BACKEND_LOG_LEVEL is read
    when the core worker starts, inside ``ray._private.worker.connect``, after the local node's
    processes were spawned, so those processes, the workers they start and a cluster's nodes
    keep their log levels. An error in ``connect`` is raised as usual (and made one line by the
    caller); only its console output is dropped. Nothing changes at ``--verbose``, or if the
    user set the variable."""
    if verbose() or "RAY_BACKEND_LOG_LEVEL" in os.environ:
        return
    worker = ray._private.worker
    connect = getattr(worker, "connect", None)
    if connect is None or getattr(connect, "_raylc_quiet", False):
        return

    def quiet_connect(*args: Any, **kwargs: Any) -> Any:
        os.environ["RAY_BACKEND_LOG_LEVEL"] = "fatal"
        sys.stderr.flush()
        saved = os.dup(2)  # the C++ logger announces the level it read on fd 2: hide that one line
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            return connect(*args, **kwargs)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
            os.environ.pop("RAY_BACKEND_LOG_LEVEL", None)

    quiet_connect._raylc_quiet = True  # type: ignore[attr-defined]
    worker.connect = quiet_connect


class _NoErrorRecords(logging.Filter):
    """Drops Ray Data's error records from the console: a failed stream is raised to raylc,
    which prints it as one line; the record, with its traceback, stays in the session's
    ``logs/ray-data/`` files."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def _quiet_ray_data() -> None:
    """Ray Data's console handler (``ray/data/_internal/logging.py``) keeps its progress lines
    and loses its error records, unless ``--verbose``."""
    if verbose():
        return
    for handler in logging.getLogger("ray.data").handlers:
        console = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
        if console and not any(
                isinstance(f, _NoErrorRecords) for f in handler.filters):
            handler.addFilter(_NoErrorRecords())


class _ImportPaths(list):
    """A job's ``_py_driver_sys_path`` that leaves out folders holding another ``raylc``."""

    def extend(self, paths: Any) -> None:
        super().extend(p for p in paths if not _shadows_raylc(p))


def _shadows_raylc(folder: str) -> bool:
    import raylc

    here = Path(folder) / "raylc" / "__init__.py"
    return here.is_file() and here.resolve() != Path(raylc.__file__).resolve()


def _job_config() -> dict[str, Any]:
    """``ray.init(job_config=...)`` when the driver runs from a folder holding another ``raylc/``
    checkout than the one imported: Ray puts the driver's working folder first on every worker's
    import path (Ray 2.60, ``_private/worker.py:2716-2719``), where it would shadow raylc."""
    if not _shadows_raylc(os.getcwd()):
        return {}
    from ray.job_config import JobConfig

    config = JobConfig()
    config._py_driver_sys_path = _ImportPaths(config._py_driver_sys_path)
    return {"job_config": config}


def _init(address: Optional[str], num_cpus: Optional[int], include_dashboard: bool, timeout_s: float,
          source: Optional[str]) -> None:
    import ray

    _quiet_core_worker(ray)
    common: dict[str, Any] = {"logging_level": logging.INFO if verbose() else logging.ERROR, "configure_logging": True,
                              **_job_config()}
    if address:
        if source is None and address == os.environ.get("RAY_ADDRESS"):
            source = "RAY_ADDRESS"
        check_ray_address(address, timeout_s, source)
        try:
            ray.init(address=address, **common)
        except Exception as exc:  # version mismatch, a GCS that answered but refused this driver, ...
            who, hint = _who(address, source)
            detail = (str(exc).strip().splitlines() or [""])[0]
            raise RayUnavailable(
                f"{who}: could not join the Ray cluster ({type(exc).__name__}: {detail}); {hint}") from None
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=include_dashboard, **common)


def _configure_data(job: Job) -> None:
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
    elif not backend_of(job.probe).no_progress_guard:
        ctx.execution_no_progress_timeout_s = -1  # off (no_progress_guard.py: -1 disables it)
    # Ray Data's bars only with --verbose: their totals are estimates (docs/runs.md); raylc logs
    # its own count of stored requests (raylc.run.progress.InferProgress)
    ctx.enable_progress_bars = verbose()
    ctx.print_on_execution_start = False
    ctx.raise_original_map_exception = True  # a failed map raises the user code's exception: one clear line


@dataclass(frozen=True)
class RequestSource:
    """Where a stream's request rows come from: Parquet ``files`` of a store (store-relative
    paths), each read by the first-stage actor that takes it, on a worker, so the driver
    neither holds nor puts the requests; or a small in-memory ``frame`` (judge calls).
    ``table``: the store path parts of the suite's built table (the DOLCE problems that span
    references are rendered from, a sweep's samples), which the backend is built with."""

    store_root: str = "."
    files: tuple[str, ...] = ()
    frame: Optional[pl.DataFrame] = None
    table: tuple[str, ...] = ()

    def suite_table(self) -> Optional[pl.LazyFrame]:
        """The suite's built table, scanned lazily (None: no table)."""
        if not self.table:
            return None
        import pyarrow.dataset as pads

        from raylc.io.store import Store

        store = Store(self.store_root)
        return pl.scan_pyarrow_dataset(pads.dataset(store.path(*self.table), filesystem=store.fs, format="parquet"))

    def dataset(self) -> Any:
        """A dataset of request rows (``frame``), or of file names, one per block (``files``):
        a task reads one file, so completions stream out a file at a time."""
        import ray.data

        if self.frame is not None:
            return ray.data.from_arrow(self.frame.to_arrow())
        return ray.data.from_items([{FILE: f} for f in self.files], override_num_blocks=len(self.files))

    def batch_size(self, job: Job) -> int:
        """First-stage batch: one file, or ``ray.batch_size`` rows of an in-memory frame."""
        return job.ray.batch_size if self.frame is not None else 1

    def rows(self, batch: pa.Table) -> pl.DataFrame:
        """The request rows of a first-stage batch: read from the files it names, or itself."""
        if FILE not in batch.column_names:
            return pl.from_arrow(batch)  # type: ignore[return-value]
        import pyarrow.parquet as pq

        from raylc.io.store import Store

        store = Store(self.store_root)
        frames = []
        for f in batch.column(FILE).to_pylist():
            with store.open_input(*f.split("/")) as fh:
                frames.append(pl.from_arrow(pq.read_table(fh)))
        return pl.concat(frames, how="vertical_relaxed")  # type: ignore[arg-type]


FILE = "_request_file"


def block_rows(job: Job) -> int:
    """Request rows per file of the request table, the unit of work that streams back to the
    shards: the backend's ``block_factor`` batches (vLLM: one, text backends: four)."""
    return max(job.ray.batch_size * backend_of(job.probe).block_factor, 1)


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


class PrepareActor:
    """CPU actor of the prepare stage: reads its request rows, renders their prompts (loading
    only the problems they name) and, for a token engine, fits and tokenizes them with the
    engine's tokenizer. ``ledger``: the stream's :class:`EngineLedger`, which it joins."""

    def __init__(self, job: Job, source: RequestSource, ledger: Any = None):
        from raylc.run.inference import ProblemSource, PromptTokenizer

        _join(ledger)
        self.job, self.source = job, source
        self.problems = ProblemSource(source.store_root, source.table) if source.table else ProblemSource(
            problems=pl.DataFrame())
        self.tokenizer = None
        backend = backend_of(job.probe)
        if backend.pipeline == ENGINE:
            self.tokenizer = PromptTokenizer.load(*backend.prompt_tokenizer(job.probe))

    def prepared(self, batch: pa.Table) -> pl.DataFrame:
        from raylc.run.inference import prepare

        return prepare(self.source.rows(batch), self.problems, self.job, self.tokenizer)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return self.prepared(batch).to_arrow()


class TextEngineActor(PrepareActor):
    """Prepare and generate in one actor for text backends (simulated, OpenAI-compatible):
    nothing to tokenize, so no second pool. The backend is built with the suite's table and
    closed (its kept connections) when Ray Data lets the actor go (``__ray_shutdown__`` drops the
    UDF: ``__del__``), or at the latest when the worker's interpreter exits (``atexit``)."""

    def __init__(self, job: Job, source: RequestSource):
        import atexit
        import weakref

        super().__init__(job, source)
        self.backend = backend_of(job.probe).text_backend(job, source.suite_table())
        close = weakref.WeakMethod(self._close)  # atexit must not keep the actor alive
        atexit.register(lambda: (method := close()) is not None and method())

    def __call__(self, batch: pa.Table) -> pa.Table:
        from raylc.run.inference import generate_text

        return generate_text(self.prepared(batch), self.backend).to_arrow()

    def _close(self) -> None:
        """Close the backend once, whichever of ``__del__`` and ``atexit`` comes first."""
        backend, self.backend = getattr(self, "backend", None), None
        if backend is not None:
            backend.close()

    def __del__(self) -> None:
        self._close()


class EngineLedger:
    """One stream's engine record (a Ray actor, no CPU). ``died`` counts engine deaths: the bound
    of ``probe.max_engine_restarts``, kept by raylc itself since Ray 2.64 takes ``max_restarts``
    out of ``map_batches`` (Ray 2.60 ``data/dataset.py:226-242``) and Ray Data's own default
    restarts an actor without end. ``ready`` and ``batch`` record when engines were built and when
    each batch entered and left an engine (wall clock), so that :meth:`summary` can tell the
    engines' busy window from the stream's start-up (``bench_real``; ``--verbose``). ``actor``
    records the handle of each actor of the stream (prepare and engine), so that a failed stream
    can release them (:func:`release_actors`)."""

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
    """The stream's engines died more often than ``probe.max_engine_restarts`` allows."""


class EngineActor:
    """GPU (or CPU) actor of the engine stage: one vLLM engine, built here (a start-up failure is
    raised by each batch) and shut down with the pool; an async UDF, so Ray Data keeps
    ``max_concurrent_batches`` batches in flight on it. A dead engine ends the process
    (``os._exit``) so that Ray restarts the actor and retries its batches, until the stream's
    engines died more than ``probe.max_engine_restarts`` times (``ledger``, an
    :class:`EngineLedger` actor): then the batch fails with
    :class:`EngineRestartsExceeded`. The engine is shut down when Ray Data lets the actor go
    (``__ray_shutdown__`` drops the UDF: ``__del__``), and at the latest when the worker's
    interpreter exits (``atexit``, before its modules are torn down)."""

    def __init__(self, job: Job, ledger: Any = None):
        self.job, self.ledger = job, ledger
        self.engine: Any = None
        self._failed: Optional[BaseException] = None
        _join(ledger)  # first: an engine that fails to start is released with the stream
        try:  # here, so that the engine starts while the prepare actors do
            self.engine = self._build()
        except Exception as exc:  # raised by the first batch: one line, where a failed constructor
            self._failed = exc  # has Ray print its creation-task traceback from the worker
        else:
            self._record("ready", time.time())

    def _record(self, method: str, *args: Any) -> None:
        """Tell the ledger (fire and forget: a gone ledger never fails a batch)."""
        if self.ledger is not None:
            try:
                getattr(self.ledger, method).remote(*args)
            except Exception:
                pass

    def _build(self) -> Any:
        import atexit

        engine = backend_of(self.job.probe).engine(self.job.probe)
        atexit.register(engine.shutdown)
        return engine

    async def __call__(self, batch: pa.Table) -> pa.Table:
        from raylc.backends.base import EngineDead
        from raylc.run.inference import generate_tokens

        if self._failed is not None:
            raise self._failed
        entered = time.time()
        try:
            out = await generate_tokens(pl.from_arrow(batch), self.engine, self.job.probe.max_tokens())  # type: ignore[arg-type]
        except EngineDead as exc:
            allowed = self.job.probe.max_engine_restarts
            died = await self._count_death()
            if died > allowed:
                raise EngineRestartsExceeded(
                    f"the vLLM engine died {died} times, more than probe.max_engine_restarts = {allowed} allows "
                    f"(last: {exc})") from None
            print(f"raylc: vLLM engine died ({exc}); exiting so that Ray restarts this actor", file=sys.stderr,
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

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


def bound(cls: type, **kwargs: Any) -> type:
    """``cls`` with its constructor arguments bound into the class itself, which is pickled with
    the UDF, instead of ``fn_constructor_kwargs``, which Ray Data puts in the object store and
    which Ray warns a restarted actor may find gone (ray-project/ray#53727). Ray 2.60 still logs
    that warning once per driver for a restartable pool (measured); the restart tests pass."""

    def __init__(self: Any) -> None:
        cls.__init__(self, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__qualname__": cls.__qualname__,
                                       "__module__": cls.__module__})


def stream_requests(source: RequestSource, job: Job, ledger: Any = None) -> Iterator[pl.DataFrame]:
    """Completion rows of the requests through the probe's pipeline, streamed in batches as
    they finish (any order): for an engine backend (vLLM), its pool's ``prepare_actors`` CPU
    actors then ``replicas`` engine actors (with the pool's actor options: GPUs, accelerator
    type); for text backends one pool of ``ray.actors`` actors with ``ray.actor_num_cpus`` CPUs
    (fractional, so the pool never starves other tasks on small machines). ``ledger``: an
    :class:`EngineLedger` actor to record the engines in (a new one by default). When the
    stream fails, is interrupted or is abandoned, an engine pipeline's actors are killed
    (:func:`release_actors`), so that they hold no GPU or CPU in a long-lived Ray session."""
    if source.frame is None and not source.files:
        return
    import ray.data

    _configure_data(job)
    ds = source.dataset()
    first = {"job": job, "source": source if source.frame is None else RequestSource()}
    backend = backend_of(job.probe)
    if backend.pipeline != ENGINE:
        ds = ds.map_batches(bound(TextEngineActor, **first), batch_size=source.batch_size(job), batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=job.ray.actors), num_cpus=job.ray.actor_num_cpus)
    else:
        pool = backend.engine_pool(job, job.ray.batch_size, verbose())
        if ledger is None:
            ledger = ray.remote(num_cpus=0)(EngineLedger).remote()
        ds = ds.map_batches(
            bound(PrepareActor, **first, ledger=ledger), batch_size=source.batch_size(job), batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=pool.prepare_actors), num_cpus=job.ray.actor_num_cpus,
        )
        k = pool.concurrent_batches
        opts = dict(pool.options)  # GPUs (or CPUs), accelerator type, runtime_env: named parameters
        ds = ds.map_batches(
            bound(EngineActor, job=job, ledger=ledger), batch_size=job.ray.batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=pool.replicas, max_concurrent_calls_per_actor=k,
                                               max_tasks_in_flight_per_actor=2 * k),
            num_cpus=opts.pop("num_cpus", job.ray.actor_num_cpus), **opts,
        )
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


def generate_on_ray(prompts: pl.Series, job: Job) -> pl.DataFrame:
    """Generations for ``prompts`` (in order) from ``job.probe``'s pipeline (judge calls: a
    small in-memory request table, each prompt all context)."""
    frame = pl.DataFrame({"row": pl.int_range(len(prompts), eager=True), "context": prompts}).select(
        "row", head=pl.lit(""), context=pl.col("context"), tail=pl.lit(""))
    parts = list(stream_requests(RequestSource(frame=frame), job))
    return pl.concat(parts).sort("row").drop("row") if parts else pl.DataFrame()


def task_mapper(use_ray: Optional[bool], default: bool) -> Optional[Callable[..., list[Any]]]:
    """:func:`map_tasks` after joining RAY_ADDRESS (or starting a local Ray) when ``use_ray``
    (None: ``default``), else None (in process). For the commands that work on a table
    (``fit``, ``sensitivity``, ``longscore``)."""
    if not (default if use_ray is None else use_ray):
        return None
    init_ray(os.environ.get("RAY_ADDRESS"))
    return map_tasks


def map_tasks(fn: Callable[..., Any], frames: list[pl.DataFrame], *args: Any) -> list[Any]:
    """Run ``fn(frame, *args)`` as one Ray task per frame; results in input order. The shared
    ``args`` go to the object store once (not once per task); on a terminal a progress bar
    counts the finished tasks."""
    import ray

    remote = ray.remote(fn)
    shared = [ray.put(a) for a in args]
    refs = [remote.remote(frame, *shared) for frame in frames]
    if len(refs) > 1 and sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"{getattr(fn, '__name__', 'task')}: {len(refs)} Ray tasks", total=len(refs))
            pending = refs
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                bar.advance(task, len(done))
    return ray.get(refs)
