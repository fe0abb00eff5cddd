r"""Scenario selection: correct-or-wrong (COW) vs partial-point-in-grading (PIG).

DOLCE Section 3.1 and Appendix H. A problem scored with a binary metric (accuracy, exact
match) is COW (unless its task mixes scenarios, below). For a continuous metric (F-1, ROUGE,
EditSim) the paper runs Hartigan's dip test on the problem's observed outcomes x_ij
"bucketized into bins of equal width of 0.1" and assigns COW when the p-value is below 0.5 (a
multi-modal score distribution, binarized at a threshold, 0.5 by default, Section 4) and PIG
otherwise. Within a task the problems are
split into a COW subset and a PIG subset only "if they both have more than ten problems.
Otherwise, we treat the problem set entirely as COW or PIG without subsetting" (Appendix H).

Exact rules implemented here (:func:`select_scenarios`):

* **Bucketization** (:func:`bucketize_scores`). A score s in [0, 1] goes to bin
  b = min(floor(10 s + 1e-9), 9), i.e. the ten bins [0, .1), [.1, .2), ..., [.9, 1.0] (the
  last bin is closed so that s = 1 is in it; the 1e-9 absorbs rounding such as
  0.3 = 2.9999999999999996 / 10). IDK outcomes (null scores) are not scores and are left out.
* **Dip test on the histogram** (:func:`dip_pvalue`). Bucketized values are heavily tied,
  and a sample of tied values is never unimodal in the dip test's sense (every atom is a
  jump of the empirical CDF that a unimodal CDF may only have at its mode): a unimodal
  N(0.4, 0.12) sample of 60 scores bucketized to bin floors gets p = 0.0, the same as a
  bimodal one, so the test would call every problem COW. The test is therefore run on the
  histogram's piecewise-uniform distribution: the n_b scores of bin b are replaced by the
  evenly spaced points 0.1 b + 0.1 (j + 1/2) / n_b, j = 0 .. n_b - 1 (the sample quantiles of
  the histogram density). This keeps exactly the information of the 0.1-bins (the paper's
  Figure 6 histograms), has no ties and is deterministic. ``diptest.diptest`` (table
  interpolation p-value) is applied to these n points. With n <= 3 scores the dip test is
  undefined: the p-value is null and unimodality is not rejected (PIG).
* **Problem level.** metric in :data:`BINARY_METRICS` (case-insensitive): COW, dip_pvalue
  null. Otherwise the dip p-value is computed; the problem is COW if all its scores lie in
  {0, 1, null} (binary outcomes: binarization at any threshold in (0, 1] is lossless) or
  p < :data:`DIP_PVALUE_COW` = 0.5, else PIG.
* **Task level.** If every problem of the task got the same scenario, the task is that
  scenario only (Table 5's "COW only" / "PIG only"; subset name ``"<task>"``). If both
  scenarios occur and each has more than :data:`MIN_SUBSET_PROBLEMS` = 10 problems, the task
  is split into subsets ``"<task>/COW"`` and ``"<task>/PIG"``. Otherwise the whole task,
  binary-metric problems included, gets one scenario from a task-level dip test on the scores
  of its continuous-metric problems (same bucketization; Appendix H, Figure 7): COW if
  p < 0.5, else PIG (also PIG when that p-value is null).
* ``scenario="cow"`` or ``"pig"`` forces the scenario of every problem (one subset per
  task); dip p-values are still reported.
"""

from __future__ import annotations

import warnings

import diptest
import numpy as np
import polars as pl

__all__ = [
    "BINARY_METRICS",
    "DIP_PVALUE_COW",
    "MIN_SUBSET_PROBLEMS",
    "SELECTION_SCHEMA",
    "binarization_cut",
    "binarize_scores",
    "binary_metric_expr",
    "bucketize_scores",
    "dip_pvalue",
    "histogram_points",
    "is_binary_metric",
    "select_scenarios",
    "task_dip_pvalues",
]

#: Metrics whose outcomes are correct / wrong / IDK: the COW scenario (Appendix H), unless their
#: task mixes scenarios with ten or fewer problems on a side (:func:`select_scenarios`).
BINARY_METRICS = frozenset({"accuracy", "exact_match"})
#: A dip-test p-value below this marks a multi-modal score distribution: COW (Section 3.1).
DIP_PVALUE_COW = 0.5
#: A task is split into COW and PIG subsets only when both have more than this many problems.
MIN_SUBSET_PROBLEMS = 10
#: Bin width of the bucketization before the dip test (Section 3.1).
BIN_WIDTH = 0.1
N_BINS = 10

