"""The category a probe's own answers imply (``tests/real_implied.py``), on hand-built observation tables."""

from __future__ import annotations

import polars as pl
import pytest
from real_implied import implied_categories, non_overlapping


def _obs(task: str, pid: str, L: int, right: dict[int, list[int]], lengths=(1, 2, 5), idk=()) -> list[dict]:
    """Every span of ``lengths`` below L plus C = 0 and C = L; ``right``: C -> starts answered right;
    ``idk``: (C, start) answered "Unanswerable" (score null)."""
    rows = []
    for C in (0, *[c for c in lengths if c < L], L):
        for s in range(L - C + 1) if 0 < C < L else [0]:
            score = None if (C, s) in idk else float(s in right.get(C, []))
            rows.append({"task": task, "problem_id": pid, "L": L, "C": C, "start": s, "score": score,
                         "metric": "subem"})
    return rows


def _implied(*problems: list[dict]) -> dict[str, tuple]:
    table = implied_categories(pl.DataFrame([r for p in problems for r in p]))
    return {r["problem_id"]: (r["lam"], r["k"], r["category"]) for r in table.iter_rows(named=True)}


def test_the_answers_imply_each_category():
    got = _implied(
        _obs("t", "closed", 8, {0: [0], 1: [3], 8: [0]}),            # right closed-book: I whatever else
        _obs("t", "one", 8, {1: [3], 2: [2, 3], 5: [0, 1], 8: [0]}),  # one paragraph: III
        _obs("t", "two", 8, {1: [1, 6], 2: [0, 1, 5, 6], 8: [0]}),   # two paragraphs: II
        _obs("t", "pair", 8, {2: [3], 5: [0, 1, 2, 3], 8: [0]}),     # one pair of paragraphs: IV
        _obs("t", "full", 8, {8: [0]}),                              # only the whole context: V
        _obs("t", "never", 8, {}),                                   # nothing right: no category
        _obs("t", "idk", 8, {1: [2], 8: [0]}, idk=[(0, 0), (1, 5)]),  # an IDK is not right
    )
    assert got == {"closed": (0, 0, "I"), "one": (1, 1, "III"), "two": (1, 2, "II"), "pair": (2, 1, "IV"),
                   "full": (8, 1, "V"), "never": (None, None, None), "idk": (1, 1, "III")}


def test_overlapping_spans_count_once_and_thresholds_come_from_the_task():
    # starts 2 and 3 of C = 2 share a paragraph: one placement; 0 and 4 do not: two
    got = _implied(_obs("a", "x", 8, {2: [2, 3]}), _obs("a", "y", 8, {2: [0, 3, 4, 6]}))
    assert got == {"x": (2, 1, "IV"), "y": (2, 3, "IV")}
    # a task observed at C = 1, 2, 5, 10, 20, 50: lambda_p = k_p = 2 (the ladder's first tertile)
    wide = implied_categories(pl.DataFrame(_obs("b", "z", 60, {2: [10]}, lengths=(1, 2, 5, 10, 20, 50))))
    assert wide.select("lam", "k", "lam_p", "k_p", "lam_q", "category").row(0) == (2, 1, 2, 2, 50, "III")


@pytest.mark.parametrize(("starts", "lam", "n"), [([], 2, 0), ([4], 1, 1), ([1, 0, 2], 1, 3), ([0, 1, 2], 2, 2),
                                                  ([0, 1, 2, 3], 2, 2), ([5, 0, 4, 1], 5, 2), ([0, 4, 1], 5, 1)])
def test_non_overlapping(starts, lam, n):
    assert non_overlapping(starts, lam) == n
