"""The backend registry: a job's ``probe.backend`` names a :class:`BackendPlugin`, which supplies

- ``probe``: its config model (a :class:`~raylc.backends.config.ProbeConfig` with
  ``backend: Literal['<name>']``), which a job's ``probe`` and ``judge`` sections parse into
  (:func:`parse_probe`: the probe's union is the registry's);
- :meth:`~BackendPlugin.stages`: its inference pipeline, a list of
  :class:`~raylc.backends.stages.PipelineStage` (each a stage function and its ``map_batches``
  settings, as ray.data.llm's ``StatefulStage``), which the run layer maps over Ray Data;
- its checks: :meth:`~BackendPlugin.preflight` (``raylc run``'s refusal and ``raylc check``),
  :meth:`~BackendPlugin.check_endpoint` (before Ray starts); once Ray is up, the run layer checks
  that each of its stages' actors fits on a node (its CPUs, GPUs and accelerator type);
- what it asks of Ray beyond its stages: ``block_factor`` and ``no_progress_guard``;
- :meth:`~BackendPlugin.added_tokens`: the prompt tokens it adds to a request's text (a chat
  template), for the run's prompt-token cap and ``raylc plan``.

A plug-in is registered with :func:`register_backend` (the built-in ones in
:mod:`raylc.backends.builtin`, loaded on first use). Nothing outside ``raylc/backends`` branches
on a backend's name: the run layer asks :func:`backend_of`.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

from pydantic_core import PydanticCustomError

from raylc.backends.config import ProbeConfig
from raylc.io.registry import Registry

if TYPE_CHECKING:
    from raylc.backends.stages import PipelineStage
    from raylc.spec import Job


class BackendPlugin:
    """A backend: its probe config, pipeline stages, Ray needs and checks (see the module)."""

    probe: ClassVar[type[ProbeConfig]]
    block_factor: ClassVar[int] = 4  #: request rows per request file = ``ray.batch_size`` times this
    no_progress_guard: ClassVar[bool] = True  #: keep Ray Data's no-progress timeout by default

    def stages(self, job: Job, verbose: bool) -> list[PipelineStage]:
        """The inference pipeline of ``job.probe``: request rows in, completion rows out."""
        raise NotImplementedError

    def check_endpoint(self, job: Job) -> None:
        """Fail fast (:class:`~raylc.backends.base.BackendUnavailable`) before Ray starts."""

    def prompt_counter(self, job: Any, problems: Callable[[], Any]) -> Optional[Callable[[Any], Any]]:
        """The prompt tokens this backend will send for each request row, exactly (its own
        rendering and tokenizer; ``problems()``: the table spans are rendered from), for the run's
        prompt-token cap; None when it cannot know them here (the cap then counts as the plan
        does, plus :meth:`added_tokens`)."""
        return None

    def added_tokens(self, probe: ProbeConfig, raw: bool = False) -> int:
        """At most the prompt tokens this backend adds to a request's text when it sends it (a chat
        template, special tokens; ``raw``: a ``raw_prompt`` request, sent without a template), which
        the run's prompt-token cap adds to each pending request's count. Here: none."""
        return 0

    def preflight(self, job: Job, section: str, **options: Any) -> Optional[Any]:
        """A report for the ``section`` (``probe`` or ``judge``) of :func:`raylc.backends.preflight.preflight`,
        or None when there is nothing to check."""
        return None


def _check(name: str, plugin: BackendPlugin) -> None:
    """A backend entry: a plug-in whose probe config derives from ProbeConfig with the literal
    ``backend`` of its name, and which gives its stages."""
    probe = getattr(plugin, "probe", None)
    field = probe.model_fields.get("backend") if isinstance(probe, type) and issubclass(probe, ProbeConfig) else None
    if not isinstance(plugin, BackendPlugin) or field is None or typing.get_args(field.annotation) != (name,):
        raise TypeError(f"backend {name!r}: a BackendPlugin whose probe config derives from ProbeConfig and has "
                        f"backend: Literal['{name}']")
    if type(plugin).stages is BackendPlugin.stages:
        raise TypeError(f"backend {name!r}: {type(plugin).__name__} gives no pipeline stages")


#: the backends by name; the built-in ones load on first use (raylc/backends/__init__.py)
BACKENDS: Registry[BackendPlugin] = Registry("backend", _check)


def register_backend(plugin: type[BackendPlugin]) -> type[BackendPlugin]:
    """Class decorator: register ``plugin`` under its probe config's literal ``backend`` (checked;
    a name registered already is a ValueError)."""
    field = plugin.probe.model_fields.get("backend") if isinstance(getattr(plugin, "probe", None), type) else None
    names = typing.get_args(field.annotation) if field is not None else ()
    BACKENDS.register(names[0] if len(names) == 1 and isinstance(names[0], str) else plugin.__name__, plugin())
    return plugin


def backend_of(probe: ProbeConfig) -> BackendPlugin:
    """The registered backend of a probe config."""
    return BACKENDS.get(probe.backend)  # type: ignore[attr-defined]


def added_tokens(probe: ProbeConfig, raw: bool = False) -> int:
    """:meth:`BackendPlugin.added_tokens` of the probe's backend."""
    return backend_of(probe).added_tokens(probe, raw)


def plan_overhead(probe: ProbeConfig, raw: bool = False) -> int:
    """``raylc plan``'s default ``--overhead-tokens``: :func:`added_tokens`, or 0 when the probe's
    tokenizer cannot be loaded here (e.g. a Hub model without ``transformers``)."""
    from raylc.backends.base import BackendUnavailable

    try:
        return added_tokens(probe, raw)
    except (BackendUnavailable, ImportError, OSError, ValueError):
        return 0


def parse_probe(value: Any) -> ProbeConfig:
    """A ``probe`` or ``judge`` section (a mapping with ``backend``) as the config model of the
    backend it names; the config's own errors keep their keys (``probe.model``)."""
    if isinstance(value, ProbeConfig):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError("probe_type", "must be a mapping with a backend")
    known = ", ".join(f"'{k}'" for k in BACKENDS)
    if "backend" not in value:
        raise PydanticCustomError("probe_backend_missing", "one of {known}", {"known": known})
    if value["backend"] not in BACKENDS:
        raise PydanticCustomError("probe_backend", "{got} is not one of {known}",
                                  {"got": repr(value["backend"]), "known": known})
    return BACKENDS.get(value["backend"]).probe.model_validate(value)


def probe_config_of(data: Any) -> Optional[type[ProbeConfig]]:
    """The config model a raw probe section names, if any (for error messages)."""
    backend = data.get("backend") if isinstance(data, dict) else None
    return BACKENDS.get(backend).probe if isinstance(backend, str) and backend in BACKENDS else None