SELECTION_SCHEMA = {
    "task": pl.String,
    "problem_id": pl.String,
    "subset": pl.String,
    "scenario": pl.String,
    "dip_pvalue": pl.Float64,
    "task_dip_pvalue": pl.Float64,
}


def is_binary_metric(metric) -> bool:
    """Whether ``metric`` (a name) is one of :data:`BINARY_METRICS` (case-insensitive)."""
    return metric is not None and str(metric).strip().lower() in BINARY_METRICS


def binary_metric_expr(column: str = "metric") -> pl.Expr:
    """Polars expression: whether the row's metric is one of :data:`BINARY_METRICS`."""
    return pl.col(column).cast(pl.String).str.strip_chars().str.to_lowercase().is_in(sorted(BINARY_METRICS))


def bucketize_scores(scores) -> np.ndarray:
    """Bin index b = min(floor(10 s + 1e-9), 9) of each non-null, finite score s in [0, 1].

    Bins of width 0.1 (Section 3.1): [0, .1), ..., [.8, .9), [.9, 1.0]. None / NaN (IDK) are
    dropped. Returns an int64 array.
    """
    s = np.ravel(np.asarray(scores, dtype=np.float64))  # None -> NaN
    s = s[np.isfinite(s)]
    if np.any((s < 0) | (s > 1)):
        raise ValueError("scores must lie in [0, 1]")
    return np.minimum(np.floor(s / BIN_WIDTH + 1e-9), N_BINS - 1).astype(np.int64)


def histogram_points(bins) -> np.ndarray:
    """The n_b points of bin b spread evenly inside it: 0.1 b + 0.1 (j + 1/2) / n_b.

    These are the sample quantiles of the piecewise-uniform density of the 0.1-histogram; the
    dip test is run on them because bucketized (tied) values always look multi-modal to it.
    """
    counts = np.bincount(np.asarray(bins, dtype=np.int64), minlength=N_BINS)
    parts = [BIN_WIDTH * (b + (np.arange(n) + 0.5) / n) for b, n in enumerate(counts) if n]
    return np.concatenate(parts) if parts else np.zeros(0)


def dip_pvalue(scores) -> float | None:
    """Hartigan's dip-test p-value of the bucketized scores (Section 3.1, Appendix H).

    Scores are bucketized with :func:`bucketize_scores` and spread with
    :func:`histogram_points`; ``diptest.diptest`` gives the p-value (interpolated from its
    critical-value table, deterministic). None when fewer than 4 scores are non-null (the dip
    test is undefined for n <= 3).
    """
    pts = histogram_points(bucketize_scores(scores))
    if pts.size <= 3:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, p = diptest.diptest(pts)
    return float(p)


def _problem_scenario(binary_metric: bool, all_binary: bool, p: float | None) -> str:
    if binary_metric or all_binary:
        return "COW"
    return "COW" if p is not None and p < DIP_PVALUE_COW else "PIG"


def select_scenarios(obs: pl.DataFrame, scenario: str = "auto") -> pl.DataFrame:
    """COW / PIG scenario and subset of every problem (Section 3.1, Appendix H).

    ``obs`` is an observation table (columns task, problem_id, score, metric; score null =
    IDK). ``scenario`` is ``"auto"`` (the rules of this module's docstring), ``"cow"`` or
    ``"pig"`` (forced, one subset per task). Returns one row per problem, sorted by task and
    problem_id, with columns task, problem_id, subset (``"<task>"``, or ``"<task>/COW"`` and
    ``"<task>/PIG"`` for a split task), scenario ("COW" / "PIG"), dip_pvalue (the problem's
    p-value; null for binary-metric problems and for problems with <= 3 scores) and
    task_dip_pvalue (the p-value of all the task's scores of continuous-metric problems; null
    for a binary-metric task).
    """
    mode = str(scenario).lower()
    if mode not in ("auto", "cow", "pig"):
        raise ValueError(f"scenario must be 'auto', 'cow' or 'pig', got {scenario!r}")
    missing = [c for c in ("task", "problem_id", "score", "metric") if c not in obs.columns]
    if missing:
        raise ValueError(f"observation table is missing column(s): {', '.join(missing)}")
    if obs.height == 0:
        return pl.DataFrame(schema=SELECTION_SCHEMA)
    score = pl.col("score").cast(pl.Float64)
    per_problem = (
        obs.with_columns(pl.col("task").cast(pl.String), pl.col("problem_id").cast(pl.String))
        .group_by("task", "problem_id")
        .agg(
            metric=pl.col("metric").cast(pl.String).first(),
            scores=score.drop_nulls(),
            all_binary=(score.is_null() | score.is_in([0.0, 1.0])).all(),
        )
        .sort("task", "problem_id")
    )
    rows = []
    for task, group in per_problem.group_by("task", maintain_order=True):
        task = task[0]
        binary_metric = [is_binary_metric(m) for m in group["metric"]]
        pvals = [
            None if bm else dip_pvalue(s.to_numpy())
            for bm, s in zip(binary_metric, group["scores"])
        ]
        continuous = [s for bm, s in zip(binary_metric, group["scores"]) if not bm]
        task_p = dip_pvalue(np.concatenate([s.to_numpy() for s in continuous])) if continuous else None
        if mode == "auto":
            scen = [_problem_scenario(bm, ab, p) for bm, ab, p in zip(binary_metric, group["all_binary"], pvals)]
            n_cow = scen.count("COW")
            n_pig = len(scen) - n_cow
            if n_cow and n_pig:
                if n_cow > MIN_SUBSET_PROBLEMS and n_pig > MIN_SUBSET_PROBLEMS:
                    subsets = [f"{task}/{s}" for s in scen]
                else:
                    whole = "COW" if task_p is not None and task_p < DIP_PVALUE_COW else "PIG"
                    scen, subsets = [whole] * len(scen), [task] * len(scen)
            else:
                subsets = [task] * len(scen)
        else:
            scen, subsets = [mode.upper()] * group.height, [task] * group.height
        rows.append(
            pl.DataFrame(
                {
                    "task": [task] * group.height,
                    "problem_id": group["problem_id"],
                    "subset": subsets,
                    "scenario": scen,
                    "dip_pvalue": pvals,
                    "task_dip_pvalue": [task_p] * group.height,
                },
                schema=SELECTION_SCHEMA,
            )
        )
    return pl.concat(rows).sort("task", "problem_id")


