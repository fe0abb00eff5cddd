"""The probe check: does the probe say "I don't know" where DOLCE's oracle would?

DOLCE's COW oracle (Eq. 3) answers IDK on a span that misses its evidence, and the paper tells
the probe to do so (Appendix E). Many instruction-tuned models answer wrongly instead (the
paper's "conceited or humble" probes, Appendix L). COWFit fits what the oracle answers without
its evidence, q = (q(0), q(IDK)), per task (``not_covered="fitted"``); this module measures, per
fitted (task, subset), how the probe behaved, so that every report can say so:

* ``n_closed_book``, ``idk_closed_book``: the spans with no context (C = 0) and the share of
  them answered IDK;
* ``n_not_covered``, ``idk_not_covered``: the spans the fit says miss the evidence, those at or
  above the problem's lambda (lambda >= 1) and short of the whole context whose answer is not
  right (a score below the binarization cut, ``fit.threshold`` for a continuous metric, in
  both scenarios: :func:`raylc.dolce.scenario.miss_expr`), and the share of them answered IDK;
* ``n_never_right``: the problems no span of which was answered right. Their answers do not
  show where the evidence is, so their categories say nothing about the task (the paper's
  limitations: "if all the evaluation outcomes are 0, the mixture model assumption could hardly
  distinguish the source"); ``answered_right`` of ``fits/problems.parquet`` names them;
* ``not_covered``: how COW's fit treated it, ``fitted`` or ``idk`` (``fit.not_covered``; null
  for PIG, whose Eq. 5 has no such outcome), and ``not_covered_wrong``, ``not_covered_idk``: q
  (Eq. 3's (0, 1) with ``idk``).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import polars as pl

__all__ = ["PROBE_CHECK_SCHEMA", "answered_right", "probe_check", "probe_check_note", "probe_check_notes",
           "probe_check_table"]

PROBE_CHECK_SCHEMA = {
    "n_closed_book": pl.Int64,
    "idk_closed_book": pl.Float64,
    "n_not_covered": pl.Int64,
    "idk_not_covered": pl.Float64,
    "n_never_right": pl.Int64,
    "not_covered": pl.String,
    "not_covered_wrong": pl.Float64,
    "not_covered_idk": pl.Float64,
}

#: Below this share of IDK among the answers without the evidence the probe "ignores the IDK
#: instruction" (a majority of its answers there are wrong ones).
IGNORES_IDK = 0.5
#: Fewer spans without the evidence than this say nothing about the probe.
MIN_SPANS = 5


def answered_right(obs: pl.DataFrame, miss: pl.Expr) -> pl.DataFrame:
    """Per problem of ``obs``: ``answered_right``, whether any of its spans was answered right
    (a score, not IDK, that ``miss`` does not call wrong)."""
    return obs.group_by("problem_id").agg(answered_right=(pl.col("score").is_not_null() & ~miss).fill_null(False).any())


def probe_check(obs: pl.DataFrame, problems: pl.DataFrame, miss: pl.Expr, mode: Optional[str],
                not_covered: Optional[tuple[float, float]]) -> dict[str, Any]:
    """The probe check of one fitted (task, subset) (module docstring): ``obs`` its observations
    (problem_id, L, C, score; null = IDK), ``problems`` its fit (problem_id, lam, answered_right:
    :func:`answered_right`), ``miss`` the
    expression of an answer that is not right, ``mode`` and ``not_covered`` COW's
    ``not_covered`` option and q (None for PIG)."""
    idk = pl.col("score").is_null()
    lam = obs.join(problems.select("problem_id", "lam"), on="problem_id", how="left")
    without = (pl.col("lam") >= 1) & (pl.col("C") >= pl.col("lam")) & (pl.col("C") < pl.col("L")) & (idk | miss)
    row = lam.select(
        n_closed_book=(pl.col("C") == 0).sum(),
        idk_closed_book=idk.filter(pl.col("C") == 0).mean(),
        n_not_covered=without.sum(),
        idk_not_covered=idk.filter(without).mean(),
    ).row(0, named=True)
    row["n_never_right"] = int((~problems["answered_right"]).sum())
    q = (None, None) if not_covered is None else (float(not_covered[0]), float(not_covered[1]))
    return {**row, "not_covered": mode, "not_covered_wrong": q[0], "not_covered_idk": q[1]}


def _pct(x: Optional[float]) -> str:
    """A whole percent; a share just under :data:`IGNORES_IDK` never reads as the threshold itself
    (0.49996 is "49.99%", not "50%", beside "ignores the IDK instruction")."""
    if x is None:
        return "n/a"
    return f"{math.floor(x * 1e4) / 100:.2f}%" if x < IGNORES_IDK <= round(x, 2) else f"{100 * x:.0f}%"


def probe_check_note(row: dict[str, Any]) -> str:
    """Plain sentences on a (task, subset)'s probe check (a row with the columns of
    :data:`PROBE_CHECK_SCHEMA`, task, subset, scenario): how the probe answers without the
    evidence, and how many problems were never answered right, if any."""
    return _idk_sentence(row) + _never_right_sentence(row)


def _never_right_sentence(row: dict[str, Any]) -> str:
    never = row.get("n_never_right")
    if not never:
        return ""
    some = "1 problem was" if never == 1 else f"{never:,} problems were"
    return (f" {some} never answered right at any span (answered_right false in fits/problems.parquet): "
            "nothing shows where their evidence is, so their categories say nothing about the task.")


def _idk_sentence(row: dict[str, Any]) -> str:
    name = row.get("subset") or row.get("task")
    n, share = row.get("n_not_covered") or 0, row.get("idk_not_covered")
    seen = (f"{_pct(share)} of its {n:,} answers on spans without the evidence and "
            f"{_pct(row.get('idk_closed_book'))} of its {row.get('n_closed_book') or 0:,} closed-book answers were IDK")
    if n < MIN_SPANS or share is None:
        return f"{name}: too few spans without the evidence ({n}) to check how the probe answers there."
    if share >= IGNORES_IDK:
        return f"{name}: the probe follows the IDK instruction ({seen})."
    if row.get("scenario") == "PIG":
        return (f"{name}: the probe ignores the IDK instruction and answers wrongly instead ({seen}); PIG's likelihood "
                "reads IDK as a score of 0 and a wrong answer scores near 0, so its fit hardly depends on which "
                "of the two the probe gives.")
    if row.get("not_covered") == "idk":
        return (f"{name}: the probe ignores the IDK instruction and answers wrongly instead ({seen}). This fit "
                "assumed the oracle says IDK there (fit.not_covered: idk, DOLCE Eq. 3), so those wrong answers "
                "count as noise and problems drift to category I: refit with fit.not_covered: fitted.")
    return (f"{name}: the probe ignores the IDK instruction and answers wrongly instead ({seen}). raylc fitted "
            f"what the probe answers without the evidence (wrong {_pct(row.get('not_covered_wrong'))}, IDK "
            f"{_pct(row.get('not_covered_idk'))}) in place of DOLCE's assumption that it says IDK (Eq. 3), so "
            "those answers count as spans that miss the evidence, not as noise.")


def probe_check_table(task_fits: pl.DataFrame) -> pl.DataFrame:
    """The probe check columns of ``fits/tasks.parquet``, one row per (task, subset); empty for a
    table written before the check existed."""
    if "n_not_covered" not in task_fits.columns:
        return pl.DataFrame()
    present = [c for c in PROBE_CHECK_SCHEMA if c in task_fits.columns]  # n_never_right: since 2026-12-02
    return task_fits.select("task", "subset", "scenario", *present).sort("task", "subset")


def probe_check_notes(task_fits: pl.DataFrame) -> list[str]:
    """:func:`probe_check_note` for every (task, subset) of ``fits/tasks.parquet``."""
    return [probe_check_note(row) for row in probe_check_table(task_fits).iter_rows(named=True)]
