"""Prompt rendering: the question is kept in full while only the context is sampled.

A prompt is ``head + context + tail``: the template's text before ``{context}``, the
observation span (units ``start .. start + C - 1``), and the rest of the template with the
question (and the options of a four-choice question) filled in. Templates carry the IDK
extension of DOLCE Appendix E: open questions may be answered "Unanswerable"; four-choice
questions get a fifth option "E. The question is unanswerable." with the instruction to
write "E"; summarization prompts get no IDK option ("all but summarization tasks").
"""

from __future__ import annotations

import re

import polars as pl

IDK_ANSWER = "Unanswerable"

TEMPLATE = (
    "Read the context and answer the question with the number only. If the context does not "
    f'contain enough information to answer, reply "{IDK_ANSWER}".\n\n'
    "Context:\n{context}\n\nQuestion: {question}\nAnswer:"
)
NO_CONTEXT = "(no context)"

CHOICE_LETTERS = ("A", "B", "C", "D")
IDK_CHOICE = "E"
IDK_CHOICE_TEXT = "The question is unanswerable."

#: Prompt templates by name; fields ``{context}`` (exactly once), ``{question}``, ``{choices}``.
TEMPLATES: dict[str, str] = {
    "planted": TEMPLATE,
    "qa": (
        "Answer the question based on the context. If you cannot answer the question, you should answer "
        f'"{IDK_ANSWER}".\n\nContext:\n{{context}}\n\nQuestion: {{question}}\nAnswer:'
    ),
    "choice": (
        "Read the context and answer the multiple-choice question with the letter of the correct option. "
        f'If the question cannot be answered based on the information in the context, write "{IDK_CHOICE}" '
        f'for "unanswerable".\n\nContext:\n{{context}}\n\nQuestion: {{question}}\n{{choices}}\nAnswer:'
    ),
    "summary": "Read the context and follow the instruction.\n\nContext:\n{context}\n\n"
               "Instruction: {question}\nAnswer:",
}
DEFAULT_TEMPLATE = "planted"
AUTO = "auto"

_FIELD_RE = re.compile(r"\{(context|question|choices)\}")


class TemplateError(ValueError):
    """An unknown template name, or a template whose fields the problems table lacks."""


def check_template(name: str, auto: bool = False) -> str:
    """``name`` if it is a key of :data:`TEMPLATES` (or ``"auto"`` when ``auto``), else :class:`TemplateError`."""
    if name in TEMPLATES or (auto and name == AUTO):
        return name
    known = ", ".join([*TEMPLATES, *([AUTO] if auto else [])])
    raise TemplateError(f"unknown prompt template {name!r} (known: {known})")


def _choices_expr() -> pl.Expr:
    """``A. <opt>\\nB. ...\\nD. <opt>\\nE. The question is unanswerable.`` from the ``choices`` list column."""
    parts: list[pl.Expr] = []
    for i, letter in enumerate(CHOICE_LETTERS):
        parts += [pl.lit(f"{'' if i == 0 else chr(10)}{letter}. "), pl.col("choices").list.get(i, null_on_oob=True)]
    return pl.concat_str([*parts, pl.lit(f"\n{IDK_CHOICE}. {IDK_CHOICE_TEXT}")])


def _render(text: str, columns: list[str]) -> pl.Expr:
    """Expression for a piece of template text with its fields filled from the joined frame."""
    pieces = _FIELD_RE.split(text)
    exprs: list[pl.Expr] = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            if piece:
                exprs.append(pl.lit(piece))
        elif piece == "choices":
            if "choices" not in columns:
                raise TemplateError("a four-choice template needs a 'choices' column (list of 4 options) in the "
                                    "problems")
            exprs.append(_choices_expr())
        else:
            exprs.append(pl.col(piece))
    return pl.concat_str(exprs) if len(exprs) > 1 else (exprs[0] if exprs else pl.lit(""))


#: Columns of document-suite problems that render a context from the document's own text.
DOCUMENT_COLUMNS = ("document", "unit_starts", "unit_ends")


def _context_expr(columns: list[str]) -> pl.Expr:
    """``units[start : start + C]``: a slice of ``document`` between the first and last unit's
    offsets when the problems carry them (separators kept as in the document), else the units
    joined by spaces; :data:`NO_CONTEXT` when C = 0."""
    if set(DOCUMENT_COLUMNS) <= set(columns):
        lo = pl.col("unit_starts").list.get(pl.col("start"), null_on_oob=True)
        hi = pl.col("unit_ends").list.get(pl.col("start") + pl.col("C") - 1, null_on_oob=True)
        context = pl.col("document").str.slice(lo, hi - lo)
    else:
        context = pl.col("units").list.slice(pl.col("start"), pl.col("C")).list.join(" ")
    return pl.when(pl.col("C") == 0).then(pl.lit(NO_CONTEXT)).otherwise(context)


def render_prompt_parts(spans: pl.DataFrame, problems: pl.DataFrame) -> pl.DataFrame:
    """``head, context, tail`` per span row (``problem_id, C, start``); prompt = head + context + tail.

    The template is the problem's ``template`` column when present (null or absent:
    :data:`DEFAULT_TEMPLATE`); the question (and options) are always in full in ``tail``.
    """
    optional = [c for c in ("template", "choices", *DOCUMENT_COLUMNS) if c in problems.columns]
    joined = spans.select("problem_id", "C", "start").join(
        problems.select("problem_id", "units", "question", *optional), on="problem_id", how="left",
        maintain_order="left"
    )
    if joined["units"].null_count():
        missing = joined.filter(pl.col("units").is_null())["problem_id"][0]
        raise KeyError(f"span refers to unknown problem_id {missing!r}")
    columns = joined.columns
    if "template" in columns:
        joined = joined.with_columns(pl.col("template").fill_null(DEFAULT_TEMPLATE))
        names = sorted(joined["template"].unique().to_list())
    else:
        names = [DEFAULT_TEMPLATE]
    heads, tails = {}, {}
    for name in names:
        head, rest = TEMPLATES[check_template(name)].split("{context}")
        heads[name], tails[name] = _render(head, columns), _render(rest, columns)

    def pick(parts: dict[str, pl.Expr]) -> pl.Expr:
        if len(parts) == 1:
            return next(iter(parts.values()))
        chain = pl.when(pl.col("template") == names[0]).then(parts[names[0]])
        for name in names[1:]:
            chain = chain.when(pl.col("template") == name).then(parts[name])
        return chain.otherwise(None)

    return joined.select(
        pick(heads).alias("head"), _context_expr(columns).alias("context"), pick(tails).alias("tail")
    )


def render_prompts(spans: pl.DataFrame, problems: pl.DataFrame) -> pl.Series:
    """Prompt text per span row (``problem_id, C, start``), context = units[start : start + C]."""
    parts = render_prompt_parts(spans, problems)
    return parts.select(pl.concat_str(["head", "context", "tail"]).alias("prompt"))["prompt"]
