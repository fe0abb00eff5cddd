"""LongScore (100-LongBench, Yang et al. 2025, Sec. 3.2) and cross-task / cross-length analysis.

Notation follows the paper. ``S_l`` is a model's score on a task at context length ``l`` (the mean over
samples when sample-level scores are given). Base Ability (Eq. 1) is the mean of ``S_l`` over the short
*base lengths* (2K, 4K, 6K in 100-LongBench; 4K alone for RULER in Table 5)::

    Base = (S_2k + S_4k + S_6k) / 3

and LongScore at a longer length ``l`` (Eq. 2) is the relative change from Base::

    LC_l = (S_l - Base) / Base

Eq. 2 is a fraction, but every table in the paper (Tables 1, 4-8) prints it as a **percentage**
(Table 5: Llama3.1-70B, Base 96.5, S_8k 95.8 -> LC_8k -0.7), so this module reports
``lc = 100 * (S_l - Base) / Base``. The tables' "Avg" columns are means over the long lengths only
("the average of scores excluding the base score", Table 5): ``avg_score = mean_l S_l`` and
``avg_lc = mean_l LC_l`` (equal to ``100 * (avg_score - Base) / Base`` because Base is shared).

Averages over tasks (Tables 4, 7, 8; Figure 6, and RULER's score in Table 5, which is already an average
over RULER's tasks) take the task-mean score per length first, ``S_l = mean_t S_{t,l}`` and
``Base = mean_t Base_t``, and then apply Eq. 1-2 to those means: the ``overall`` rows. This is *not* the
mean of per-task LongScores (Table 8 reproduces to 0.02 with the former).

Also here: Spearman correlation between tasks / lengths across models (HELMET, Yen et al. 2025, Sec. 3.1,
Figure 3: "Spearman's rank correlation at 128K input length, calculated across 35 instruction-tuned
models"), the cross-model line fits of the long-context prediction thesis (Wang 2024, Ch. 6,
Figures 6.1-6.3) and their slopes between tasks or lengths across models (:func:`pair_slopes`).

A *long* length is one above every base length: the averages run over those alone. A length below the
largest base length that is not a base length keeps its own ``LC_l`` row but stays out of the averages.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from raylc.io.parallel import Mapper, in_process

OVERALL = "overall"
"""Task name of the rows averaged over tasks (see module docstring)."""

DEFAULT_BASE_LENGTHS = (2048, 4096, 6144)

PER_LENGTH_COLUMNS = (
    "model", "task", "length", "score", "base", "lc", "lc_lo", "lc_hi",
    "n", "is_base", "rank_score", "rank_lc", "warning", "n_boot", "boot_seed",
)
SUMMARY_COLUMNS = (
    "model", "task", "base", "avg_score", "avg_lc", "avg_lc_lo", "avg_lc_hi",
    "rank_base", "rank_score", "rank_lc", "n_long", "warning", "n_boot", "boot_seed",
)

_GROUP_SCHEMA = {
    "model": pl.String, "task": pl.String, "length": pl.Int64, "n": pl.Int64, "score": pl.Float64,
    "base": pl.Float64, "is_base": pl.Boolean, "lc": pl.Float64, "lc_lo": pl.Float64, "lc_hi": pl.Float64,
    "warning": pl.String, "boot_score": pl.List(pl.Float64), "boot_base": pl.List(pl.Float64),
}


# --------------------------------------------------------------------------------------------- helpers


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def _lc_expr(score: str | pl.Expr, base: str | pl.Expr) -> pl.Expr:
    """``100 * (S - Base) / Base``; null where Base <= 0 or either side is null (Eq. 2 undefined)."""
    s = pl.col(score) if isinstance(score, str) else score
    b = pl.col(base) if isinstance(base, str) else base
    return pl.when(b > 0).then(100.0 * (s - b) / b).otherwise(None)


def _join_warnings(*exprs: pl.Expr) -> pl.Expr:
    """Concatenate nullable warning strings with '; ' (null when all are null)."""
    joined = pl.concat_str([e for e in exprs], separator="; ", ignore_nulls=True)
    return pl.when(joined.str.len_chars() > 0).then(joined).otherwise(None)


def _check_scores(scores: pl.DataFrame, value: str = "score") -> pl.DataFrame:
    missing = {"model", "task", "length", value} - set(scores.columns)
    if missing:
        raise ValueError(f"scores is missing columns {sorted(missing)}")
    for col in ("model", "task", "length"):
        if scores[col].null_count():
            row = scores.filter(pl.col(col).is_null()).row(0, named=True)
            raise ValueError(f"column {col!r} has nulls, e.g. row {row}")
    return scores.with_columns(
        pl.col("model").cast(pl.String), pl.col("task").cast(pl.String), pl.col("length").cast(pl.Int64),
        pl.col(value).cast(pl.Float64).fill_nan(None),
    ).filter(pl.col(value).is_not_null())


SCORE_RANGE = (0.0, 100.0)
"""Scores are fractions in [0, 1] or percentages in [0, 100] (the papers' tables); LC_l is a ratio, so the
scale cancels within a (model, task), but the ``overall`` rows average tasks: use one scale per table."""
MAX_TOKENS = 10**9  #: a length above this is a typo (no model reads that many tokens)


def check_name_columns(scores: pl.DataFrame) -> None:
    """``model`` and ``task`` hold names (text or whole numbers), not lists or records: else a
    one-line ValueError naming the column."""
    for col in ("model", "task"):
        kind = scores.schema[col]
        if not (kind in (pl.String, pl.Categorical, pl.Enum, pl.Null) or kind.is_integer()):
            raise ValueError(f"column {col!r}: must hold names (text), got {kind}")


def _row_text(row: dict) -> str:
    shown = {k: (v[:37] + "..." if isinstance(v, str) and len(v) > 40 else v) for k, v in row.items() if k != "_row"}
    return "{" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + "}"


def _refuse(frame: pl.DataFrame, mask: pl.Expr, message: str) -> None:
    """Raise ``ValueError(message + "; e.g. row i: {...}")`` for the first row where ``mask`` holds (rows
    numbered from 1 in table order, ``_row``); nothing when it holds nowhere."""
    hit = frame.filter(mask)
    if hit.height:
        row = hit.row(0, named=True)
        raise ValueError(f"{message}; e.g. row {row['_row']}: {_row_text(row)}".replace("\n", " "))


def validate_scores(
    scores: pl.DataFrame, base_lengths: Sequence[int] = DEFAULT_BASE_LENGTHS, *, n_boot: int = 0,
    base_given: bool = False,
) -> pl.DataFrame:
    """Check a LongScore input table (:func:`longscore`) and return it typed, without its null scores.

    One ``ValueError`` line naming the column and an example row (numbered from 1) for: a missing column,
    no rows, a null ``model``/``task``/``length``, a non-integer or non-positive length, a non-numeric
    score or one outside [0, 100] (fractions in [0, 1] or percentages), a null ``sample_id`` or a
    (model, task, length, sample_id) given twice, ``n_boot > 0`` without ``sample_id``, a (model, task)
    whose every score is null, and a table that has no length above every base length, or (unless
    Base is given, ``base_given``) none at the base lengths. Null and NaN scores are skipped (no score);
    without ``sample_id`` the rows of one (model, task, length) are its samples (S_l is their mean).
    """
    frame = check_score_rows(scores, n_boot)
    _refuse(frame, pl.col("score").is_null().all().over("model", "task"),
            "column 'score': every score of this (model, task) is null (no S_l at any length)")
    frame = frame.filter(pl.col("score").is_not_null())
    base = [int(b) for b in base_lengths]
    is_base = pl.col("length").is_in(base)
    shown = ", ".join(map(str, base))
    if not frame.select(_is_long(base).any()).item():
        _refuse(frame, pl.lit(True), f"column 'length': no length above the base lengths ({shown}): LongScore "
                "needs scores at a longer length too (LC_l compares S_l with Base at long lengths l)")
    if not base_given and not frame.select(is_base.any()).item():
        _refuse(frame, pl.lit(True), f"column 'length': no score at the base lengths {shown}, so Base (Eq. 1) is "
                "undefined for every model: set the base lengths to lengths of the table")
    return frame.drop("_row")


def check_score_rows(scores: pl.DataFrame, n_boot: int = 0) -> pl.DataFrame:
    """The row checks of :func:`validate_scores`, which one score table passes on its own (the
    rules that need every table, its lengths and its all-null (model, task), excepted): the table
    typed, with ``_row`` (rows numbered from 1), or one ``ValueError`` line."""
    missing = sorted({"model", "task", "length", "score"} - set(scores.columns))
    if missing:
        raise ValueError(f"scores is missing columns {missing} (needed: model, task, length, score [, sample_id])")
    if scores.height == 0:
        raise ValueError("column 'score': the scores table has no rows")
    frame = scores.with_row_index("_row", offset=1)
    for col in ("model", "task", "length"):
        _refuse(frame, pl.col(col).is_null(), f"column {col!r} has nulls")
    if frame.schema["score"] == pl.String and frame["score"].null_count() == frame.height:
        frame = frame.with_columns(pl.col("score").cast(pl.Null))  # an empty CSV column is read as text
    check_name_columns(frame)
    length, score = frame.schema["length"], frame.schema["score"]
    if length.is_float():
        _refuse(frame, ~pl.col("length").is_finite() | (pl.col("length") != pl.col("length").floor()),
                "column 'length': must hold whole numbers of tokens")
    elif not length.is_integer():
        raise ValueError(f"column 'length': must hold integers (tokens), got {length}")
    _refuse(frame, pl.col("length") < 1, "column 'length': must be >= 1")
    _refuse(frame, pl.col("length") > MAX_TOKENS, f"column 'length': more than {MAX_TOKENS:,} tokens")
    if not (score.is_numeric() or score == pl.Null):
        raise ValueError(f"column 'score': must be numeric (fractions in [0, 1] or percentages), got {score}")
    frame = frame.with_columns(
        pl.col("model").cast(pl.String), pl.col("task").cast(pl.String), pl.col("length").cast(pl.Int64),
        pl.col("score").cast(pl.Float64).fill_nan(None),
    )
    lo, hi = SCORE_RANGE
    _refuse(frame, pl.col("score").is_infinite() | (pl.col("score") < lo) | (pl.col("score") > hi),
            f"column 'score': outside [{lo:g}, {hi:g}] (fractions in [0, 1] or percentages)")
    if "sample_id" in frame.columns:
        _refuse(frame, pl.col("sample_id").is_null(), "column 'sample_id' has nulls (leave the column out if "
                "rows are not samples)")
        key = pl.struct("model", "task", "length", "sample_id")
        _refuse(frame, key.is_duplicated() & ~key.is_first_distinct(),
                "column 'sample_id': a (model, task, length, sample_id) appears twice")
    elif n_boot > 0:
        raise ValueError("column 'sample_id': bootstrap CIs (--n-boot) need sample-level scores with a sample_id "
                         "column (without it, the rows of one (model, task, length) are averaged and no CI is given)")
    return frame


def _is_long(base_lengths: Sequence[int]) -> pl.Expr:
    """A long length: above every base length (module docstring)."""
    return pl.col("length") > max((int(b) for b in base_lengths), default=0)


def longscore_applies(scores: pl.DataFrame, base_lengths: Sequence[int]) -> bool:
    """Whether LongScore input ``scores`` (``length`` column) has a LongScore under
    ``base_lengths``: a score at a base length and one above them all. A run's report, ``raylc
    compare`` and ``raylc longscore`` give a run LongScore by this one rule (LongBench v2's lengths
    are classes, not numbers: none)."""
    if not base_lengths or not scores.schema["length"].is_integer():
        return False
    return scores.select(pl.col("length").is_in([int(b) for b in base_lengths]).any()
                                                & _is_long(base_lengths).any()).item()


def _cell_means(scores: pl.DataFrame, value: str = "score") -> pl.DataFrame:
    """``S_l`` per (model, task, length): the mean over samples (or the single given score)."""
    return (
        _check_scores(scores, value)
        .group_by("model", "task", "length")
        .agg(pl.col(value).mean(), n=pl.len().cast(pl.Int64))
        .sort("task", "model", "length")
    )


def _ci_tables(rep: pl.DataFrame, keys: list[str], alpha: float,
               long: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Percentile CIs from bootstrap replicates.

    ``rep`` has ``keys + [length, is_base, b, s, base_b]`` (replicate ``b`` of ``S_l`` and of Base).
    Returns (per-length ``lc_lo, lc_hi``; per-group ``avg_lc_lo, avg_lc_hi`` over the rows where ``long``
    holds). A CI is null when Base <= 0
    in any replicate (LC undefined there) -- never a number computed from a subset.
    """
    q = [alpha, 1.0 - alpha]
    rep = rep.with_columns(lc_b=_lc_expr("s", "base_b"))
    per = rep.group_by(*keys, "length").agg(
        lc_lo=pl.when(pl.col("lc_b").null_count() == 0).then(pl.col("lc_b").quantile(q[0], "linear")),
        lc_hi=pl.when(pl.col("lc_b").null_count() == 0).then(pl.col("lc_b").quantile(q[1], "linear")),
    )
    avg_b = (
        rep.filter(long)
        .group_by(*keys, "b")
        .agg(avg=pl.when(pl.col("lc_b").null_count() == 0).then(pl.col("lc_b").mean()))
    )
    avg = avg_b.group_by(*keys).agg(
        avg_lc_lo=pl.when(pl.col("avg").null_count() == 0).then(pl.col("avg").quantile(q[0], "linear")),
        avg_lc_hi=pl.when(pl.col("avg").null_count() == 0).then(pl.col("avg").quantile(q[1], "linear")),
    )
    return per, avg


def _explode_boot(per: pl.DataFrame) -> pl.DataFrame:
    """Long frame of replicates (model, task, length, is_base, b, s, base_b) from the list columns."""
    return (
        per.filter(pl.col("boot_score").is_not_null())
        .select("model", "task", "length", "is_base", s="boot_score", base_b="boot_base")
        .with_columns(b=pl.int_ranges(pl.col("s").list.len()))
        .explode("s", "base_b", "b")
    )


def _bootstrap_means(frame: pl.DataFrame, lengths: list[int], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_boot, len(lengths))`` replicates of ``S_l``, resampling sample_ids with replacement.

    Paired design (every sample_id scored at every length, e.g. one question padded to several lengths):
    ids are drawn jointly, keeping the correlation between ``S_l`` and Base. Otherwise (fresh samples per
    length, as in 100-LongBench) ids are resampled within each length.
    """
    wide = frame.pivot(on="length", index="sample_id", values="score", aggregate_function="mean")
    cols = [str(length) for length in lengths]
    mat = wide.select(cols).to_numpy().astype(float)
    if not np.isnan(mat).any():
        idx = rng.integers(0, mat.shape[0], size=(n_boot, mat.shape[0]))
        return mat[idx].mean(axis=1)
    out = np.empty((n_boot, len(lengths)))
    for j, length in enumerate(lengths):
        v = frame.filter(pl.col("length") == length)["score"].to_numpy().astype(float)
        out[:, j] = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    return out


# ------------------------------------------------------------------------------------------- LongScore


def longscore_group(
    frame: pl.DataFrame,
    base_lengths: Sequence[int] = DEFAULT_BASE_LENGTHS,
    base_value: float | None = None,
    n_boot: int = 0,
    seed: int = 0,
    ci: float = 0.95,
) -> pl.DataFrame:
    """LongScore for one (model, task): a plain function, so it can be mapped as a Ray task.

    ``frame`` holds one model and one task: ``length, score`` and optionally ``sample_id`` (then
    ``S_l`` is the mean over samples). Base is ``base_value`` if given, else a constant ``base`` column
    of ``frame`` if present, else Eq. 1 over the ``base_lengths`` present. Returns one row per length:
    ``model, task, length, n, score (S_l), base, is_base, lc (LC_l, percent), lc_lo, lc_hi, warning`` and
    the bootstrap replicates ``boot_score`` / ``boot_base`` (list columns, null without bootstrap) that
    :func:`longscore` uses for average and overall CIs. ``lc`` is null with a warning when Base <= 0.

    With ``n_boot > 0`` and ``sample_id``: ``n_boot`` resamples of sample_ids with replacement, percentile
    ``ci`` intervals of ``LC_l``; the generator is seeded from ``(seed, model, task)`` so results do not
    depend on the order or the process groups are run in.
    """
    if frame.height == 0:
        raise ValueError("empty (model, task) frame")
    if frame["model"].n_unique() != 1 or frame["task"].n_unique() != 1:
        raise ValueError("longscore_group needs exactly one (model, task)")
    model, task = str(frame["model"][0]), str(frame["task"][0])
    if base_value is None and "base" in frame.columns:
        given = frame["base"].drop_nulls().unique()
        if given.len() > 1:
            raise ValueError(f"{model}/{task}: several base values {given.to_list()}")
        base_value = float(given[0]) if given.len() else None
    base_lengths = [int(b) for b in base_lengths]
    samples = "sample_id" in frame.columns
    data = _check_scores(frame)
    if n_boot > 0 and not samples:
        raise ValueError("bootstrap CIs need sample-level scores (a sample_id column)")

    cells = (
        data.group_by("length").agg(pl.col("score").mean(), n=pl.len().cast(pl.Int64)).sort("length")
        .with_columns(is_base=pl.col("length").is_in(base_lengths))
    )
    notes: list[str] = []
    present = cells.filter("is_base")["length"].to_list()
    if base_value is None:
        if not present:
            notes.append(f"no scores at base lengths {base_lengths}: Base undefined")
            base = None
        else:
            base = float(cells.filter("is_base")["score"].mean())
            if len(present) < len(base_lengths):
                missing = sorted(set(base_lengths) - set(present))
                notes.append(f"Base from {present} only (missing base lengths {missing})")
    else:
        base = float(base_value)
    if base is not None and base <= 0:
        notes.append(f"Base = {base:g} <= 0: LongScore undefined")

    lengths = cells["length"].to_list()
    out = cells.with_columns(
        model=pl.lit(model), task=pl.lit(task), base=pl.lit(base, pl.Float64),
    ).with_columns(
        lc=_lc_expr("score", "base"), warning=pl.lit("; ".join(notes) or None, pl.String),
    )

    if n_boot > 0 and cells.height:
        rng = np.random.default_rng([seed, _stable_hash(model), _stable_hash(task)])
        boot = _bootstrap_means(data, lengths, n_boot, rng)
        is_base = np.isin(lengths, base_lengths)
        if base_value is not None:
            boot_base = np.full(n_boot, float(base_value))
        elif is_base.any():
            boot_base = boot[:, is_base].mean(axis=1)
        else:
            boot_base = np.full(n_boot, np.nan)
        out = out.with_columns(
            boot_score=pl.Series(boot.T).cast(pl.List(pl.Float64)),
            boot_base=pl.Series(np.tile(boot_base, (len(lengths), 1))).cast(pl.List(pl.Float64)),
        ).with_columns(pl.col("boot_base").list.eval(pl.element().fill_nan(None)))
        alpha = (1.0 - ci) / 2.0
        per_ci, _ = _ci_tables(_explode_boot(out), ["model", "task"], alpha, _is_long(base_lengths))
        out = out.join(per_ci, on=["model", "task", "length"], how="left")
        if base is not None and base > 0 and per_ci["lc_lo"].null_count():
            out = out.with_columns(warning=_join_warnings(
                pl.col("warning"), pl.lit("bootstrap Base <= 0 in some resamples: CI undefined")))
    else:
        out = out.with_columns(
            lc_lo=pl.lit(None, pl.Float64), lc_hi=pl.lit(None, pl.Float64),
            boot_score=pl.lit(None, pl.List(pl.Float64)), boot_base=pl.lit(None, pl.List(pl.Float64)),
        )
    return out.select([pl.col(c).cast(t) for c, t in _GROUP_SCHEMA.items()])


def _overall(per: pl.DataFrame, base_lengths: Sequence[int], models: list[str], ci: float) -> pl.DataFrame:
    """Task-averaged rows (task = OVERALL): ``S_l = mean_t S_{t,l}``, ``Base = mean_t Base_t``, then Eq. 2."""
    # one row order whatever order the per-(model, task) results came back in (mapped over Ray
    # tasks): the float sums below are then the same in every run
    per = per.filter(pl.col("model").is_in(models)).sort("model", "task", "length")
    n_tasks = per.group_by("model").agg(n_tasks=pl.col("task").n_unique())
    bases = per.group_by("model", "task").agg(pl.col("base").first())
    model_base = bases.group_by("model").agg(
        base=pl.when(pl.col("base").null_count() == 0).then(pl.col("base").mean()),
        base_note=pl.when(pl.col("base").null_count() > 0).then(pl.lit("Base undefined for some task")),
    )
    rows = (
        per.group_by("model", "length")
        .agg(score=pl.col("score").mean(), n=pl.col("n").sum(), k=pl.len())
        .join(n_tasks, on="model").join(model_base, on="model")
        .with_columns(
            task=pl.lit(OVERALL),
            is_base=pl.col("length").is_in([int(b) for b in base_lengths]),
            score=pl.when(pl.col("k") == pl.col("n_tasks")).then("score"),
            len_note=pl.when(pl.col("k") < pl.col("n_tasks"))
            .then(pl.format("only {}/{} tasks at this length: S_l undefined", "k", "n_tasks")),
        )
        .with_columns(
            lc=_lc_expr("score", "base"),
            base_note=pl.when(pl.col("base") <= 0)
            .then(pl.format("Base = {} <= 0: LongScore undefined", pl.col("base").round(4)))
            .otherwise("base_note"),
        )
        .with_columns(warning=_join_warnings(pl.col("base_note"), pl.col("len_note")))
    )
    if per["boot_score"].null_count() < per.height:
        rep = _explode_boot(per)
        rep_base = rep.group_by("model", "task", "b").agg(pl.col("base_b").first()).group_by("model", "b").agg(
            base_b=pl.when(pl.col("base_b").null_count() == 0).then(pl.col("base_b").mean()))
        rep = (
            rep.group_by("model", "length", "is_base", "b").agg(s=pl.col("s").mean(), k=pl.len())
            .join(n_tasks, on="model")
            .with_columns(s=pl.when(pl.col("k") == pl.col("n_tasks")).then("s"), task=pl.lit(OVERALL))
            .join(rep_base, on=["model", "b"])
        )
        boots = rep.sort("b").group_by("model", "length").agg(boot_score="s", boot_base="base_b")
        rows = rows.join(boots, on=["model", "length"], how="left")
        per_ci, _ = _ci_tables(rep, ["model", "task"], (1.0 - ci) / 2.0, _is_long(base_lengths))
        rows = rows.join(per_ci, on=["model", "task", "length"], how="left")
    else:
        rows = rows.with_columns(
            lc_lo=pl.lit(None, pl.Float64), lc_hi=pl.lit(None, pl.Float64),
            boot_score=pl.lit(None, pl.List(pl.Float64)), boot_base=pl.lit(None, pl.List(pl.Float64)),
        )
    return rows.select([pl.col(c).cast(t) for c, t in _GROUP_SCHEMA.items()])


def longscore(
    scores: pl.DataFrame,
    base_lengths: Sequence[int] = DEFAULT_BASE_LENGTHS,
    *,
    base: pl.DataFrame | None = None,
    n_boot: int = 0,
    seed: int = 0,
    ci: float = 0.95,
    overall: bool | None = None,
    mapper: Mapper | None = None,
) -> dict[str, pl.DataFrame]:
    """LongScore tables (100-LongBench Eq. 1-2, Tables 4-7) for every model and task.

    ``scores``: ``model, task, length`` (tokens), ``score`` (in [0, 1] or percent); one row per (model, task,
    length), or one per sample (then ``S_l`` is the sample mean), identified by a ``sample_id`` column when
    bootstrap CIs are wanted; checked by :func:`validate_scores` (``ValueError``, one line).
    ``base_lengths``: lengths whose mean score is Base Ability (Eq. 1); the lengths above all of them are the
    *long* lengths the averages run over (a shorter length that is not a base length gets its ``LC_l`` row
    only).
    ``base``: optional frame ``model, [task,] base`` giving Base directly (as Table 6 does); it overrides
    Eq. 1 for the (model, task) pairs it lists. ``n_boot > 0`` (needs ``sample_id``): percentile ``ci``
    bootstrap intervals of each ``LC_l`` and of the average, resampling sample_ids within (model, task).
    ``overall``: add task-averaged rows with task ``"overall"`` (default: for models with >= 2 tasks).
    ``mapper(fn, frames, *args) -> list`` runs ``fn`` = :func:`longscore_group` over the (model, task)
    frames with ``args = (base_lengths, None, n_boot, seed, ci)`` (a given Base travels in each frame's
    ``base`` column) and returns the outputs in input order. The default runs in-process; results are
    identical either way, e.g. with Ray::

        def ray_mapper(fn, frames, *args):
            remote = ray.remote(fn)
            return ray.get([remote.remote(f, *args) for f in frames])

    Returns ``{"per_length": ..., "summary": ...}``, flat frames ready for Polars/DuckDB:

    - ``per_length``: model, task, length, score (S_l), base, lc (LC_l in percent), lc_lo, lc_hi, n
      (samples), is_base, rank_score and rank_lc (rank among models at that task and length), warning,
      n_boot and boot_seed (the bootstrap the intervals come from; null intervals when n_boot = 0).
    - ``summary``: model, task, base, avg_score and avg_lc (means over long lengths, the tables' "Avg"),
      avg_lc_lo, avg_lc_hi, rank_base / rank_score / rank_lc (rank among models within the task by Base,
      avg_score, avg_lc), n_long, warning, n_boot, boot_seed.

    Ranks: 1 = best (highest), ties share the minimum rank. LC is null (never a number) when Base <= 0 or
    Base is missing; the row's ``warning`` says why and a ``UserWarning`` is emitted.
    """
    scores = validate_scores(scores, base_lengths, n_boot=n_boot, base_given=base is not None)
    if "base" in scores.columns:
        scores = scores.drop("base")
    if base is not None:
        keys = ["model", "task"] if "task" in base.columns else ["model"]
        b = base.select(*[pl.col(k).cast(pl.String) for k in keys], pl.col("base").cast(pl.Float64))
        if b.group_by(keys).len().filter(pl.col("len") > 1).height:
            raise ValueError("base lists a (model, task) more than once")
        scores = scores.join(b, on=keys, how="left")

    frames = scores.sort("model", "task", "length").partition_by("model", "task", maintain_order=True)
    parts = (mapper or in_process)(longscore_group, frames, tuple(int(x) for x in base_lengths), None, n_boot, seed, ci)
    per = pl.concat(parts, how="vertical")

    task_counts = per.group_by("model").agg(pl.col("task").n_unique())
    multi = task_counts.filter(pl.col("task") >= 2)["model"].to_list()
    models = task_counts["model"].to_list() if overall else multi if overall is None else []
    if models:
        if OVERALL in per["task"].unique().to_list():
            raise ValueError(f"task name {OVERALL!r} is reserved for the task average; pass overall=False")
        per = pl.concat([per, _overall(per, base_lengths, models, ci)], how="vertical")

    boot = {"n_boot": pl.lit(int(n_boot), pl.Int64), "boot_seed": pl.lit(int(seed), pl.Int64)}
    per_length, summary = rank_tables(per.with_columns(**boot), _summary(per, ci, base_lengths).with_columns(**boot))

    flagged = summary.filter(pl.col("warning").is_not_null())
    if flagged.height:
        first = flagged.row(0, named=True)
        warnings.warn(
            f"longscore: {flagged.height} (model, task) row(s) have warnings, e.g. "
            f"{first['model']}/{first['task']}: {first['warning']}; see the 'warning' columns",
            UserWarning, stacklevel=2,
        )
    return {"per_length": per_length, "summary": summary}


def _summary(per: pl.DataFrame, ci: float, base_lengths: Sequence[int]) -> pl.DataFrame:
    """Averages over long lengths (:func:`_is_long`), CIs, ranks and warnings per (model, task)."""
    keys = ["model", "task"]
    long = _is_long(base_lengths)
    expected = per.filter(long).group_by("task").agg(expected=pl.col("length").unique())
    summ = (
        per.group_by(keys)
        .agg(
            base=pl.col("base").first(),
            avg_score=pl.when(pl.col("score").filter(long).null_count() == 0).then(pl.col("score").filter(long).mean()),
            avg_lc=pl.when(pl.col("lc").filter(long).null_count() == 0).then(pl.col("lc").filter(long).mean()),
            n_long=pl.col("score").filter(long).count().cast(pl.Int64),
            have=pl.col("length").filter(long),
            # each note once, also when a row joins several ("Base undefined ...; only 1/2 tasks ...")
            row_warn=pl.col("warning").drop_nulls().str.split("; ").explode().unique(maintain_order=True)
            .str.join("; "),
        )
        .join(expected, on="task", how="left")
        .with_columns(missing=pl.col("expected").list.set_difference("have").list.sort())
        .with_columns(
            warning=_join_warnings(
                pl.when(pl.col("row_warn").str.len_chars() > 0).then("row_warn"),
                pl.when(pl.col("missing").list.len() > 0).then(
                    pl.format("missing long lengths {}: averages not comparable across models",
                              pl.col("missing").cast(pl.List(pl.String)).list.join(", "))),
                pl.when(pl.col("n_long") == 0).then(pl.lit("no long lengths")),
            ),
        )
    )
    if per["boot_score"].null_count() < per.height:
        _, avg_ci = _ci_tables(_explode_boot(per), keys, (1.0 - ci) / 2.0, long)
        summ = summ.join(avg_ci, on=keys, how="left")
    else:
        summ = summ.with_columns(avg_lc_lo=pl.lit(None, pl.Float64), avg_lc_hi=pl.lit(None, pl.Float64))
    return summ


def rank_tables(per_length: pl.DataFrame, summary: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``per_length`` and ``summary`` ranked among their models (1 = best, ties share the
    minimum): per (task, length) by S_l and LC_l, per task by Base, avg_score and avg_lc; also
    to rank the LongScore tables of several runs, each computed with its own bootstrap."""
    rank = lambda c, *by: pl.col(c).rank("min", descending=True).over(*by).cast(pl.Int64)  # noqa: E731
    per_length = per_length.with_columns(rank_score=rank("score", "task", "length"),
                                         rank_lc=rank("lc", "task", "length"))
    summary = summary.with_columns(rank_base=rank("base", "task"), rank_score=rank("avg_score", "task"),
                                   rank_lc=rank("avg_lc", "task"))
    return (per_length.select(PER_LENGTH_COLUMNS).sort("task", "model", "length"),
            summary.select(SUMMARY_COLUMNS).sort("task", "model"))


# ------------------------------------------------------------------------------ correlations and slopes


def _matrices(scores: pl.DataFrame, by: str, at: Any, value: str):
    """Yield (group, variable names, observations x variables matrix) for the correlation functions.

    Variables are the values of ``by`` ("task" or "length"); observations are models. The other dimension
    is the group: one matrix per value (``at=None``), one value (``at=<value>``), averaged out
    (``at="mean"``), or pooled so that observations are (model, other) pairs (``at="pool"``).
    """
    if by not in ("task", "length"):
        raise ValueError("by must be 'task' or 'length'")
    other = "length" if by == "task" else "task"
    cells = _cell_means(scores, value)
    if at == "mean":
        cells = cells.group_by("model", by).agg(pl.col(value).mean()).with_columns(_g=pl.lit(None))
        index = ["_g", "model"]
    elif at == "pool":
        cells = cells.with_columns(_g=pl.lit(None))
        index = ["_g", "model", other]
    else:
        if at is not None:
            cells = cells.filter(pl.col(other) == at)
            if cells.height == 0:
                raise ValueError(f"no scores at {other} = {at!r}")
        cells = cells.with_columns(_g=pl.col(other))
        index = ["_g", "model"]
    names = sorted(cells[by].unique().to_list())
    wide = cells.with_columns(pl.col(by).cast(pl.String)).pivot(on=by, index=index, values=value)
    for (g,), part in wide.sort("_g", maintain_order=True).group_by("_g", maintain_order=True):  # groups ascending
        cols = [str(n) for n in names]
        for c in cols:
            if c not in part.columns:
                part = part.with_columns(pl.lit(None, pl.Float64).alias(c))
        yield g, names, part.select(cols).to_numpy().astype(float)


def _long_pairs(rows: list[tuple], by: str, extra: list[str]) -> pl.DataFrame:
    other = "length" if by == "task" else "task"
    key_t = pl.String if by == "task" else pl.Int64
    schema = {other: pl.Int64 if other == "length" else pl.String, "a": key_t, "b": key_t}
    schema.update({c: pl.Float64 for c in extra})
    schema["n"] = pl.Int64
    return pl.DataFrame(rows, schema=schema, orient="row")


def task_correlation(
    scores: pl.DataFrame, by: str = "task", *, at: Any = None, value: str = "score"
) -> pl.DataFrame:
    """Spearman rank correlation across models (HELMET Sec. 3.1, Figure 3) as a long frame.

    ``by="task"``: between tasks, observations = models, one matrix per length (the group column
    ``length``; HELMET Figure 3 is the one at 128K, ``at=131072``). ``by="length"``: between lengths, one
    matrix per task (group column ``task``; the thesis's 0-8k vs 24k-32k comparison, Figures 6.2-6.3).
    ``at``: None = every group; a value = that group only; ``"mean"`` = average over the group dimension
    first (group null); ``"pool"`` = observations are (model, group) pairs (group null). ``value``: the
    column to correlate, e.g. ``"lc"`` with ``longscore()["per_length"]``. Sample-level rows are averaged
    first. Returns ``<group>, a, b, rho, n`` with both (a, b) and (b, a); ``n`` = models with both scores
    (pairwise complete); rho is null (never a number) when n < 3 or a side is constant.
    """
    from scipy.stats import spearmanr

    rows = []
    for g, names, mat in _matrices(scores, by, at, value):
        k = len(names)
        rho = np.full((k, k), np.nan)
        nn = np.zeros((k, k), dtype=int)
        complete = not np.isnan(mat).any()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = spearmanr(mat).statistic if complete and k >= 2 and mat.shape[0] >= 3 else None
            if r is not None and (k == 2 or np.ndim(r) == 2):  # one call for the whole matrix
                rho = np.array([[1.0, r], [r, 1.0]]) if k == 2 else np.asarray(r, dtype=float)
                nn[:] = mat.shape[0]
            else:  # pairwise complete observations (or scipy gave up on a constant column)
                for i in range(k):
                    for j in range(i, k):
                        ok = ~np.isnan(mat[:, i]) & ~np.isnan(mat[:, j])
                        nn[i, j] = nn[j, i] = int(ok.sum())
                        if ok.sum() >= 3:
                            rho[i, j] = rho[j, i] = spearmanr(mat[ok, i], mat[ok, j]).statistic
        const = np.array([np.nanstd(mat[:, i]) == 0 if np.isfinite(mat[:, i]).any() else True for i in range(k)])
        rho[const, :] = np.nan
        rho[:, const] = np.nan
        for i in range(k):
            for j in range(k):
                rows.append((g, names[i], names[j], None if np.isnan(rho[i, j]) else float(rho[i, j]), int(nn[i, j])))
    return _long_pairs(rows, by, ["rho"])


def pair_slopes(scores: pl.DataFrame, by: str = "task", *, at: Any = None, value: str = "score") -> pl.DataFrame:
    """Cross-model OLS line fits between two tasks or two lengths (thesis Ch. 6, Figures 6.1-6.3).

    For each ordered pair (a, b): ``score_b ~ intercept + slope * score_a`` across models (observations as
    in :func:`task_correlation`). The thesis compares these slopes: tasks differ more than lengths do.
    Returns ``<group>, a, b, slope, intercept, n`` (null if n < 2 or score_a is constant).
    """
    rows = []
    for g, names, mat in _matrices(scores, by, at, value):
        for i, a in enumerate(names):
            for j, b in enumerate(names):
                ok = ~np.isnan(mat[:, i]) & ~np.isnan(mat[:, j])
                x, y = mat[ok, i], mat[ok, j]
                slope = icpt = None
                if ok.sum() >= 2 and np.ptp(x) > 0:
                    slope, icpt = (float(v) for v in np.polyfit(x, y, 1))
                rows.append((g, a, b, slope, icpt, int(ok.sum())))
    return _long_pairs(rows, by, ["slope", "intercept"])
