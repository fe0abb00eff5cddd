"""Declared tables: each table raylc writes, declared once with its columns, their dtypes and what
they hold, and checked by its writer (:meth:`TableSchema.check`), so a column added to the code
and not to its declaration fails the writer's tests, and ``docs/reference/tables.md``
(:mod:`raylc.reference`, generated from the declarations) says what the code writes.

A declaration lives beside its writer: the DOLCE tables in :mod:`raylc.dolce.tables`, the
length-run tables in :mod:`raylc.sweep.tables`, the samples contract in
:mod:`raylc.suites.samples`, a suite's own columns and report sections on its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

import polars as pl

from raylc.io.errors import StoreError


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
    #: what a stored table's values must satisfy that its dtypes cannot say (a reader checks it,
    #: :func:`stored_table`): a few words naming the first row that does not, or None
    values: Optional[Callable[[pl.DataFrame], Optional[str]]] = field(default=None, compare=False, repr=False)

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

    def only(self, names: Sequence[str]) -> "TableSchema":
        """This declaration restricted to the columns ``names`` (what a reader needs of the table)."""
        return replace(self, columns=tuple(c for c in self.columns if c.name in names))

    @property
    def dtypes(self) -> dict[str, pl.DataType]:
        """The declared columns and their dtypes, in order."""
        return {c.name: c.dtype for c in self.columns}

    def check(self, frame: pl.DataFrame, extra: Sequence[Column] = ()) -> pl.DataFrame:
        """``frame`` when it holds every required column with its declared dtype and no column
        that is neither declared nor one of ``extra`` (a suite's own columns); else a
        :class:`SchemaError` naming the column. A column of nulls (dtype Null) passes."""
        wrong = self.mismatch(frame, extra)
        if wrong is not None:
            hint = (" (declare it with the table's other columns, then run `make reference`)"
                    if wrong.endswith("not declared") else "")
            raise SchemaError(f"table {self.path}: {wrong}{hint}")
        return frame

    def mismatch(self, frame: pl.DataFrame, extra: Sequence[Column] = (), undeclared: bool = False) -> Optional[str]:
        """What keeps ``frame`` from being this table, in a few words naming the column (a column
        missing, of another dtype, or, unless ``undeclared``, not declared), or None."""
        declared = {c.name: c for c in (*self.columns, *extra)}
        for name, dtype in frame.schema.items():
            column = declared.get(name)
            if column is None and not undeclared:
                return f"column {name!r} is not declared"
            if column is not None and dtype != column.dtype and dtype != pl.Null:
                return f"column {name!r} is {dtype}, declared {column.dtype}"
        missing = [c.name for c in self.columns if not c.optional and c.name not in frame.schema]
        return f"column {missing[0]!r} is missing" if missing else None


def stored_table(schema: TableSchema, frame: pl.DataFrame, uri: str, columns: Optional[Sequence[str]] = None,
                 wrote: Optional[int] = None, stage: Optional[str] = None, rows: Optional[int] = None) -> pl.DataFrame:
    """``frame``, read from ``uri``, when it is the table ``schema`` (its ``columns`` only, if
    given; a column the declaration lacks, such as a suite's own, is kept) and, where the run's
    ``stage`` recorded ``wrote`` rows, holds that many (``rows``: the stored table's, when
    ``frame`` is only its columns); else a :class:`StoreError` naming the file and the column: a
    table edited, or written by something other than raylc."""
    if columns is not None:
        schema = schema.only(columns)
    rows = frame.height if rows is None else rows
    absent = [c for c in columns or () if c not in frame.columns]  # undeclared ones too
    wrong = f"column {absent[0]!r} is missing" if absent else schema.mismatch(frame, undeclared=True)
    if wrong is None and wrote is not None and rows != wrote:
        wrong = f"{rows:,} rows, where the run's {stage} stage wrote {wrote:,}"
    if wrong is None and schema.values is not None:
        wrong = schema.values(frame)
    if wrong is not None:
        raise StoreError(f"{uri}: {wrong}; it is not the table raylc wrote (edited, or written by another program?)")
    return frame if columns is None else frame.select(columns)


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


def since(descriptions: Mapping[str, str], names: Sequence[str], when: str) -> dict[str, str]:
    """``descriptions`` with "Absent from tables written before ``when``." added to ``names``'s:
    columns added to a table later, optional in its declaration so that a run of an earlier raylc
    still reads (its readers do without them)."""
    return {name: f"{text} Absent from tables written before {when}." if name in names else text
            for name, text in descriptions.items()}


def declare_since(when: str, *rows: tuple) -> tuple[Column, ...]:
    """:func:`declare` of optional ``(name, dtype, description)`` rows added to a table at
    ``when``, each description saying so (:func:`since`)."""
    return declare(*((name, dtype, since({name: text}, (name,), when)[name], True) for name, dtype, text in rows))


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
