import polars as pl
import pytest

from raylc.backends.config import SimulatedProbe
from raylc.backends.simulated import SimulatedBackend
from raylc.spec import Job
from raylc.suites.planted import build_planted
from raylc.text.prompts import IDK_ANSWER, render_prompts
from raylc.text.sampling import sample_spans

JOB = Job(name="t", suite={"problems_per_task": 40, "max_units": 200})


@pytest.fixture(scope="module")
def problems():
    return build_planted(JOB.suite, seed=3)


def test_build_is_deterministic_and_seeded(problems):
    assert problems.equals(build_planted(JOB.suite, seed=3))
    assert not problems.equals(build_planted(JOB.suite, seed=4))


def test_planted_values_and_layout(problems):
    assert problems.height == 80
    assert set(problems["task"]) == {"planted-a", "planted-b"}
    for row in problems.iter_rows(named=True):
        L, lam, k, starts = row["L"], row["planted_lam"], row["planted_k"], row["evidence_starts"]
        assert len(row["units"]) == L and JOB.suite.min_units <= L <= JOB.suite.max_units
        assert lam in (1, 2, 5, 10, 20, 50) or (lam == L and k == 1)
        assert k * lam <= L and len(starts) == k
        assert all(b - a >= lam for a, b in zip(starts, starts[1:]))  # non-overlapping
        assert starts[-1] + lam <= L
        for s in starts:
            assert row["units"][s].startswith("Ledger entry 1 of")
            assert row["units"][s + lam - 1].startswith(f"Ledger entry {lam} of {lam}")


def _answers(problems, spans, probe):
    backend = SimulatedBackend(probe, dict(zip(problems["problem_id"], problems["answer"])))
    return [g["completion"] for g in backend.generate(render_prompts(spans, problems).to_list())]


def test_answer_derivable_exactly_when_a_copy_is_covered(problems):
    """A noiseless probe answers iff the span covers a complete copy (Assumption 1)."""
    quiet = SimulatedProbe(knowledge_rate=0, guess_rate=0, wrong_rate=0)
    spans = sample_spans(problems, JOB.sampling).filter(pl.col("C") > 0)
    spans = spans.join(problems.select("problem_id", "answer", "planted_lam", "evidence_starts"), on="problem_id")
    got = _answers(problems, spans, quiet)
    for row, answer in zip(spans.iter_rows(named=True), got):
        covered = any(row["start"] <= s and s + row["planted_lam"] <= row["start"] + row["C"]
                      for s in row["evidence_starts"])
        assert answer == (row["answer"] if covered else IDK_ANSWER)


def test_noise_rates_are_followed(problems):
    spans = sample_spans(problems, JOB.sampling).filter(pl.col("C") == 0)
    know = _answers(problems, spans, SimulatedProbe(knowledge_rate=1, guess_rate=0, wrong_rate=0))
    assert know == problems.sort("task", "problem_id")["answer"].to_list()
    guesses = _answers(problems, spans, SimulatedProbe(knowledge_rate=0, guess_rate=1, wrong_rate=0))
    assert all(g.isdigit() for g in guesses) and len(set(guesses)) > 10
