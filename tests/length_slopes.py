"""``length_slopes``: per (model, task) OLS slope of a LongScore score table against the context
length, a test helper (issue 38: nothing in raylc uses it) that the LongScore tests and the input
checks use (``_check_scores`` types its input through it)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from raylc.sweep.longscore import _cell_means


def length_slopes(
    scores: pl.DataFrame, *, value: str = "score", lengths: Sequence[int] | None = None
) -> pl.DataFrame:
    """Per (model, task) OLS slope of ``S_l`` against context length.

    ``slope_log2``: score change per doubling of the length (fit on ``log2(length)``); ``slope_per_k``:
    per 1K (=1024) tokens. Intercepts are at ``log2(length) = 0`` and ``length = 0``; ``r2_log2`` is the
    log-fit R^2. ``lengths`` restricts the fit (e.g. to the long lengths). Null when fewer than 2 lengths.
    Note: the thesis (Ch. 6) compares slopes of cross-model fits between tasks / lengths -- that is
    :func:`raylc.sweep.longscore.pair_slopes`; this per-model length trend is the complementary view
    of its Figures 4.1-4.3. A test helper (issue 38: no command of raylc reports it), kept with its
    tests, which check ``_cell_means`` through it.
    """
    cells = _cell_means(scores, value)
    if lengths is not None:
        cells = cells.filter(pl.col("length").is_in([int(x) for x in lengths]))

    def fit(x: pl.Expr, y: pl.Expr, suffix: str) -> list[pl.Expr]:
        dx, dy = x - x.mean(), y - y.mean()
        sxx, sxy, syy = (dx * dx).sum(), (dx * dy).sum(), (dy * dy).sum()
        slope = pl.when((pl.len() >= 2) & (sxx > 0)).then(sxy / sxx)
        out = [slope.alias(f"slope_{suffix}"), (y.mean() - slope * x.mean()).alias(f"intercept_{suffix}")]
        if suffix == "log2":
            out.append(pl.when((pl.len() >= 2) & (sxx > 0) & (syy > 0)).then(sxy * sxy / (sxx * syy)).alias("r2_log2"))
        return out

    x_log = pl.col("length").cast(pl.Float64).log(2)
    x_k = pl.col("length").cast(pl.Float64) / 1024.0
    y = pl.col(value)
    return (
        cells.group_by("model", "task")
        .agg(*fit(x_log, y, "log2"), *fit(x_k, y, "per_k"), n=pl.len().cast(pl.Int64),
             min_length=pl.col("length").min(), max_length=pl.col("length").max())
        .select("model", "task", "slope_log2", "intercept_log2", "r2_log2", "slope_per_k", "intercept_per_k",
                "n", "min_length", "max_length")
        .sort("task", "model")
    )
