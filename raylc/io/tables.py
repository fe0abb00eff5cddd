"""Tables for people: a Polars frame as a rich console table or a Markdown table, and the one
formatting of numbers in cells (:func:`format_cells`) that they and the HTML pages share."""

from __future__ import annotations

from typing import IO, Any, Optional

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: the width tables get when the output is not a terminal (piped, logged): wide enough that
#: rich never cuts a cell to "…", so every name shows in full
PIPED_WIDTH = 1000


def console(file: Optional[IO[str]] = None) -> Console:
    """A console for tables: a terminal's own width, else :data:`PIPED_WIDTH` (each table at its
    natural width, nothing cut). Never markup: run ids, task names and paths print as they are
    (a task named ``qa [/b]`` is not a style tag)."""
    out = Console(file=file, markup=False)
    return out if out.is_terminal else Console(file=file, width=PIPED_WIDTH, markup=False)


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
        text = f"{value:.1%}"
        return text[1:] if text.startswith("-") and float(text[:-1]) == 0 else text  # never "-0.0%"
    if fmt is not None and isinstance(value, float):
        text = f"{value + 0.0:{fmt}}" if value == value and abs(value) != float("inf") else str(value)
        return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text  # never "-0.0"
    return str(value)


def format_cells(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> list[list[str]]:
    """Each cell as text, the one number formatting of the terminal, Markdown and HTML tables:
    nulls empty, percent columns as ``12.3%``, float columns by :func:`_float_format`, the rest
    as they are."""
    fmts = [_float_format(df[c]) if df[c].dtype.is_float() else None for c in df.columns]
    return [[_cell(v, f, c in pct) for c, v, f in zip(df.columns, row, fmts)] for row in df.iter_rows()]


#: text columns that name runs and tasks: kept whole first on a narrow terminal
NAME_COLUMNS = ("run_id", "run_a", "run_b", "task", "subset")
_MIN_COLUMN = 2  # the width a column that is not kept whole may fold to


class _WholeCellsTable(Table):
    """A rich table that, on a console too narrow for it, first prints a column whose value is
    the same in every row once under the table (``model: simulated``), then keeps as many
    columns' cells whole as fit: run ids and task names first (:data:`NAME_COLUMNS`), then
    numbers, then the other text columns shortest first; the rest wrap (fold). Nothing is ever
    cut to "…"."""

    cells: list[list[str]]  # the rows' cells as text
    text: list[bool]  # which columns hold text

    def _natural(self, columns: list[int]) -> int:
        return sum(max(len(str(self.columns[i].header)), *(len(r[i]) for r in self.cells)) for i in columns) \
            + 3 * len(columns) + 1  # each column's padding and rule, the last rule

    def __rich_console__(self, console: Console, options: Any) -> Any:
        shown = list(range(len(self.columns)))
        if not self.cells or self._natural(shown) <= options.max_width:
            yield from super().__rich_console__(console, options)
            return
        same = [i for i in shown if len(self.cells) > 1 and len({r[i] for r in self.cells}) == 1
                and str(self.columns[i].header) not in NAME_COLUMNS]
        shown = [i for i in shown if i not in same]
        table = Table(title=self.title, caption="; ".join(
            [f"{self.columns[i].header}: {self.cells[0][i] or '(empty)'}" for i in same]
            + ([str(self.caption)] if self.caption else [])) or None, caption_justify="left")
        widest = {i: max(len(r[i]) for r in self.cells) for i in shown}
        order = ([i for i in shown if str(self.columns[i].header) in NAME_COLUMNS]
                 + [i for i in shown if not self.text[i]]
                 + sorted((i for i in shown if self.text[i] and str(self.columns[i].header) not in NAME_COLUMNS),
                          key=lambda i: widest[i]))
        budget = options.max_width - (3 * len(shown) + 1)
        kept: dict[int, int] = {}
        for i in order:
            if widest[i] and sum(kept.values()) + widest[i] + _MIN_COLUMN * (len(shown) - len(kept) - 1) <= budget:
                kept[i] = widest[i]
        spare = (budget - sum(kept.values()) - _MIN_COLUMN * (len(shown) - len(kept))) // 2
        for i in sorted(kept, key=lambda i: len(str(self.columns[i].header)) - kept[i]):  # half the rest widens
            grow = min(max(len(str(self.columns[i].header)) - kept[i], 0), max(spare, 0))  # headers, smallest first
            kept[i] += grow
            spare -= grow
        for i in shown:  # a kept column has a fixed width: rich folds the others into the rest
            column = self.columns[i]
            table.add_column(column.header, justify=column.justify, overflow="fold",
                             width=kept.get(i) if self._natural(shown) > options.max_width else None)
        for row in self.cells:
            table.add_row(*(Text(row[i]) for i in shown))
        yield table


def rich_table(df: pl.DataFrame, title: str, pct: tuple[str, ...] = ()) -> Table:
    """``df`` as a rich table (text columns left, numbers right; ``pct`` columns as percent;
    cells as :func:`format_cells` writes them). On a narrow terminal cells wrap, never cut, and
    names and numbers stay whole while they fit (:class:`_WholeCellsTable`). Title and cells are
    plain text, never markup, whatever the console."""
    table = _WholeCellsTable(title=Text(title))
    for col in df.columns:  # a narrow terminal wraps cells (fold), never cuts them to "…"
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right", overflow="fold")
    table.cells = format_cells(df, pct)
    table.text = [df[c].dtype == pl.String for c in df.columns]
    for row in table.cells:
        table.add_row(*map(Text, row))
    return table


def _markdown_cell(text: str) -> str:
    """One cell's text that stays one cell and shows as it is: a ``|`` escaped, line breaks and
    tabs as spaces, ``&``, ``<`` and ``>`` as entities (a name is never HTML)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(text.splitlines()).replace("\t", " ")


def markdown_table(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> str:
    """``df`` as a Markdown table (``pct`` columns as percent; cells as :func:`_markdown_cell`)."""
    lines = ["| " + " | ".join(map(_markdown_cell, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(map(_markdown_cell, row)) + " |" for row in format_cells(df, pct)]
    return "\n".join(lines)
