"""``report/index.html`` and ``raylc compare``'s ``index.html``: one self-contained page (figures
embedded as data URIs, no script, no external resource), the headline first, then the details,
then what the run did. Every name from the data (tasks, models, ids) is escaped: it is text,
never markup.

A page is a list of sections, each a heading and fragments. A fragment is its HTML (a ``str``)
and also knows how it prints on a terminal (:meth:`Fragment.print_to`), so the page
(:meth:`Page.render`) and the terminal (:meth:`Page.print`) walk one list of sections and
cannot drift apart: ``raylc report`` prints the page's sections in the page's order."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any, Optional

import polars as pl
from rich.console import Console

from raylc.io.tables import format_cells, rich_table

STYLE = """
body{font-family:"Noto Sans","Noto Sans CJK SC","DejaVu Sans",sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1b1b1b;line-height:1.45}
h1{font-size:1.5rem;margin-bottom:.2rem;overflow-wrap:anywhere}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9rem}.headline{background:#f4f7fb;border:1px solid #d6e0ee;padding:.6rem 1rem;
border-radius:6px}table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #d0d0d0;padding:.2rem .5rem;text-align:right}th{background:#f0f0f0}
th.t,td.t{text-align:left}
.scroll{overflow-x:auto}img{max-width:100%;height:auto;margin:.5rem 0}
.note{color:#555;font-size:.85rem}.warn{color:#8a4b00}
"""


class Fragment(str):
    """A piece of a page: the string is its HTML; :meth:`print_to` prints it on a terminal."""

    def print_to(self, console: Console, heading: str) -> None:  # raw HTML: nothing to print
        return None


class TableFragment(Fragment):
    frame: pl.DataFrame
    pct: tuple[str, ...]

    def print_to(self, console: Console, heading: str) -> None:
        console.print(rich_table(self.frame, heading, pct=self.pct))


class TextFragment(Fragment):
    text: str

    def print_to(self, console: Console, heading: str) -> None:
        console.print(self.text, highlight=False, markup=False)


class FigureFragment(Fragment):
    alt: str

    def print_to(self, console: Console, heading: str) -> None:
        console.print(f"[figure on the page: {self.alt}]", highlight=False, markup=False)


def table_html(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> TableFragment:
    """``df`` as an HTML table; text columns left, numbers right; ``pct`` columns as percent;
    cells as every raylc table writes them (:func:`raylc.io.tables.format_cells`)."""
    text = [df[c].dtype == pl.String for c in df.columns]
    head = "".join(f"<th{' class=t' if t else ''}>{html.escape(c)}</th>" for t, c in zip(text, df.columns))
    rows = ["<tr>" + "".join(f"<td{' class=t' if t else ''}>{html.escape(v)}</td>" for t, v in zip(text, row)) + "</tr>"
            for row in format_cells(df, pct)]
    out = TableFragment(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
                        "</tbody></table></div>")
    out.frame, out.pct = df, tuple(pct)
    return out


def image_html(png: bytes, alt: str) -> FigureFragment:
    """A PNG embedded as a data URI."""
    out = FigureFragment(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    out.alt = alt
    return out


def text_html(text: str, css: str = "note") -> TextFragment:
    out = TextFragment(f'<p class="{css}">{html.escape(text)}</p>')
    out.text = text
    return out


Sections = list[tuple[str, list[str]]]


@dataclass
class Page:
    """A report page: ``title``, a ``meta`` line, then ``headline``, ``details`` and ``run``
    sections, each a list of (heading, fragments built with the functions above)."""

    title: str
    meta: str
    headline: Sections = field(default_factory=list)
    details: Sections = field(default_factory=list)
    run: Sections = field(default_factory=list)

    def sections(self) -> list[tuple[str, list[str], Optional[str]]]:
        """Every section in the page's order: (heading, fragments, css class of its box)."""
        return ([(h, f, "headline") for h, f in self.headline] + [(h, f, None) for h, f in self.details]
                + [(h, f, None) for h, f in self.run])

    def render(self) -> str:
        out = []
        for heading, frags, css in self.sections():
            body = "".join(frags)
            out.append(f"<h2>{html.escape(heading)}</h2>" + (f'<div class="{css}">{body}</div>' if css else body))
        return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(self.title)}</title><style>{STYLE}</style></head><body>"
                f"<h1>{html.escape(self.title)}</h1><p class=\"meta\">{html.escape(self.meta)}</p>"
                f"{''.join(out)}</body></html>\n")

    def print(self, console: Console, figures: bool = True) -> None:
        """The page on a terminal, section by section in the page's order: each table under its
        section's heading, notes as lines, a figure as one line naming it (unless ``figures`` is
        false)."""
        console.print(self.title, style="bold", highlight=False, markup=False)
        console.print(self.meta, highlight=False, markup=False)
        for heading, frags, _ in self.sections():
            tables = [f for f in frags if isinstance(f, TableFragment)]
            if len(tables) != 1:  # a table carries the heading as its title; otherwise a line of its own
                console.print(f"\n{heading}", style="bold", highlight=False, markup=False)
            for frag in frags:
                if isinstance(frag, Fragment) and (figures or not isinstance(frag, FigureFragment)):
                    frag.print_to(console, heading)

    def headings(self) -> list[str]:
        return [heading for heading, _, _ in self.sections()]


def run_facts(manifest: dict[str, Any]) -> list[str]:
    """What the run did, from its manifest: each stage's status, seconds and counts (requests,
    tokens, errors, truncation for inference)."""
    def status(name: str, state: dict[str, Any]) -> str:  # the report stage is running while it writes this page
        status = state.get("status", "?")
        return "writing this page" if name == "report" and status == "running" else status

    stages = manifest.get("stages", {})
    order = [n for n in manifest.get("plan") or [] if n in stages] + [n for n in stages if n not in (
        manifest.get("plan") or [])]  # the run's order (a manifest written with sorted keys lists them a-z)
    rows = [{"stage": name, "status": status(name, stages[name]),
             "seconds": round(float(stages[name].get("seconds") or 0.0), 1),
             "counts": ", ".join(f"{k}={'unknown' if v is None else f'{v:,}'}" for k,
                                 v in (stages[name].get("rows") or {}).items())}
            for name in order]
    frags: list[str] = [table_html(pl.DataFrame(rows, schema={"stage": pl.String, "status": pl.String,
                                                              "seconds": pl.Float64, "counts": pl.String}))]
    infer = (manifest.get("stages", {}).get("infer") or {}).get("rows") or {}
    if infer.get("truncated_tokens"):
        frags.append(text_html(f"{infer['truncated_tokens']:,} prompt tokens were cut to fit the model's window "
                               "(see the truncation columns above).", "warn"))
    if infer.get("errors"):
        frags.append(text_html(f"{infer['errors']:,} requests failed (their error is in the infer shards).", "warn"))
    return frags
