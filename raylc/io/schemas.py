"""Declared tables: each table raylc writes, declared once with its columns, their dtypes and what
they hold, and checked by its writer (:meth:`TableSchema.check`), so a column added to the code
and not to its declaration fails the writer's tests, and ``docs/reference/tables.md``
(:mod:`raylc.reference`, generated from the declarations) says what the code writes.

A declaration lives beside its writer: the DOLCE tables in :mod:`raylc.dolce.tables`, the
length-run tables in :mod:`raylc.sweep.tables`, the samples contract in
:mod:`raylc.suites.samples`, a suite's own columns and report sections on its config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import polars as pl


class SchemaError(AssertionError):
    """A table whose columns are not its declaration's: a column missing, undeclared or of
    another dtype. A bug of raylc, never of the input: the message names the table and column."""


@dataclass(frozen=True)
class Column:
    """One column: its name, Polars dtype and what it holds. ``optional``: some tables of this
    kind lack it (the description says when)."""

    name: str
    dtype: pl.DataType
    description: str
    optional: bool = False


@dataclass(frozen=True)
class TableSchema:
    """A table: ``name`` (the key of its writer's tables), ``path`` (where it is written, relative
    to the run or output folder), what it is, its columns and, when its writer adds more, where
    they are declared (``extra``)."""

    name: str
    path: str
    description: str
    columns: tuple[Column, ...]
    extra: str = ""

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"table {self.path}: column {twice[0]!r} is declared twice")
        blank = [c.name for c in self.columns if not c.description.strip()]
        if blank:
            raise ValueError(f"table {self.path}: column {blank[0]!r} has no description")

    def relocated(self, path: str) -> "TableSchema":
        """This table as another command writes it, under ``path``."""
        return replace(self, path=path)

    @property
    def dtypes(self) -> dict[str, pl.DataType]:
        """The declared columns and their dtypes, in order."""
        return {c.name: c.dtype for c in self.columns}

    def check(self, frame: pl.DataFrame, extra: Sequence[Column] = ()) -> pl.DataFrame:
        """``frame`` when it holds every required column with its declared dtype and no column
        that is neither declared nor one of ``extra`` (a suite's own columns); else a
        :class:`SchemaError` naming the column. A column of nulls (dtype Null) passes."""
        declared = {c.name: c for c in (*self.columns, *extra)}
        for name, dtype in frame.schema.items():
            column = declared.get(name)
            if column is None:
                raise SchemaError(f"table {self.path}: column {name!r} is not declared (declare it with the "
                                  "table's other columns, then run `make reference`)")
            if dtype != column.dtype and dtype != pl.Null:
                raise SchemaError(f"table {self.path}: column {name!r} is {dtype}, declared {column.dtype}")
        missing = [c.name for c in self.columns if not c.optional and c.name not in frame.schema]
        if missing:
            raise SchemaError(f"table {self.path}: column {missing[0]!r} is missing")
        return frame


def described(dtypes: Mapping[str, pl.DataType], descriptions: Mapping[str, str],
              optional: Sequence[str] = ()) -> tuple[Column, ...]:
    """Columns, in the order of ``dtypes`` (a mapping the code builds its frames with), and one
    description per column (the same keys: a column added to ``dtypes`` alone is a ValueError at
    import)."""
    odd = [c for c in (*dtypes, *descriptions) if c not in dtypes or c not in descriptions]
    if odd:
        raise ValueError(f"columns and descriptions differ: {', '.join(odd)}")
    return tuple(Column(name, _instance(dtype), descriptions[name], name in optional)
                 for name, dtype in dtypes.items())


def declare(*rows: tuple) -> tuple[Column, ...]:
    """Columns from ``(name, dtype, description[, optional])`` rows."""
    return tuple(Column(name, _instance(dtype), text, *rest) for name, dtype, text, *rest in rows)


def _instance(dtype: pl.DataType | type[pl.DataType]) -> pl.DataType:
    """``pl.String`` and ``pl.String()`` alike, as an instance (a frame's schema holds instances)."""
    return dtype() if isinstance(dtype, type) else dtype


def check_tables(schemas: Sequence[TableSchema], frames: Mapping[str, pl.DataFrame],
                 extra: Sequence[Column] = ()) -> dict[str, pl.DataFrame]:
    """Each of ``frames`` checked by the schema of its name among ``schemas`` (a frame without
    one is a :class:`SchemaError`)."""
    by_name = {s.name: s for s in schemas}
    for name in frames:
        if name not in by_name:
            raise SchemaError(f"table {name!r} is not declared (declare it beside its writer's other tables, then run "
                              "`make reference`)")
    return {name: by_name[name].check(frame, extra) for name, frame in frames.items()}
