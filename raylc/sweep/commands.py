"""`raylc longscore`: LongScore tables, rankings, correlations and figures from a scores table."""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from raylc.io.parallel import Mapper
from raylc.io.store import Store, StoreError, read_input
from raylc.sweep.longscore import longscore, task_correlation
from raylc.sweep.report import write_longscore_result


def run_longscore(
    scores_uri: str,
    out_uri: str,
    base_lengths: Sequence[int],
    n_boot: int = 0,
    seed: int = 0,
    mapper: Optional[Mapper] = None,
) -> dict[str, pl.DataFrame]:
    """Read ``scores_uri``, compute LongScore, write ``per_length``, ``summary``, ``correlation``
    Parquet tables and PNG figures under ``out_uri`` (local or s3://). Per (model, task)
    aggregation is mapped by ``mapper`` (e.g. over Ray tasks; None: in process). A table
    that :func:`raylc.sweep.longscore.validate_scores` refuses is a :class:`StoreError` line naming the
    file, before anything is written."""
    scores = read_input(scores_uri)
    try:
        result = longscore(scores, base_lengths, n_boot=n_boot, seed=seed, mapper=mapper)
    except ValueError as exc:
        raise StoreError(f"{scores_uri}: {exc}") from None
    if scores["model"].n_unique() >= 3 and scores["task"].n_unique() >= 2:
        result["correlation"] = task_correlation(scores, by="task")
    write_longscore_result(result, Store(out_uri))
    return result
