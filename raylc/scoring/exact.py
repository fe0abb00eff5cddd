"""COW outcomes from completions: exact match with IDK detection (DOLCE Section 3.1)."""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from raylc.scoring.extract import IDK_PATTERNS, is_idk
from raylc.scoring.metrics import exact_match

OBSERVATION_SCHEMA = {
    "task": pl.String,
    "problem_id": pl.String,
    "L": pl.Int64,
    "C": pl.Int64,
    "start": pl.Int64,
    "score": pl.Float64,
    "metric": pl.String,
}


def score_exact_match(
    completions: pl.DataFrame, problems: pl.DataFrame, idk_patterns: Optional[Sequence[str]] = None
) -> pl.DataFrame:
    """Observation table: score 1.0 / 0.0 by normalized exact match, null when the probe abstained.

    ``completions`` needs ``task, problem_id, L, C, start, completion``; ``problems`` needs
    ``problem_id, answer``. ``idk_patterns`` are regexes (default
    :data:`raylc.scoring.extract.IDK_PATTERNS`). Output follows :data:`OBSERVATION_SCHEMA`.
    """
    joined = completions.join(problems.select("problem_id", "answer"), on="problem_id", how="left", maintain_order="left")
    idk = is_idk(joined["completion"], patterns=tuple(idk_patterns) if idk_patterns is not None else IDK_PATTERNS)
    em = exact_match(joined["completion"], joined["answer"])
    return (
        joined.with_columns(
            score=pl.when(idk).then(None).otherwise(em),
            metric=pl.lit("exact_match"),
        )
        .select(list(OBSERVATION_SCHEMA))
        .cast(OBSERVATION_SCHEMA)
    )
