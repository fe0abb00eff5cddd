"""Prompt rendering: the question is kept in full while only the context is sampled."""

from __future__ import annotations

import polars as pl

IDK_ANSWER = "Unanswerable"

TEMPLATE = (
    "Read the context and answer the question with the number only. If the context does not "
    f'contain enough information to answer, reply "{IDK_ANSWER}".\n\n'
    "Context:\n{context}\n\nQuestion: {question}\nAnswer:"
)
NO_CONTEXT = "(no context)"


def render_prompts(spans: pl.DataFrame, problems: pl.DataFrame) -> pl.Series:
    """Prompt text per span row (``problem_id, C, start``), context = units[start : start + C]."""
    joined = spans.select("problem_id", "C", "start").join(
        problems.select("problem_id", "units", "question"), on="problem_id", how="left", maintain_order="left"
    )
    if joined["units"].null_count():
        missing = joined.filter(pl.col("units").is_null())["problem_id"][0]
        raise KeyError(f"span refers to unknown problem_id {missing!r}")
    context = pl.col("units").list.slice(pl.col("start"), pl.col("C")).list.join(" ")
    context = pl.when(pl.col("C") == 0).then(pl.lit(NO_CONTEXT)).otherwise(context)
    head, rest = TEMPLATE.split("{context}")
    middle, tail = rest.split("{question}")
    return joined.select(
        pl.concat_str([pl.lit(head), context, pl.lit(middle), pl.col("question"), pl.lit(tail)]).alias("prompt")
    )["prompt"]
