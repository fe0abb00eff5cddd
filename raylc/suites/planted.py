"""Planted synthetic suite: contexts with evidence of known complexity lambda and redundancy k.

A problem asks for the code of a vault. Its context is ``L`` sentence units of filler with
``k`` non-overlapping copies of a run of ``lambda`` consecutive clue sentences
("Ledger entry i of lambda for vault V: add v."). The code is the sum of the lambda
values modulo 1000, so only a complete run answers the question (DOLCE Assumption 1).
Copies are placed uniformly over all placements of k non-overlapping length-lambda
spans (stars and bars), the same law as the cover probability pi(lambda, k; L, C).
"""

from __future__ import annotations

import re
from typing import Literal

import numpy as np
import polars as pl
from pydantic import Field, field_validator, model_validator

from raylc.io.names import CASE_CLASH_WHY, UnsafeName, case_clash, path_segment
from raylc.io.schemas import declare
from raylc.suites.registry import DOLCE_LENGTHS, JOB_METRIC, PROBE_BUDGET, DolceSuite, SuiteInfo, Task, register_suite
from raylc.text.sampling import Length


class PlantedSuite(DolceSuite):
    """Synthetic suite with planted evidence of known complexity lambda and redundancy k.

    Each problem's context is ``L`` filler sentences (units); ``k`` non-overlapping runs of
    ``lambda`` consecutive clue sentences are hidden in it, and the answer can only be
    derived from one complete run. ``"L"`` in ``lambdas`` means lambda = L (the whole
    context is one run of clues, k = 1).
    """

    kind: Literal["planted"] = Field(default="planted", description="`planted`: synthetic problems of known lambda "
                                                                    "and k (the default suite).")
    tasks: list[str] = Field(default=["planted-a", "planted-b"], min_length=1, description=(
        "Task names; each task draws its own problems."))
    problems_per_task: int = Field(default=100, ge=1, le=1_000_000, description="Problems per task.")
    lambdas: list[Length] = Field(default=[1, 2, 5, 10, 20, 50, "L"], min_length=1, description=(
        "The lambdas a problem draws from (clue sentences per run); `L`: the whole context is one run (k = 1)."))
    ks: list[int] = Field(default=[1, 2, 5, 10], min_length=1, description=(
        "The ks a problem draws from (copies of its run), those with k x lambda <= max_units; when none fits, "
        "k = 1 and the context grows to lambda units, past max_units if need be."))
    min_units: int = Field(default=50, ge=2, le=1_000_000, description="Fewest units (sentences) in a context.")
    max_units: int = Field(default=400, ge=2, le=1_000_000, description=(
        "Most units (sentences) in a context, unless a drawn lambda needs more (see `ks`)."))

    columns = declare(("evidence_starts", pl.List(pl.Int64), "The first unit of each planted run of clues."))

    @field_validator("lambdas")
    @classmethod
    def _positive_lambdas(cls, v: list[Length]) -> list[Length]:
        if any(isinstance(x, int) and x < 1 for x in v):
            raise ValueError("every lambda must be >= 1 or 'L'")
        return v

    @field_validator("ks")
    @classmethod
    def _positive_ks(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("every k must be >= 1")
        return v

    @field_validator("tasks")
    @classmethod
    def _task_names(cls, v: list[str]) -> list[str]:
        """Each task names a folder (:func:`raylc.io.names.path_segment`) and problem ids; a task
        listed twice would give two problems one id."""
        try:
            v = [path_segment(t, "task") for t in v]
        except UnsafeName as exc:
            raise ValueError(str(exc)) from None
        twice = sorted({t for t in v if v.count(t) > 1})
        if twice:
            raise ValueError(f"task {twice[0]!r} is listed twice")
        clash = case_clash(v)
        if clash:
            raise ValueError(f"tasks {clash[0]!r} and {clash[1]!r} differ only in case ({CASE_CLASH_WHY})")
        return v

    @model_validator(mode="after")
    def _units_range(self) -> "PlantedSuite":
        if self.min_units > self.max_units:
            raise ValueError("min_units must be <= max_units")
        return self


_SUBJECTS = ["The harbor council", "A quiet archivist", "The night ferry", "Our village baker", "The old observatory",
             "A travelling merchant", "The river guild", "The lighthouse keeper", "A young cartographer",
             "The mill owner",
             "The tax office", "A stray cat", "The choir", "The museum guard", "A retired sailor", "The school board"]
_VERBS = ["reviewed", "painted", "counted", "ignored", "repaired", "described", "borrowed", "measured", "praised",
          "cleaned", "moved", "questioned", "sketched", "weighed", "sorted", "announced"]
_OBJECTS = ["the grain reports", "a broken lantern", "the winter schedule", "three copper kettles", "the east bridge",
            "a pile of letters", "the festival banners", "the tide tables", "an unfinished map", "the wool prices",
            "the chapel bells", "a crate of apples", "the signal flags", "the orchard fence", "a dusty ledger",
            "the market stalls"]
_TAILS = ["before noon", "with great care", "after the storm", "for the third time", "without a word",
          "at the request of the mayor", "during the fair", "in the rain", "by candlelight", "late in the evening"]

CLUE_RE = re.compile(r"Ledger entry (\d+) of (\d+) for vault (\S+): add (\d+)\.")
QUESTION_RE = re.compile(r"What is the code of vault (\S+)\?")


def clue(i: int, lam: int, vault: str, value: int) -> str:
    return f"Ledger entry {i} of {lam} for vault {vault}: add {value}."


def question(vault: str) -> str:
    return f"What is the code of vault {vault}? The code is the sum of all its ledger entries modulo 1000."


def place_copies(rng: np.random.Generator, L: int, lam: int, k: int) -> np.ndarray:
    """Sorted starts of k non-overlapping length-lam runs, uniform over all placements."""
    slots = np.sort(rng.choice(L - k * lam + k, size=k, replace=False))
    return slots + np.arange(k) * (lam - 1)


def _filler(rng: np.random.Generator, n: int) -> list[str]:
    s, v, o, t = (rng.integers(0, len(x), n) for x in (_SUBJECTS, _VERBS, _OBJECTS, _TAILS))
    return [f"{_SUBJECTS[a]} {_VERBS[b]} {_OBJECTS[c]} {_TAILS[d]}." for a, b, c, d in zip(s, v, o, t)]


PLANTED_INFO = SuiteInfo(
    title="Planted synthetic problems",
    tasks=(Task("(suite.tasks)", JOB_METRIC, PROBE_BUDGET, "DOLCE Sections 3-4 (no released code)",
                note="The code of a vault: the sum of its lambda clue values modulo 1000; exact match by default."),),
    lengths=DOLCE_LENGTHS,
    data="Nothing: contexts, clues and answers are generated from the seed.",
    real_data="None needed.",
    official="DOLCE (no released code)",
)


@register_suite(PlantedSuite, PLANTED_INFO)
def build_planted(suite: PlantedSuite, seed: int) -> pl.DataFrame:
    """Build the problems table.

    Columns: ``task, problem_id, L, units (list[str]), question, answer, planted_lam,
    planted_k, evidence_starts (list[int])``. Deterministic per ``seed``.
    """
    rows = []
    for t_idx, task in enumerate(suite.tasks):
        for p_idx in range(suite.problems_per_task):
            rng = np.random.default_rng([seed, t_idx, p_idx])
            lam_choice = suite.lambdas[rng.integers(len(suite.lambdas))]
            if lam_choice == "L":
                L = int(rng.integers(suite.min_units, suite.max_units + 1))
                lam, k = L, 1
            else:
                lam = int(lam_choice)
                ks = [k for k in suite.ks if k * lam <= suite.max_units] or [1]
                k = int(ks[rng.integers(len(ks))])
                lo = max(suite.min_units, k * lam)
                L = int(rng.integers(lo, max(lo, suite.max_units) + 1))
            problem_id = f"{task}-{p_idx:04d}"
            values = rng.integers(0, 1000, lam)
            starts = place_copies(rng, L, lam, k)
            units = _filler(rng, L)
            clues = [clue(i + 1, lam, problem_id, int(v)) for i, v in enumerate(values)]
            for s in starts:
                units[s : s + lam] = clues
            rows.append(
                {
                    "task": task,
                    "problem_id": problem_id,
                    "L": L,
                    "units": units,
                    "question": question(problem_id),
                    "answer": str(int(values.sum()) % 1000),
                    "planted_lam": lam,
                    "planted_k": k,
                    "evidence_starts": [int(s) for s in starts],
                }
            )
    return pl.DataFrame(
        rows,
        schema={
            "task": pl.String,
            "problem_id": pl.String,
            "L": pl.Int64,
            "units": pl.List(pl.String),
            "question": pl.String,
            "answer": pl.String,
            "planted_lam": pl.Int64,
            "planted_k": pl.Int64,
            "evidence_starts": pl.List(pl.Int64),
        },
    )
