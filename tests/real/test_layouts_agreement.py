"""The generated real-model suite (``jobs/real-dolce-layouts-smollm2.yaml``, a few problems per
kind) through vLLM's CPU engine: SmolLM2 answers most problems at full context, its own answers
imply the designed category for most of them, and the reported categories agree with what its
answers imply for >= 90% of the problems it answers right at full context."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from real.conftest import ROOT, no_traceback, raylc, sets
from real_implied import implied_categories

pytestmark = pytest.mark.ray

LAYOUTS_JOB = ROOT / "jobs" / "real-dolce-layouts-smollm2.yaml"
PER_KIND = 4


@pytest.fixture(scope="module")
def layouts_run(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("layouts")
    proc = raylc("run", LAYOUTS_JOB, "--store", store, "--run-id", "layouts",
                 *sets(f"suite.problems_per_kind={PER_KIND}"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_traceback(proc)
    return store / "layouts"


@pytest.fixture(scope="module")
def judged(layouts_run) -> pl.DataFrame:
    """Per problem: right at full context, the implied, designed and reported categories."""
    from raylc.dolce.categories import assign_categories

    obs = pl.read_parquet(layouts_run / "score" / "observations.parquet")
    problems = pl.read_parquet(layouts_run / "build" / "problems.parquet")
    fits = pl.read_parquet(layouts_run / "fits" / "problems.parquet")
    table = (implied_categories(obs).join(problems.select("problem_id", "planted_lam", "planted_k"), on="problem_id")
             .join(fits.select("problem_id", pl.col("category").alias("reported")), on="problem_id"))
    designed = assign_categories(*(table[c].to_numpy() for c in ("planted_lam", "planted_k", "lam_p", "k_p", "lam_q")))
    return table.with_columns(designed=pl.Series([str(d) for d in designed]))


def test_the_probe_answers_the_suite_as_designed(judged):
    """The suite, not the estimator: every kind is there, at least 3 of 4 problems are answered
    right at full context, and the probe's own answers imply the designed category for at least
    4 of 5 of those."""
    kinds = set(judged["task"])
    assert kinds == {"lookup", "repeated", "closed_book"} and judged.height == PER_KIND * len(kinds)
    right = judged.filter(pl.col("right_full"))
    assert right.height >= 0.75 * judged.height, judged
    assert (right["category"] == right["designed"]).mean() >= 0.8, right


def test_reported_categories_agree_with_the_probes_own_answers(judged):
    right = judged.filter(pl.col("right_full"))
    agree = (right["reported"] == right["category"]).mean()
    assert agree >= 0.9, right.select("task", "problem_id", "lam", "k", "category", "reported", "designed")
