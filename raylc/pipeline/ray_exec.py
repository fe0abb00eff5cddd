"""Thin Ray layer: start or join Ray, map per-row stages over Ray Data, per-task stages over Ray tasks."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Iterable, Iterator, Optional

import polars as pl
import pyarrow as pa

from raylc.spec import Job


def ensure_ray(job: Job) -> None:
    """Join the cluster at ``ray.address`` or RAY_ADDRESS, else start a local Ray sized to the machine."""
    init_ray(job.ray.address or os.environ.get("RAY_ADDRESS"), job.ray.num_cpus, job.ray.include_dashboard)


def check_gpus(job: Job, log: Callable[[str], None]) -> None:
    """vLLM engines need ``tensor_parallel_size`` GPUs each. A local Ray started here can never
    gain GPUs, so that is an error; a cluster may still scale GPU workers up, so a warning."""
    import ray

    if job.probe.backend != "vllm":
        return
    have = ray.cluster_resources().get("GPU", 0)
    need = job.probe.tensor_parallel_size
    if have >= need:
        return
    msg = f"probe.backend vllm needs {need} GPU(s) per replica; the Ray cluster has {have:g} GPU(s) now"
    if not (job.ray.address or os.environ.get("RAY_ADDRESS")):
        raise RuntimeError(msg + " and this local Ray instance cannot gain any (submit the job to a GPU cluster)")
    log(f"warning: {msg}; waiting for the autoscaler to add GPU workers")


def root_cause(exc: BaseException) -> str:
    """One line: the innermost exception of a chain (Ray wraps user-code errors twice)."""
    while exc.__cause__ is not None and exc.__cause__ is not exc:
        exc = exc.__cause__
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".strip()


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None, include_dashboard: bool = False) -> None:
    """``ray.init`` once per process: join ``address`` if given, else start a local instance."""
    import ray

    if ray.is_initialized():
        return
    common: dict[str, Any] = {"logging_level": logging.ERROR, "configure_logging": True}
    if address:
        ray.init(address=address, **common)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=include_dashboard, **common)


def _configure_data(job: Job) -> None:
    import ray.data

    ctx = ray.data.DataContext.get_current()
    if job.ray.no_progress_timeout_s is not None:
        ctx.execution_no_progress_timeout_s = job.ray.no_progress_timeout_s
    ctx.enable_progress_bars = True
    ctx.print_on_execution_start = False
    ctx.raise_original_map_exception = True  # a failed map raises the user code's exception: one clear line


class _InferActor:
    """Ray Data actor: holds the problems and the backend; renders prompts and runs the probe."""

    def __init__(self, job: Job, problems: pl.DataFrame):
        from raylc.backends import make_backend

        self.job = job
        self.problems = problems
        self.backend = make_backend(job, problems)

    def __call__(self, batch: pa.Table) -> pa.Table:
        from raylc.pipeline.stages import infer

        return infer(pl.from_arrow(batch), self.problems, self.job, self.backend).to_arrow()  # type: ignore[arg-type]


def pool_options(job: Job) -> dict[str, Any]:
    """Actor pool size and per-actor resources for the probe's backend.

    vLLM: ``replicas`` engine actors, each holding ``tensor_parallel_size`` GPUs and one CPU.
    Simulated / OpenAI-compatible: ``ray.actors`` actors with ``ray.actor_num_cpus`` CPUs
    (fractional, so the pool never starves the Ray Data read tasks on small machines).
    """
    import ray.data

    if job.probe.backend == "vllm":
        from raylc.backends.vllm_engine import actor_options

        return {"compute": ray.data.ActorPoolStrategy(size=job.probe.replicas),
                "num_cpus": max(1.0, job.ray.actor_num_cpus), **actor_options(job.probe)}
    return {"compute": ray.data.ActorPoolStrategy(size=job.ray.actors), "num_cpus": job.ray.actor_num_cpus}


def _stream(chunks: Iterable[pl.DataFrame], actor: type, kwargs: dict[str, Any], job: Job) -> Iterator[pl.DataFrame]:
    """Rows of ``chunks`` through an actor pool of ``actor(**kwargs)`` (``job.probe``'s backend
    resources), streamed back in batches as they finish (any order). Each chunk is cut into
    blocks that go to Ray's object store as it is read, so the driver holds one chunk at a time."""
    import ray
    import ray.data

    _configure_data(job)
    size = max(job.ray.batch_size * 4, 1)
    refs = [ray.put(chunk.slice(i, size).to_arrow()) for chunk in chunks for i in range(0, chunk.height, size)]
    if not refs:
        return
    ds = ray.data.from_arrow_refs(refs).map_batches(
        actor, fn_constructor_kwargs=kwargs, batch_size=job.ray.batch_size, batch_format="pyarrow",
        **pool_options(job),
    )
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        yield pl.from_arrow(batch)  # type: ignore[misc]


def infer_on_ray(spans: pl.DataFrame | Iterable[pl.DataFrame], problems: pl.DataFrame,
                 job: Job) -> Iterator[pl.DataFrame]:
    """Completions of the spans (a frame, or an iterable of frames such as chunks read from
    the spans table) from the backend's actor pool, streamed in batches."""
    chunks = [spans] if isinstance(spans, pl.DataFrame) else spans
    return _stream(chunks, _InferActor, {"job": job, "problems": problems}, job)


PROMPT_COLUMNS = ("prompt", "head", "context", "tail", "max_tokens")


class _GenerateActor:
    """Ray Data actor for prompt rows: ``prompt`` (or ``head, context, tail``) and an optional
    ``max_tokens`` in; the other columns pass through and the generation columns are appended.
    ``knowledge`` is what a simulated probe may read (a samples table), None for real backends."""

    def __init__(self, job: Job, knowledge: Optional[pl.DataFrame] = None):
        from raylc.backends import make_backend

        self.backend = make_backend(job, knowledge)

    def __call__(self, batch: pa.Table) -> pa.Table:
        from raylc.backends.base import generations_frame

        frame: pl.DataFrame = pl.from_arrow(batch)  # type: ignore[assignment]
        if "prompt" in frame.columns:
            prompts: list[Any] = frame["prompt"].to_list()
        else:
            prompts = list(zip(frame["head"].to_list(), frame["context"].to_list(), frame["tail"].to_list()))
        limits = frame["max_tokens"].to_list() if "max_tokens" in frame.columns else None
        out = generations_frame(self.backend.generate(prompts, limits))
        keep = frame.drop([c for c in PROMPT_COLUMNS if c in frame.columns])
        return pl.concat([keep, out], how="horizontal").to_arrow()


def stream_generate(frame: pl.DataFrame, job: Job, knowledge: Optional[pl.DataFrame] = None) -> Iterator[pl.DataFrame]:
    """Generations for the prompt rows of ``frame`` (see :class:`_GenerateActor`) from
    ``job.probe``'s backend in its actor pool, streamed in batches as they finish (any order)."""
    return _stream([frame], _GenerateActor, {"job": job, "knowledge": knowledge}, job)


def generate_on_ray(prompts: pl.Series, job: Job) -> pl.DataFrame:
    """Generations for ``prompts`` (in order) from ``job.probe``'s backend in its actor pool."""
    frame = pl.DataFrame({"row": pl.int_range(len(prompts), eager=True), "prompt": prompts})
    parts = list(stream_generate(frame, job))
    return pl.concat(parts).sort("row").drop("row") if parts else pl.DataFrame()


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
