"""Tables for people: a Polars frame as a rich console table or a Markdown table."""

from __future__ import annotations

from typing import IO, Optional

import polars as pl
from rich.console import Console
from rich.table import Table

#: the width tables get when the output is not a terminal (piped, logged): wide enough that
#: rich never cuts a cell to "…", so every name shows in full
PIPED_WIDTH = 1000


def console(file: Optional[IO[str]] = None) -> Console:
    """A console for tables: a terminal's own width, else :data:`PIPED_WIDTH` (each table at its
    natural width, nothing cut)."""
    out = Console(file=file)
    return out if out.is_terminal else Console(file=file, width=PIPED_WIDTH)


def _float_format(values: pl.Series) -> str:
    """One format for a float column: no decimals when every value is whole (token counts), else
    as many as its values need, at most 4 (``1.00`` beside ``0.96``, not ``1.0``); three
    significant digits when a value is below 0.001 (p-values)."""
    finite = values.drop_nulls().filter(values.drop_nulls().is_finite())
    if finite.is_empty() or (finite == finite.round(0)).all():
        return ".0f"
    if ((finite.abs() < 1e-3) & (finite != 0)).any():
        return ".3g"
    need = max(next((d for d in range(1, 4) if (finite.round(d) == finite.round(4)).all()), 4), 1)
    return f".{need}f"


def _cell(value: object, fmt: Optional[str], pct: bool) -> str:
    if value is None:
        return ""
    if pct:
        return f"{value:.1%}"
    if fmt is not None and isinstance(value, float):
        text = f"{value + 0.0:{fmt}}" if value == value and abs(value) != float("inf") else str(value)
        return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text  # never "-0.0"
    return str(value)


def _cells(df: pl.DataFrame, pct: tuple[str, ...]) -> list[list[str]]:
    """Each cell as text: nulls empty, percent columns as ``12.3%``, float columns by
    :func:`_float_format`, the rest as they are."""
    fmts = [_float_format(df[c]) if df[c].dtype.is_float() else None for c in df.columns]
    return [[_cell(v, f, c in pct) for c, v, f in zip(df.columns, row, fmts)] for row in df.iter_rows()]


def rich_table(df: pl.DataFrame, title: str, pct: tuple[str, ...] = ()) -> Table:
    """``df`` as a rich table (text columns left, numbers right; ``pct`` columns as percent;
    cells as :func:`_cells` writes them)."""
    table = Table(title=title)
    for col in df.columns:  # a narrow terminal wraps cells (fold), never cuts them to "…"
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right", overflow="fold")
    for row in _cells(df, pct):
        table.add_row(*row)
    return table


def markdown_table(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> str:
    """``df`` as a Markdown table (``pct`` columns as percent)."""
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in _cells(df, pct)]
    return "\n".join(lines)
