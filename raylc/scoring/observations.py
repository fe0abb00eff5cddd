"""Span outcomes for the observation table (DOLCE Section 3.1, Appendix E): one score per
span by the problem's prompt template, null where the probe abstained (IDK).

* ``planted`` / ``qa``: the job's ``scoring.metric`` (exact match by default; F1, SubEM,
  ROUGE-L for partial credit, which the fit treats as PIG when the dip test says so) against
  the references; an IDK answer (:data:`raylc.scoring.extract.IDK_PATTERNS`) is null;
* ``choice``: the extracted letter's accuracy; "E" (Appendix E's extra choice) is null;
* ``summary``: ROUGE-L against the references (no IDK option).
"""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from raylc.scoring.extract import IDK_PATTERNS, choice, is_idk
from raylc.scoring.metrics import METRICS
from raylc.text.prompts import IDK_CHOICE

OBSERVATION_SCHEMA = {
    "task": pl.String,
    "problem_id": pl.String,
    "L": pl.Int64,
    "C": pl.Int64,
    "start": pl.Int64,
    "score": pl.Float64,
    "metric": pl.String,
}


def _score_group(rows: pl.DataFrame, template: str, metric: str, patterns: tuple[str, ...]) -> pl.DataFrame:
    completion, refs = rows["completion"], rows["_refs"]
    if template == "choice":
        letter = pl.Series(choice(completion, idk=True), dtype=pl.String)
        score = METRICS["accuracy"](letter, rows["answer"])
        return rows.with_columns(score=pl.when(letter == IDK_CHOICE).then(None).otherwise(score),
                                 metric=pl.lit("accuracy"))
    if template == "summary":
        return rows.with_columns(score=METRICS["rougeL"](completion, refs), metric=pl.lit("rougeL"))
    idk = is_idk(completion, patterns=patterns)
    return rows.with_columns(score=pl.when(idk).then(None).otherwise(METRICS[metric](completion, refs)),
                             metric=pl.lit(metric))


def score_spans(
    completions: pl.DataFrame,
    problems: pl.DataFrame,
    metric: str = "exact_match",
    idk_patterns: Optional[Sequence[str]] = None,
) -> pl.DataFrame:
    """The observation table (:data:`OBSERVATION_SCHEMA`, rows in input order).

    ``completions`` needs ``task, problem_id, L, C, start, completion``; ``problems`` needs
    ``problem_id, answer`` and optionally ``answers`` (all references) and ``template``
    (:data:`raylc.text.prompts.TEMPLATES`; ``planted`` when absent). ``idk_patterns`` are regexes
    (default :data:`raylc.scoring.extract.IDK_PATTERNS`).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {sorted(METRICS)}")
    cols = ["problem_id", "answer", *[c for c in ("answers", "template") if c in problems.columns]]
    joined = completions.join(problems.select(cols), on="problem_id", how="left",
                              maintain_order="left").with_row_index("_row")
    joined = joined.with_columns(
        _refs=pl.col("answers") if "answers" in cols else pl.concat_list(pl.col("answer")),
        template=pl.col("template") if "template" in cols else pl.lit("planted"),
    )
    patterns = tuple(idk_patterns) if idk_patterns is not None else IDK_PATTERNS
    parts = [_score_group(rows, template, metric, patterns)
             for (template,), rows in joined.partition_by("template", as_dict=True, maintain_order=True).items()]
    scored = pl.concat(parts, how="vertical_relaxed").sort("_row") if parts else joined.with_columns(
        score=pl.lit(None, pl.Float64), metric=pl.lit(metric))
    return scored.select(list(OBSERVATION_SCHEMA)).cast(OBSERVATION_SCHEMA)
