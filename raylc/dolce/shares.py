r"""Category shares of a task: the one point and the one interval every output prints.

The quantity is the share of the task's own problems in category c,
S_c = (1/n) sum_i 1[category_i = c] (DOLCE Section 5 reports these shares per task, Figure 2).
Given the fit, the problems' categories are uncertain jointly: each problem's lambda class is
drawn from the task's lambda distribution pi, itself uncertain (:mod:`raylc.dolce.uncertainty`),
and the fit's Gibbs sampler draws every problem's category once per sweep, so each sweep gives
one value of (S_I, .., S_V):

* the point is the **posterior-mean share** pbar_c = (1/n) sum_i p_i(c) (the five points sum
  to 1; p_i(c) averages each sweep's conditional, so pbar_c is the draws' mean without their
  Monte Carlo noise);
* the interval is the 95% equal-tailed credible interval of the draws of S_c (their 2.5% and
  97.5% quantiles), widened where needed to contain pbar_c (an atom can put the mean outside
  the quantiles: one problem at p = 0.02 and the rest at 0 gives both quantiles 0, the mean
  0.0002), so the point lies inside its interval by construction.

The interval is over these n problems' categories, not over a resampling of the problems: the
benchmark's problems are what its shares describe. Treating the problems as independent given
the fit (a Poisson-binomial count, the rule before) left out pi's uncertainty, and the
quickstart's intervals held the planted share in 74% of cells at 100 problems per task and
53% at 1,000. A fit without the posterior (``--uncertainty none``) has no draws: the point is
the share of reported categories and the interval the Wilson interval over the problems
(:func:`raylc.dolce.categories.wilson`). The ``interval`` column of every share table names
which of the two it is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.dolce.categories import CATEGORIES, Z95, wilson

__all__ = ["LEVEL", "POSTERIOR_INTERVAL", "SHARE_SCHEMA", "WILSON_INTERVAL", "share_interval", "share_rows",
           "task_share_columns"]

LEVEL = 0.95
POSTERIOR_INTERVAL = ("95% posterior interval of the share of these problems (their categories drawn jointly "
                      "with the task's lambda distribution)")
WILSON_INTERVAL = "95% Wilson interval over the problems (fit without the posterior)"
SHARE_SCHEMA = {"category": pl.String, "n": pl.Int64, "n_problems": pl.Int64, "share": pl.Float64,
                "share_lo": pl.Float64, "share_hi": pl.Float64, "interval": pl.String}


def share_interval(p, draws, level: float = LEVEL) -> tuple[float, float, float]:
    """(point, lo, hi) of one category's share: the mean of the problems' posterior masses ``p``
    and the equal-tailed ``level`` quantiles of the sweeps' counts ``draws`` over n = len(p)
    (the inverse of their empirical distribution), widened to contain the point."""
    p = np.clip(np.asarray(p, dtype=float).ravel(), 0.0, 1.0)
    n = p.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    share = np.asarray(draws, dtype=float).ravel() / n
    if share.size == 0:
        raise ValueError("the posterior share needs the fit's draws")
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(share, [tail, 1.0 - tail], method="inverted_cdf")
    point = float(p.mean())
    return point, min(float(lo), point), max(float(hi), point)


def share_rows(problems: pl.DataFrame, draws=None) -> pl.DataFrame:
    """The five shares of one (task, subset) as rows (:data:`SHARE_SCHEMA`): category, n (problems
    whose reported category is c), n_problems, share (posterior-mean share), share_lo, share_hi
    (:func:`share_interval` of ``draws``, the fit's (sweeps, 5) category counts) and ``interval``
    (what the interval is over). ``problems`` has ``category`` and ``p_I`` .. ``p_V`` (null
    without the posterior: then the Wilson interval of the reported categories' share)."""
    n = problems.height
    cats = problems["category"].to_numpy()
    counts = [int((cats == c).sum()) for c in CATEGORIES]
    posterior = n > 0 and all(f"p_{c}" in problems.columns for c in CATEGORIES) and \
        problems.select(pl.col(f"p_{c}").null_count() for c in CATEGORIES).sum_horizontal().item() == 0
    if posterior:
        proba = problems.select(f"p_{c}" for c in CATEGORIES).to_numpy().astype(float)
        if draws is None:
            raise ValueError("the posterior shares need the fit's share draws")
        draws = np.asarray(draws)
        ends = [share_interval(proba[:, j], draws[:, j]) for j in range(len(CATEGORIES))]
        label = POSTERIOR_INTERVAL
    else:
        ends = [_wilson(k, n) for k in counts]
        label = WILSON_INTERVAL
    return pl.DataFrame({"category": list(CATEGORIES), "n": counts, "n_problems": [n] * len(CATEGORIES),
                         "share": [e[0] for e in ends], "share_lo": [e[1] for e in ends],
                         "share_hi": [e[2] for e in ends], "interval": [label] * len(CATEGORIES)},
                        schema=SHARE_SCHEMA)


def task_share_columns(problems: pl.DataFrame, draws=None) -> dict:
    """:func:`share_rows` as the task row's columns share_I, share_I_lo, share_I_hi, ..,
    share_interval (``fits/tasks.parquet``)."""
    rows = share_rows(problems, draws)
    out: dict = {}
    for r in rows.iter_rows(named=True):
        c = r["category"]
        out |= {f"share_{c}": r["share"], f"share_{c}_lo": r["share_lo"], f"share_{c}_hi": r["share_hi"]}
    out["share_interval"] = rows["interval"][0]
    return out


def _wilson(k: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(k / n, lo, hi): the Wilson interval (:func:`raylc.dolce.categories.wilson`) of one count."""
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    lo, hi = wilson(pl.lit(float(k)), pl.lit(float(n)), z)
    return (k / n, *pl.select(lo.alias("lo"), hi.alias("hi")).row(0))