def task_dip_pvalues(obs: pl.DataFrame) -> pl.DataFrame:
    """Task-level dip-test p-value (Appendix H, Figure 7): one row per task with columns task,
    task_dip_pvalue, from all non-null scores of the task's continuous-metric rows (null for a
    task scored only with binary metrics or with <= 3 such scores)."""
    binary = binary_metric_expr()
    per_task = (
        obs.with_columns(pl.col("task").cast(pl.String))
        .group_by("task")
        .agg(scores=pl.col("score").cast(pl.Float64).filter(~binary).drop_nulls(), any_cont=(~binary).any())
        .sort("task")
    )
    pvals = [dip_pvalue(s.to_numpy()) if cont else None for s, cont in zip(per_task["scores"], per_task["any_cont"])]
    return pl.DataFrame(
        {"task": per_task["task"], "task_dip_pvalue": pvals}, schema={"task": pl.String, "task_dip_pvalue": pl.Float64}
    )


def binarize_scores(obs: pl.DataFrame, threshold: float = 0.5) -> pl.DataFrame:
    """COW outcomes from scores (Section 3.1 / 4): 1.0 if score >= threshold, else 0.0; null
    (IDK) stays null.

    ``threshold`` applies to continuous-metric rows (Appendix K.4 varies it in [0, 1]); rows of
    a binary metric (:data:`BINARY_METRICS`, scores in {0, 1}) are binarized at 0.5 whatever
    ``threshold`` is, so that e.g. threshold 0 does not turn wrong answers into correct ones.
    Returns ``obs`` with the ``score`` column replaced (Float64).
    """
    cut = binarization_cut(obs, threshold)
    s = pl.col("score").cast(pl.Float64)
    return obs.with_columns(score=pl.when(s.is_null()).then(None).otherwise((s >= cut).cast(pl.Float64)))


def binarization_cut(obs: pl.DataFrame, threshold: float = 0.5) -> pl.Expr:
    """The per-row cut of :func:`binarize_scores` (outcome 1 iff score >= cut): 0.5 for a
    binary metric, ``threshold`` otherwise; a literal when the table's (distinct) metrics are
    all binary or all continuous."""
    if not np.isfinite(threshold):
        raise ValueError("threshold must be finite")
    metrics = obs["metric"].unique().to_list()
    binary = [m for m in metrics if is_binary_metric(m)]
    if not binary:
        return pl.lit(float(threshold))
    if len(binary) == len(metrics):
        return pl.lit(0.5)
    return pl.when(pl.col("metric").is_in(binary)).then(pl.lit(0.5)).otherwise(pl.lit(float(threshold)))


def miss_expr(obs: pl.DataFrame, threshold: float = 0.5) -> pl.Expr:
    """An answer that is not right: a score below :func:`binarization_cut` (IDK, a null score,
    aside). COW's outcome 0 and the probe check's wrong answer in both scenarios (a PIG task's
    wrong answer scores above 0 with ROUGE or F1)."""
    return pl.col("score").cast(pl.Float64) < binarization_cut(obs, threshold)
