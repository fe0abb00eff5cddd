"""The suite registry: a job's ``suite.kind`` names a config model and its builder.

A suite is one config model (a :class:`DolceSuite` or a :class:`SweepSuite`, with a literal
``kind``) and one builder ``(config, seed) -> DataFrame``, registered together with
:func:`register_suite`. The family the config derives from decides how a run evaluates
the built table:

- :class:`DolceSuite`: the builder returns a problems table (``task, problem_id, units,
  question, answers, ...``) for DOLCE's ``build -> sample -> infer -> score -> fit -> report``;
- :class:`SweepSuite`: the builder returns a samples table (:mod:`raylc.suites.samples`) for a
  length sweep ``build -> infer -> score -> report``. The config answers the sweep's
  questions itself: the axis scores are reported over, LongScore's base, which rows count.

Nothing outside this module branches on a suite's kind or family.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

import polars as pl
from pydantic import BaseModel, ConfigDict, PrivateAttr
from pydantic_core import PydanticCustomError

from raylc.io.registry import Registry

Builder = Callable[[Any, int], pl.DataFrame]


class SuiteConfig(BaseModel):
    """Base of every suite config (frozen; unknown keys are errors). Fields naming data files
    are read through :meth:`data_path`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    family: ClassVar[str] = ""
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
    sections: ClassVar[tuple[str, ...]] = ()  #: names of the tables :meth:`report_sections` may add

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


def _check(kind: str, entry: tuple[type[SuiteConfig], Builder]) -> None:
    """A suite entry: a config deriving from DolceSuite or SweepSuite whose literal ``kind`` is the
    name, and a callable builder."""
    config, builder = entry
    field = config.model_fields.get("kind") if isinstance(config, type) and issubclass(config, BaseModel) else None
    kinds = typing.get_args(field.annotation) if field is not None else ()
    if kinds != (kind,) or not issubclass(config, (DolceSuite, SweepSuite)):  # type: ignore[arg-type]
        raise TypeError(f"{getattr(config, '__name__', config)}: a suite config derives from DolceSuite or SweepSuite "
                        f"and has kind: Literal['{kind}']")
    if not callable(builder):
        raise TypeError(f"suite {kind!r}: its builder is not callable")


#: the suites by kind: (config model, builder); the built-in ones load with their module (raylc/suites/__init__.py)
SUITES: Registry[tuple[type[SuiteConfig], Builder]] = Registry("suite kind", _check)


def register_suite(config: type[SuiteConfig]) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder`` as the suite ``config``'s (its literal ``kind``); a kind
    registered already is a ValueError."""
    field = config.model_fields.get("kind")
    kinds = typing.get_args(field.annotation) if field is not None else ()
    kind = kinds[0] if len(kinds) == 1 and isinstance(kinds[0], str) else config.__name__

    def register(builder: Builder) -> Builder:
        SUITES.register(kind, (config, builder))
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
