"""LLM-as-judge scoring through the same backends and actor pools as the probe.

The judge is a second backend config (``judge:`` in the job, any ``probe`` backend). A
frame of predictions becomes judge prompts (:data:`JUDGE_TEMPLATE`, after the
reference-based grading prompts of 100-LongBench and HELMET: the judge sees the question,
the reference and the prediction and answers with an integer grade), the prompts run
through ``generate`` (in-process or :func:`raylc.pipeline.ray_exec.generate_on_ray`), and
the grades are parsed and scaled to [0, 1]; an unparseable or failed judgement is null.
"""

from __future__ import annotations

import re
from typing import Callable

import polars as pl

JUDGE_TEMPLATE = (
    "You are grading an answer against a reference.\n\n"
    "Question: {question}\n\nReference answer: {reference}\n\nModel answer: {prediction}\n\n"
    "Grade the model answer for correctness against the reference from 0 (wrong) to {scale} "
    "(fully correct and fluent). Reply with one line: Score: <integer>"
)
SCORE_RE = re.compile(r"score\s*[:=]\s*(\d+)", re.IGNORECASE)


def judge_prompts(frame: pl.DataFrame, scale: int = 5) -> pl.Series:
    """Judge prompts from ``question, reference, prediction`` columns (null prediction -> empty)."""
    head, rest = JUDGE_TEMPLATE.split("{question}")
    mid1, rest = rest.split("{reference}")
    mid2, tail = rest.split("{prediction}")
    tail = tail.replace("{scale}", str(scale))
    return frame.select(
        pl.concat_str([pl.lit(head), pl.col("question"), pl.lit(mid1), pl.col("reference"), pl.lit(mid2),
                       pl.col("prediction").fill_null(""), pl.lit(tail)]).alias("judge_prompt")
    )["judge_prompt"]


def parse_grades(texts: pl.Series, scale: int = 5) -> pl.Series:
    """The first ``Score: N`` of each judgement scaled to [0, 1]; null when absent or out of range."""
    value = texts.str.extract(f"(?i){SCORE_RE.pattern}", 1).cast(pl.Int64, strict=False)
    return pl.select(pl.when(value.is_between(0, scale)).then(value / scale).otherwise(None).alias("judge_score"))[
        "judge_score"
    ]


def judge_scores(frame: pl.DataFrame, generate: Callable[[pl.Series], pl.DataFrame], scale: int = 5) -> pl.DataFrame:
    """``frame`` plus ``judge_score`` (in [0, 1] or null) and the judge's raw ``judgement``.

    ``generate(prompts)`` returns one generation row per prompt, in order (the columns of
    :data:`raylc.backends.base.GENERATION_SCHEMA`).
    """
    generations = generate(judge_prompts(frame, scale))
    texts = generations["completion"]
    return frame.with_columns(judgement=texts, judge_score=parse_grades(texts, scale))
