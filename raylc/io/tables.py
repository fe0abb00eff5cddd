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


def _cells(df: pl.DataFrame, pct: tuple[str, ...]) -> list[list[str]]:
    return [[f"{v:.1%}" if c in pct else str(v) for c, v in zip(df.columns, row)] for row in df.iter_rows()]


def rich_table(df: pl.DataFrame, title: str, pct: tuple[str, ...] = ()) -> Table:
    """``df`` as a rich table (text columns left, numbers right; ``pct`` columns as percent)."""
    table = Table(title=title)
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
    for row in _cells(df, pct):
        table.add_row(*row)
    return table


def markdown_table(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> str:
    """``df`` as a Markdown table (``pct`` columns as percent)."""
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in _cells(df, pct)]
    return "\n".join(lines)
