"""``report/index.html``: one self-contained page per run (figures embedded as data URIs, no
script, no external resource), the headline first, then the details, then what the run did.
Every name from the data (tasks, models, ids) is escaped: it is text, never markup."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any, Optional

import polars as pl

STYLE = """
body{font-family:"Noto Sans","Noto Sans CJK SC","DejaVu Sans",sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1b1b1b;line-height:1.45}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9rem}.headline{background:#f4f7fb;border:1px solid #d6e0ee;padding:.6rem 1rem;
border-radius:6px}table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #d0d0d0;padding:.2rem .5rem;text-align:right}th{background:#f0f0f0}
td.t{text-align:left}img{max-width:100%;height:auto;margin:.5rem 0}.note{color:#555;font-size:.85rem}
.warn{color:#8a4b00}
"""


def _cell(value: Any, pct: bool) -> str:
    if value is None:
        return ""
    if pct and isinstance(value, float):
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def table_html(df: pl.DataFrame, pct: tuple[str, ...] = ()) -> str:
    """``df`` as an HTML table; text columns left, numbers right; ``pct`` columns as percent."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    text = {c for c in df.columns if df[c].dtype == pl.String}
    rows = []
    for row in df.iter_rows():
        cells = "".join(f"<td{' class=t' if c in text else ''}>{html.escape(_cell(v, c in pct))}</td>"
                        for c, v in zip(df.columns, row))
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def image_html(png: bytes, alt: str) -> str:
    """A PNG embedded as a data URI."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def text_html(text: str, css: str = "note") -> str:
    return f'<p class="{css}">{html.escape(text)}</p>'


@dataclass
class Page:
    """A report page: ``title``, a ``meta`` line, then ``headline``, ``details`` and ``run``
    sections, each a list of (heading, HTML fragments built with the functions above)."""

    title: str
    meta: str
    headline: list[tuple[str, list[str]]] = field(default_factory=list)
    details: list[tuple[str, list[str]]] = field(default_factory=list)
    run: list[tuple[str, list[str]]] = field(default_factory=list)

    def render(self) -> str:
        def section(parts: list[tuple[str, list[str]]], css: Optional[str] = None) -> str:
            out = []
            for heading, frags in parts:
                body = "".join(frags)
                out.append(f"<h2>{html.escape(heading)}</h2>" + (f'<div class="{css}">{body}</div>' if css else body))
            return "".join(out)

        return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(self.title)}</title><style>{STYLE}</style></head><body>"
                f"<h1>{html.escape(self.title)}</h1><p class=\"meta\">{html.escape(self.meta)}</p>"
                f"{section(self.headline, 'headline')}{section(self.details)}{section(self.run)}</body></html>\n")


def run_facts(manifest: dict[str, Any]) -> list[str]:
    """What the run did, from its manifest: each stage's status, seconds and counts (requests,
    tokens, errors, truncation for inference)."""
    def status(name: str, state: dict[str, Any]) -> str:  # the report stage is running while it writes this page
        status = state.get("status", "?")
        return "writing this page" if name == "report" and status == "running" else status

    rows = [{"stage": name, "status": status(name, state), "seconds": float(state.get("seconds") or 0.0),
             "counts": ", ".join(f"{k}={'unknown' if v is None else f'{v:,}'}" for k,
                                 v in (state.get("rows") or {}).items())}
            for name, state in manifest.get("stages", {}).items()]
    frags = [table_html(pl.DataFrame(rows, schema={"stage": pl.String, "status": pl.String, "seconds": pl.Float64,
                                                   "counts": pl.String}))]
    infer = (manifest.get("stages", {}).get("infer") or {}).get("rows") or {}
    if infer.get("truncated_tokens"):
        frags.append(text_html(f"{infer['truncated_tokens']:,} prompt tokens were cut to fit the model's window "
                               "(see the truncation columns above).", "warn"))
    if infer.get("errors"):
        frags.append(text_html(f"{infer['errors']:,} requests failed (their error is in the infer shards).", "warn"))
    return frags
