r"""Category shares of a task: the one point and the one interval every output prints.

The quantity is the share of the task's own problems in category c,
S_c = (1/n) sum_i 1[category_i = c] (DOLCE Section 5 reports these shares per task, Figure 2).
Given the fit, each problem's category is uncertain with posterior probabilities p_i(c)
(:mod:`raylc.dolce.uncertainty`; problems independent given the task's shared noise), so
n S_c is Poisson-binomial with success probabilities p_1(c) .. p_n(c):

* the point is its mean, the **posterior-mean share** pbar_c = (1/n) sum_i p_i(c) (the five
  points sum to 1);
* the interval is its 95% equal-tailed credible interval: the 2.5% and 97.5% quantiles of the
  exact pmf (the characteristic function at the n + 1 roots of unity, inverted by an FFT),
  widened where needed to contain pbar_c. An atom can put the mean outside the quantiles (one
  problem at p = 0.02 and the rest at 0: both quantiles are 0, the mean 0.0002), so the point
  lies inside its interval by construction.

The interval is over these n problems' categories, not over a resampling of the problems: the
benchmark's problems are what its shares describe. A fit without the posterior
(``--uncertainty none``) has p_i one-hot: the point is the share of reported categories and
the interval the Wilson interval over the problems (:func:`raylc.dolce.categories.wilson`).
The ``interval`` column of every share table names which of the two it is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.dolce.categories import CATEGORIES, Z95, wilson

__all__ = ["LEVEL", "POSTERIOR_INTERVAL", "SHARE_SCHEMA", "WILSON_INTERVAL", "poisson_binomial_pmf",
           "share_interval", "share_rows", "task_share_columns"]

LEVEL = 0.95
POSTERIOR_INTERVAL = ("95% posterior interval of the share of these problems (each problem's category drawn from "
                      "p_I..p_V)")
WILSON_INTERVAL = "95% Wilson interval over the problems (fit without the posterior)"
SHARE_SCHEMA = {"category": pl.String, "n": pl.Int64, "n_problems": pl.Int64, "share": pl.Float64,
                "share_lo": pl.Float64, "share_hi": pl.Float64, "interval": pl.String}
_CHUNK = 256  # problems multiplied at a time in the characteristic function


def poisson_binomial_pmf(p) -> np.ndarray:
    """P(sum_i X_i = j), j = 0..n, for independent X_i ~ Bernoulli(p_i): the characteristic
    function prod_i (1 - p_i + p_i w) at the n' + 1 roots of unity w of the n' problems with
    0 < p_i < 1, inverted by an FFT (exact up to rounding); problems at 0 or 1 only shift it."""
    p = np.clip(np.asarray(p, dtype=float).ravel(), 0.0, 1.0)
    ones = int((p >= 1.0).sum())
    free = p[(p > 0.0) & (p < 1.0)]
    m = free.size
    w = np.exp(2j * np.pi * np.arange(m + 1) / (m + 1))
    cf = np.ones(m + 1, dtype=complex)
    for i in range(0, m, _CHUNK):  # memory: a chunk of problems by the m + 1 frequencies
        q = free[i:i + _CHUNK, None]
        cf *= np.prod(1.0 - q + q * w[None, :], axis=0)
    core = np.clip(np.fft.fft(cf).real / (m + 1), 0.0, None)
    pmf = np.zeros(p.size + 1)
    pmf[ones:ones + m + 1] = core / core.sum()
    return pmf


def share_interval(p, level: float = LEVEL) -> tuple[float, float, float]:
    """(point, lo, hi) of the share S = (1/n) sum_i X_i, X_i ~ Bernoulli(p_i): the mean and the
    equal-tailed ``level`` quantiles of :func:`poisson_binomial_pmf` (P(S < lo) <= alpha / 2,
    P(S > hi) <= alpha / 2), widened to contain the mean."""
    p = np.clip(np.asarray(p, dtype=float).ravel(), 0.0, 1.0)
    n = p.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    cdf = np.cumsum(poisson_binomial_pmf(p))
    tail = (1.0 - level) / 2.0
    eps = 1e-12  # rounding of the cumulative sum
    lo = int(np.searchsorted(cdf, tail + eps, side="right"))  # first j with cdf(j) > tail
    hi = int(np.searchsorted(cdf, 1.0 - tail - eps, side="left"))  # first j with cdf(j) >= 1 - tail
    point = float(p.mean())
    return point, min(lo / n, point), max(min(hi, n) / n, point)


def share_rows(problems: pl.DataFrame) -> pl.DataFrame:
    """The five shares of one (task, subset) as rows (:data:`SHARE_SCHEMA`): category, n (problems
    whose reported category is c), n_problems, share (posterior-mean share), share_lo, share_hi
    (:func:`share_interval`) and ``interval`` (what the interval is over). ``problems`` has
    ``category`` and ``p_I`` .. ``p_V`` (null without the posterior: then the Wilson interval of
    the reported categories' share)."""
    n = problems.height
    cats = problems["category"].to_numpy()
    counts = [int((cats == c).sum()) for c in CATEGORIES]
    posterior = n > 0 and all(f"p_{c}" in problems.columns for c in CATEGORIES) and \
        problems.select(pl.col(f"p_{c}").null_count() for c in CATEGORIES).sum_horizontal().item() == 0
    if posterior:
        proba = problems.select(f"p_{c}" for c in CATEGORIES).to_numpy().astype(float)
        ends = [share_interval(proba[:, j]) for j in range(len(CATEGORIES))]
        label = POSTERIOR_INTERVAL
    else:
        ends = [_wilson(k, n) for k in counts]
        label = WILSON_INTERVAL
    return pl.DataFrame({"category": list(CATEGORIES), "n": counts, "n_problems": [n] * len(CATEGORIES),
                         "share": [e[0] for e in ends], "share_lo": [e[1] for e in ends],
                         "share_hi": [e[2] for e in ends], "interval": [label] * len(CATEGORIES)},
                        schema=SHARE_SCHEMA)


def task_share_columns(problems: pl.DataFrame) -> dict:
    """:func:`share_rows` as the task row's columns share_I, share_I_lo, share_I_hi, ..,
    share_interval (``fits/tasks.parquet``)."""
    rows = share_rows(problems)
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
