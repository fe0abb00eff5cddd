"""The suite registry: a job's ``suite.kind`` names a config model and its builder.

A suite is one config model (a :class:`DolceSuite` or a :class:`SweepSuite`, with a literal
``kind``), one builder ``(config, seed) -> DataFrame`` and what a user needs to know of it (its
:class:`SuiteInfo`: tasks, metrics, budgets, data, official scripts), registered together with
:func:`register_suite`; ``docs/reference/suites.md`` is generated from these entries. The
family the config derives from decides how a run evaluates the built table:

- :class:`DolceSuite`: the builder returns a problems table (``task, problem_id, units,
  question, answers, ...``) for DOLCE's ``build -> sample -> infer -> score -> fit -> report``;
- :class:`SweepSuite`: the builder returns a samples table (:mod:`raylc.suites.samples`) for a
  length sweep ``build -> infer -> score -> report``. The config answers the sweep's
  questions itself: the axis scores are reported over, LongScore's base, which rows count.

Nothing outside this module branches on a suite's kind or family.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Union

import polars as pl
from pydantic import BaseModel, PrivateAttr
from pydantic_core import PydanticCustomError

from raylc.io.job_model import JobModel
from raylc.io.registry import Registry
from raylc.io.schemas import Column, TableSchema

Builder = Callable[[Any, int], pl.DataFrame]


@dataclass(frozen=True)
class Task:
    """One task of a suite: its metric (and the extractor applied to the output first), its
    generation budget (``max_tokens``: new tokens, or a sentence when it depends on the job) and
    the official code it follows. ``note``: what else a user should know of it."""

    name: str
    metric: str
    max_tokens: Union[int, str]
    official: str
    extractor: str = "none"
    note: str = ""


@dataclass(frozen=True)
class SuiteInfo:
    """What ``docs/reference/suites.md`` says of a suite: ``tasks`` (a suite whose task names are
    the user's has one row describing them), its default ``lengths``, the ``data`` it reads,
    where to get the ``real_data`` and the ``official`` repository it follows."""

    title: str
    tasks: tuple[Task, ...]
    lengths: str
    data: str
    real_data: str
    official: str


class SuiteConfig(JobModel):
    """Base of every suite config (frozen; unknown keys are errors). Fields naming data files
    are read through :meth:`data_path`."""

    family: ClassVar[str] = ""
    #: the columns the builder adds to its family's table (they pass through to the scores table)
    columns: ClassVar[tuple[Column, ...]] = ()
    _job_dir: Optional[str] = PrivateAttr(default=None)  # set by raylc.spec.load_job; not in the fingerprint

    def data_path(self, value: str) -> str:
        """Where a data field's file is: a URI (``s3://...``) or an absolute path as given; a
        relative path against the job file's folder, or, when no file is there, against the
        working directory (job files written relative to the folder raylc runs in). The value
        in the job, its manifest and its fingerprint stay as written."""
        if self._job_dir is None or "://" in value or Path(value).expanduser().is_absolute():
            return value
        beside = Path(self._job_dir) / value
        return str(beside) if beside.exists() or not Path(value).exists() else value

    def tokenizer_spec(self) -> Optional[str]:
        """The tokenizer the suite counts context tokens with (None: the offline default)."""
        return None

    def judged_tasks(self) -> list[str]:
        """Tasks scored by an LLM judge (the job then needs a ``judge`` section)."""
        return []

    def build(self, seed: int) -> pl.DataFrame:
        """The suite's table, from its registered builder."""
        return SUITES.get(self.kind)[1](self, seed)  # type: ignore[attr-defined]


class DolceSuite(SuiteConfig):
    """A suite of problems for DOLCE (each context split into units)."""

    family: ClassVar[str] = "dolce"


class SweepSuite(SuiteConfig):
    """A length-controlled suite: every sample built at each point of an axis."""

    family: ClassVar[str] = "sweep"
    axis: ClassVar[str] = "length"  #: the samples column scores are reported over
    samples_field: ClassVar[Optional[str]] = None  #: the field counting samples per axis point
    sections: ClassVar[tuple[TableSchema, ...]] = ()  #: the tables :meth:`report_sections` may add

    def longscore_base(self) -> list[int]:
        """LongScore's base points on :attr:`axis` (100-LongBench Eq. 1); none: no LongScore."""
        return []

    def kept(self, scores: pl.DataFrame) -> pl.DataFrame:
        """``scores`` plus ``kept``: whether a row counts in the statistics (length-0 rows, the
        no-context probe, never do)."""
        return scores.with_columns(kept=pl.col("length") > 0)

    def report_sections(self, scores: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
        """Extra report tables as ``(name, heading, table)``."""
        return []

    def with_samples(self, n: int) -> "SweepSuite":
        """This config building at most ``n`` samples per axis point (a cheap estimate)."""
        if self.samples_field is None or getattr(self, self.samples_field) <= n:
            return self
        return self.model_copy(update={self.samples_field: n})

    def samples_per_point(self) -> Optional[int]:
        return getattr(self, self.samples_field) if self.samples_field else None


#: a DOLCE task's metric and budget: the job's, not the suite's
JOB_METRIC = "the job's `scoring.metric` (open answers; four-choice rows: the letter's accuracy; summaries: ROUGE-L)"
PROBE_BUDGET = "the probe's `sampling.max_tokens`"
DOLCE_LENGTHS = "spans of `sampling.lengths` units (exponential by default: 0, 1, 2, 5, 10, 20, ... below L, and L)"

Entry = tuple[type[SuiteConfig], Builder, SuiteInfo]

#: the config fields whose Literal choices are a suite's task names
TASK_FIELDS = ("tasks", "datasets", "kinds")


def task_choices(config: type[BaseModel]) -> Optional[tuple[str, ...]]:
    """The task names a config's ``tasks`` (or ``datasets``, ``kinds``) field allows, when they
    are a fixed list (a Literal); None when the user names them."""
    for name in TASK_FIELDS:
        field = config.model_fields.get(name)
        literals = [a for a in _flat(field.annotation) if typing.get_origin(a) is typing.Literal] if field else []
        if literals:
            return tuple(c for lit in literals for c in typing.get_args(lit))
    return None


def _flat(annotation: Any) -> list[Any]:
    """An annotation and every type inside it (Optional, list, Annotated, aliases)."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) is not typing.Literal else ()
    return [annotation, *(a for arg in args for a in _flat(arg))]


def _check(kind: str, entry: Entry) -> None:
    """A suite entry: a config deriving from DolceSuite or SweepSuite whose literal ``kind`` is the
    name, a callable builder, and its SuiteInfo, whose tasks are the config's task choices."""
    config, builder, info = entry
    field = config.model_fields.get("kind") if isinstance(config, type) and issubclass(config, BaseModel) else None
    kinds = typing.get_args(field.annotation) if field is not None else ()
    if kinds != (kind,) or not issubclass(config, (DolceSuite, SweepSuite)):  # type: ignore[arg-type]
        raise TypeError(f"{getattr(config, '__name__', config)}: a suite config derives from DolceSuite or SweepSuite "
                        f"and has kind: Literal['{kind}']")
    if not callable(builder):
        raise TypeError(f"suite {kind!r}: its builder is not callable")
    if not isinstance(info, SuiteInfo) or not info.tasks:
        raise TypeError(f"suite {kind!r}: register it with a SuiteInfo naming its tasks")
    choices = task_choices(config)
    if choices is not None and sorted(choices) != sorted(t.name for t in info.tasks):
        raise TypeError(f"suite {kind!r}: its SuiteInfo's tasks ({', '.join(t.name for t in info.tasks)}) are not "
                        f"the tasks its config allows ({', '.join(choices)})")


#: the suites by kind: (config model, builder, info); the built-in ones load with their module
#: (raylc/suites/__init__.py)
SUITES: Registry[Entry] = Registry("suite kind", _check)


def register_suite(config: type[SuiteConfig], info: SuiteInfo) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder`` as the suite ``config``'s (its literal ``kind``), with
    ``info`` for the reference pages; a kind registered already is a ValueError."""
    field = config.model_fields.get("kind")
    kinds = typing.get_args(field.annotation) if field is not None else ()
    kind = kinds[0] if len(kinds) == 1 and isinstance(kinds[0], str) else config.__name__

    def register(builder: Builder) -> Builder:
        SUITES.register(kind, (config, builder, info))
        return builder

    return register


def parse_suite(value: Any) -> SuiteConfig:
    """A ``suite`` section (a mapping with ``kind``; no kind = ``planted``) as its config model;
    the config's own errors keep their keys (``suite.lengths``)."""
    if isinstance(value, SuiteConfig):
        return value
    if not isinstance(value, dict):
        raise PydanticCustomError("suite_type", "must be a mapping with a kind")
    kind = value.get("kind", "planted")
    if kind not in SUITES:
        raise PydanticCustomError("suite_kind", "{got} is not one of {known}",
                                  {"got": repr(kind), "known": ", ".join(f"'{k}'" for k in sorted(SUITES))})
    return SUITES.get(kind)[0].model_validate({**value, "kind": kind})


def config_of(data: Any) -> Optional[type[SuiteConfig]]:
    """The config model a raw ``suite`` section names, if any (for error messages)."""
    kind = data.get("kind", "planted") if isinstance(data, dict) else None
    return SUITES.get(kind)[0] if kind in SUITES else None
