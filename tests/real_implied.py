"""The focus category a probe's own answers imply, per problem, from an observation table
(``score/observations.parquet``: ``task, problem_id, L, C, start, score``; right = score 1).

I when the probe answers right closed-book (C = 0). Otherwise λ = the shortest span length C > 0
at which some span is answered right (C = L included), k = the number of spans of that length
answered right, counted as distinct non-overlapping placements (greedy by start, which is the
most there are), and the category by the task's thresholds: λ_p = k_p of
:func:`raylc.dolce.categories.category_thresholds` over the task's partial lengths 0 < C < L,
λ_q = the problem's largest partial C (:func:`raylc.dolce.categories.assign_categories`). A
problem with no span answered right has no implied category (null).

Used by ``tests/real/test_layouts_agreement.py`` and ``tests/benchmarks/real_dolce_agreement.py``.
"""

from __future__ import annotations

import polars as pl

from raylc.dolce.categories import assign_categories, category_thresholds


def non_overlapping(starts: list[int], lam: int) -> int:
    """The most spans of length ``lam`` at ``starts`` that pairwise do not overlap."""
    count, free = 0, None
    for s in sorted(starts):
        if free is None or s >= free:
            count, free = count + 1, s + lam
    return count


def implied_categories(observations: pl.DataFrame) -> pl.DataFrame:
    """One row per problem: ``task, problem_id, L, right_full, right_closed, lam, k, lam_p, k_p,
    lam_q, category`` (``lam``, ``k``, ``category`` null when no span is answered right)."""
    obs = observations.with_columns(right=pl.col("score").fill_null(0.0) == 1.0)
    thresholds = {task: category_thresholds(frame.filter((pl.col("C") > 0) & (pl.col("C") < pl.col("L")))["C"]
                                            .unique().to_numpy())
                  for (task,), frame in obs.group_by("task")}
    rows = []
    for (task, pid), frame in obs.group_by("task", "problem_id", maintain_order=True):
        L = int(frame["L"][0])
        partial = frame.filter((pl.col("C") > 0) & (pl.col("C") < L))["C"]
        lam_q = int(partial.max()) if partial.len() else 0
        right = frame.filter(pl.col("right"))
        closed = bool((right["C"] == 0).any())
        full = bool((right["C"] == L).any())
        lam = k = None
        if closed:
            lam, k = 0, 0
        elif right.height:
            lam = int(right["C"].min())
            k = non_overlapping(right.filter(pl.col("C") == lam)["start"].to_list(), lam)
        lam_p, k_p = thresholds[task]
        category = None if lam is None else str(assign_categories(lam, k, lam_p, k_p, lam_q))
        rows.append({"task": task, "problem_id": pid, "L": L, "right_full": full, "right_closed": closed, "lam": lam,
                     "k": k, "lam_p": lam_p, "k_p": k_p, "lam_q": lam_q, "category": category})
    return pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64,
                                      "right_full": pl.Boolean, "right_closed": pl.Boolean, "lam": pl.Int64,
                                      "k": pl.Int64, "lam_p": pl.Int64, "k_p": pl.Int64, "lam_q": pl.Int64,
                                      "category": pl.String})
