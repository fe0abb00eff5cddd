"""``raylc longscore``: LongScore (:mod:`raylc.sweep.longscore`) of score tables and of finished
length-suite runs (their folders, or globs of them: :mod:`raylc.compare` finds and reads them),
ranked together, with the tables and figures written under an output folder."""

from __future__ import annotations

from typing import Optional, Sequence

import polars as pl

from raylc.compare import find_runs, length_scores, merge_longscore, relabel, runs_longscore
from raylc.io.errors import why_unreadable
from raylc.io.parallel import Mapper
from raylc.io.schemas import check_tables
from raylc.io.store import Store, StoreError, read_input
from raylc.run.folder import MANIFEST, RunFolder
from raylc.sweep.longscore import DEFAULT_BASE_LENGTHS, check_score_rows, longscore, task_correlation
from raylc.sweep.report import write_longscore_result
from raylc.sweep.tables import LONGSCORE_TABLES, SCORES


def is_run_source(source: str) -> bool:
    """Whether ``source`` names runs (a glob, or a folder holding a manifest.json), not a table."""
    if any(c in source.rstrip("/").rpartition("/")[2] for c in "*?["):
        return True
    return RunFolder.at(source).exists(MANIFEST)


def _table_scores(uris: Sequence[str]) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
    """The score tables at ``uris`` and their labels (each model its own, no run id)."""
    frames, labels = [], []
    for uri in uris:
        if RunFolder.at(uri).exists(SCORES.path):  # a run's folder that lost its manifest: not a table
            raise StoreError(f"{uri}: a run folder without its {MANIFEST}, so not a finished run; pass a finished "
                             "run or a score table")
        scores = read_input(uri)
        missing = sorted({"model", "task", "length", "score"} - set(scores.columns))
        if missing:
            hint = " (a run's own score table: pass the run folder instead)" if missing == ["model"] else ""
            raise StoreError(f"{uri}: scores is missing columns {missing} (needed: model, task, length, score "
                             f"[, sample_id]){hint}")
        try:
            check_score_rows(scores)
        except (ValueError, pl.exceptions.PolarsError) as exc:  # rows numbered in this file
            raise StoreError(f"{uri}: {why_unreadable(exc)}") from None
        frames.append(scores)
        labels.append(scores.select(pl.col("model").cast(pl.String).unique().alias("label")).with_columns(
            run_id=pl.lit(None, pl.String), model=pl.col("label")))
    return frames, labels


def run_longscore(
    sources: str | Sequence[str],
    out_uri: str,
    base_lengths: Optional[Sequence[int]] = None,
    n_boot: Optional[int] = None,
    seed: Optional[int] = None,
    mapper: Optional[Mapper] = None,
    figures: bool = True,
) -> dict[str, pl.DataFrame]:
    """Read the scores of ``sources`` (score tables, and run folders or globs of them: a run's
    kept scores, :func:`raylc.compare.length_scores`), compute LongScore, write ``per_length``,
    ``summary``, ``correlation`` Parquet tables and PNG figures (unless ``figures`` is false)
    under ``out_uri`` (local or s3://). ``per_length`` and ``summary`` carry ``run_id`` (null for
    rows from a score table) and ``model``. A run's LongScore is the one its report computed
    (:func:`raylc.compare.runs_longscore`: its own bootstrap unless ``n_boot`` / ``seed`` are
    given); a score table's has ``n_boot`` resamples (default 0: no CI) with ``seed`` (default
    0). ``per_length`` and ``summary`` state n_boot and boot_seed; ``correlation`` (across models,
    no bootstrap) has neither, nor ``run_id`` and ``model``. Per (model, task) aggregation is
    mapped by ``mapper`` (e.g. over Ray tasks; None: in process). A table that
    :func:`raylc.sweep.longscore.check_score_rows` refuses is a :class:`StoreError` line naming
    the file and its row; what only the tables together break
    (:func:`raylc.sweep.longscore.validate_scores`) names them all; either before anything is
    written."""
    sources = [sources] if isinstance(sources, str) else list(sources)
    run_patterns = [s for s in sources if is_run_source(s)]
    tables = [s for s in sources if s not in run_patterns]
    frames, labels = _table_scores(tables)
    results = []
    if run_patterns:
        runs = find_runs(run_patterns)
        run_scores, run_labels, run_base = length_scores(runs)
        if not run_scores.height:
            raise StoreError(f"{', '.join(run_patterns)}: no length-controlled run among them")
        results = runs_longscore(runs, base_lengths, n_boot, seed, mapper)  # each its own, unless given
        base_lengths = run_base if base_lengths is None and run_base else base_lengths  # for the score tables
        if not results and not frames:
            raise StoreError(f"{', '.join(run_patterns)}: no run among them has a LongScore (it needs a score at "
                             "its base lengths and one above them; LongBench v1 and v2 have no base lengths)")
        labels.append(run_labels)
        frames_all = frames + [run_scores]
    else:
        frames_all = frames
    if frames:
        try:
            results.insert(0, longscore(pl.concat(frames, how="diagonal_relaxed"),
                                        DEFAULT_BASE_LENGTHS if base_lengths is None else base_lengths,
                                        n_boot=n_boot or 0, seed=seed or 0, mapper=mapper))
        except (ValueError, pl.exceptions.PolarsError) as exc:  # a bad table; tables whose columns' types clash
            raise StoreError(f"{', '.join(tables)}: {why_unreadable(exc)}") from None
    scores = pl.concat(frames_all, how="diagonal_relaxed")
    result = merge_longscore(results)
    if scores["model"].n_unique() >= 3 and scores["task"].n_unique() >= 2:
        result["correlation"] = task_correlation(scores, by="task")
    label_table = pl.concat(labels).unique("label", keep="first")
    result = {name: relabel(frame, label_table) if name in ("per_length", "summary") else frame
              for name, frame in result.items()}
    result = check_tables(LONGSCORE_TABLES, result)
    write_longscore_result(result, Store(out_uri), figures)
    return result
