"""`raylc longscore`: LongScore tables, rankings, correlations and figures from a scores table."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from raylc.longscore import longscore, task_correlation
from raylc.store import Store, StoreError, read_input


def run_longscore(
    scores_uri: str,
    out_uri: str,
    base_lengths: Sequence[int],
    n_boot: int = 0,
    seed: int = 0,
    use_ray: Optional[bool] = None,
) -> dict[str, pl.DataFrame]:
    """Read ``scores_uri``, compute LongScore, write ``per_length``, ``summary``, ``correlation``
    Parquet tables and PNG figures under ``out_uri`` (local or s3://). Per (model, task)
    aggregation runs as Ray tasks when ``use_ray`` (default: when RAY_ADDRESS is set)."""
    scores = read_input(scores_uri)
    mapper = None
    if use_ray if use_ray is not None else bool(os.environ.get("RAY_ADDRESS")):
        from raylc.pipeline.ray_exec import map_tasks

        mapper = map_tasks
    try:
        result = longscore(scores, base_lengths, n_boot=n_boot, seed=seed, mapper=mapper)
    except ValueError as exc:
        raise StoreError(f"{scores_uri}: {exc}") from None
    if scores["model"].n_unique() >= 3 and scores["task"].n_unique() >= 2:
        result["correlation"] = task_correlation(scores, by="task")
    store = Store(out_uri)
    for name, frame in result.items():
        store.write_table(frame, f"{name}.parquet")
    _figures(result, store)
    return result


def _figures(result: dict[str, pl.DataFrame], store: Store) -> None:
    from raylc.plots_length import plot_correlation_heatmap, plot_longscore_vs_length, plot_score_vs_length

    with tempfile.TemporaryDirectory() as tmp:
        paths = [
            plot_score_vs_length(result["per_length"], Path(tmp, "score_vs_length.png")),
            plot_longscore_vs_length(result["per_length"], Path(tmp, "longscore_vs_length.png")),
        ]
        if "correlation" in result:
            paths.append(plot_correlation_heatmap(result["correlation"], Path(tmp, "task_correlation.png")))
        for path in paths:
            store.write_bytes(Path(path).read_bytes(), Path(path).name)
