"""The backend registry: a job's ``probe.backend`` names a probe config and the backend serving it.

A backend is a :class:`BackendPlugin` subclass registered with :func:`register_backend`. It declares

- ``probe``: its config model (a :class:`raylc.spec.ProbeConfig` with ``backend: Literal['<name>']``),
  which a job's ``probe`` and ``judge`` sections then parse into;
- ``pipeline``, the shape of its inference stream: :data:`TEXT` (one actor pool renders the
  prompts and generates with :meth:`~BackendPlugin.text_backend`), or :data:`ENGINE` (prepare
  actors render, fit and tokenize with :meth:`~BackendPlugin.prompt_tokenizer`, then a pool of
  :meth:`~BackendPlugin.engine_pool` actors generates with :meth:`~BackendPlugin.engine`);
- what it asks of Ray: ``block_factor`` (request rows per file, in ``ray.batch_size``),
  ``no_progress_guard``, the engine pool's size and actor options;
- its checks: :meth:`~BackendPlugin.check_endpoint` (before Ray starts),
  :meth:`~BackendPlugin.check_cluster` (once Ray is up) and :meth:`~BackendPlugin.preflight`
  (``raylc run``'s refusal and ``raylc check``).

The built-in backends are in :mod:`raylc.backends.builtin`. Nothing outside ``raylc/backends``
branches on a backend's name: the run layer asks :func:`backend_of`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

import polars as pl

from raylc.spec import PROBES, ProbeConfig

if TYPE_CHECKING:
    from raylc.backends.base import Backend
    from raylc.spec import Job

TEXT = "text"  #: one fused actor pool: render, then generate text
ENGINE = "engine"  #: prepare actors (render, fit, tokenize), then a pool of token engines


@dataclass(frozen=True)
class EnginePool:
    """The engine stage's Ray shape: ``replicas`` engine actors (``options``: Ray actor options,
    e.g. ``num_gpus``), each with ``concurrent_batches`` batches in flight, after
    ``prepare_actors`` CPU actors."""

    replicas: int = 1
    prepare_actors: int = 1
    concurrent_batches: int = 2
    options: dict[str, Any] = field(default_factory=dict)


class BackendPlugin:
    """A backend: its probe config, pipeline shape, Ray needs and checks (see the module)."""

    probe: ClassVar[type[ProbeConfig]]
    pipeline: ClassVar[str] = TEXT
    block_factor: ClassVar[int] = 4  #: request rows per file = ``ray.batch_size`` times this
    no_progress_guard: ClassVar[bool] = True  #: keep Ray Data's no-progress timeout by default

    def text_backend(self, job: Job, table: Optional[pl.LazyFrame]) -> Backend:
        """The generating object of a :data:`TEXT` backend; ``table``: the suite's built table
        (DOLCE problems, a sweep's samples), None when there is none (judge calls)."""
        raise ValueError(f"probe backend {job.probe.backend!r} runs as an engine stage, not a text backend")

    def prompt_tokenizer(self, probe: Any) -> tuple[str, bool]:
        """An :data:`ENGINE` backend's tokenizer: (spec, whether to apply the chat template)."""
        raise NotImplementedError

    def engine(self, probe: Any) -> Any:
        """An :data:`ENGINE` backend's engine: ``await generate(token_ids, max_tokens)``, ``shutdown()``."""
        raise NotImplementedError

    def engine_pool(self, job: Job, batch_size: int, verbose: bool) -> EnginePool:
        """The engine stage's Ray shape (:data:`ENGINE` backends)."""
        return EnginePool()

    def check_endpoint(self, job: Job) -> None:
        """Fail fast (:class:`~raylc.backends.base.BackendUnavailable`) before Ray starts."""

    def check_cluster(self, job: Job, log: Callable[[str], None]) -> None:
        """Fail (RuntimeError) or warn once Ray is up, e.g. when the cluster lacks GPUs."""

    def preflight(self, job: Job, section: str, **options: Any) -> Optional[Any]:
        """A report for the ``section`` (``probe`` or ``judge``) of :func:`raylc.backends.preflight.preflight`,
        or None when there is nothing to check."""
        return None


BACKENDS: dict[str, BackendPlugin] = {}


def register_backend(plugin: type[BackendPlugin]) -> type[BackendPlugin]:
    """Class decorator: register ``plugin`` (and its probe config) under the config's literal ``backend``."""
    field_ = plugin.probe.model_fields.get("backend")
    names = typing.get_args(field_.annotation) if field_ is not None else ()
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f"{plugin.probe.__name__}: a probe config has backend: Literal['<its name>']")
    BACKENDS[names[0]] = plugin()
    PROBES[names[0]] = plugin.probe
    return plugin


def backend_of(probe: ProbeConfig) -> BackendPlugin:
    """The registered backend of a probe config."""
    return BACKENDS[probe.backend]  # type: ignore[attr-defined]


def backend_names() -> list[str]:
    return list(BACKENDS)
