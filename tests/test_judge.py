"""LLM-as-judge plumbing: judge prompts through the same backend and actor-pool machinery."""

import polars as pl
import pytest

from raylc.backends.testserver import SimulatedOpenAIServer
from raylc.pipeline.ray_exec import generate_on_ray
from raylc.scoring.judge import judge_prompts, judge_scores, parse_grades
from raylc.spec import parse_job


class _Grader:
    """Grades 5 when the reference appears in the model answer, 1 otherwise, 'n/a' for an empty answer."""

    def answer(self, prompt: str) -> str:
        ref = prompt.split("Reference answer: ")[1].split("\n")[0]
        pred = prompt.split("Model answer: ")[1].split("\n")[0]
        if not pred:
            return "n/a"
        return "Score: 5" if ref.lower() in pred.lower() else "Reasoning... Score: 1"


FRAME = pl.DataFrame({
    "question": ["Capital of France?", "2+2?", "Colour of the sky?"],
    "reference": ["Paris", "4", "blue"],
    "prediction": ["It is Paris.", "5", None],
})


def test_prompts_and_grades():
    prompts = judge_prompts(FRAME)
    assert prompts.len() == 3 and "Reference answer: Paris" in prompts[0] and "Model answer: It is Paris." in prompts[0]
    assert "from 0 (wrong) to 5" in prompts[0]
    grades = parse_grades(pl.Series(["Score: 5", "score = 2", "Score: 9", "no grade", None]))
    assert grades.to_list() == [1.0, 0.4, None, None, None]


def test_judge_through_the_actor_pool(ray_session):
    with SimulatedOpenAIServer(_Grader(), model="judge", fail_rate=0.2, seed=3) as server:
        job = parse_job({
            "name": "j",
            "judge": {"backend": "openai", "base_url": server.base_url, "model": "judge", "mode": "completions",
                      "max_retries": 10, "backoff_s": 0.01},
            "ray": {"no_progress_timeout_s": 120, "batch_size": 2},
        })
        scored = judge_scores(FRAME, lambda prompts: generate_on_ray(prompts, job.as_judge()))
    assert scored["judge_score"].to_list() == [1.0, 0.2, None]
    assert scored["judgement"].to_list() == ["Score: 5", "Reasoning... Score: 1", "n/a"]


def test_job_without_judge():
    with pytest.raises(ValueError, match="no judge"):
        parse_job({"name": "x"}).as_judge()
