"""LLM-as-judge plumbing: 100-LongBench judge prompts through the same backends, actor pools and
checkpoints as the probe's requests (a run's ``judge/`` shards)."""

import numpy as np
import polars as pl
import pytest
from doubles.openai_server import SimulatedOpenAIServer

from raylc.backends.config import SimulatedProbe
from raylc.backends.simulated import SimulatedBackend
from raylc.scoring.judge import judge_sample_prompts, judge_sample_scores, simulated_judgement
from raylc.spec import parse_job

FRAME = pl.DataFrame({
    "metric": ["judge_qa", "judge_qa", "judge_qa", "judge_sum"],
    "question": ["Capital of France?", "2+2?", "Colour of the sky?", "Summarize."],
    "answers": [["Paris"], ["4", "four"], ["blue"], ["The cat sat on the mat. It slept."]],
    "prediction": ["It is Paris.", "five", None, "The cat sat on the mat. Dogs can fly."],
})


def test_simulated_judge_grades_the_rendered_prompts():
    calls = judge_sample_prompts(FRAME)
    assert calls.select("row", "kind").rows() == [(0, "qa"), (1, "qa"), (1, "qa"), (2, "qa"), (3, "fluency"),
                                                  (3, "precision")]
    prompts = calls["judge_prompt"].to_list()
    assert prompts[1].endswith("\nCorrect answers: 4\nAnswer: five\n")
    assert prompts[2].endswith("\nCorrect answers: four\nAnswer: five\n")
    replies = [simulated_judgement(p) for p in prompts]
    assert '"correctness": 3' in replies[0] and '"correctness": 0' in replies[1]
    assert replies[4].endswith('{"fluency": 1}')
    assert replies[5].endswith('{"precision": 1, "sentence_count": 2}')
    assert simulated_judgement("What is the code of vault V-1?") is None


@pytest.mark.ray
def test_judge_calls_through_the_pipeline_into_their_own_shards(ray_session, tmp_path):
    from raylc.run.folder import JUDGE_SHARDS
    from raylc.run.runner import open_run

    backend = SimulatedBackend(SimulatedProbe(), {})
    with SimulatedOpenAIServer(backend, model="judge", fail_rate=0.2, seed=3) as server:
        job = parse_job({
            "name": "j",
            "judge": {"backend": "openai", "base_url": server.base_url, "model": "judge", "mode": "completions",
                      "max_retries": 10, "backoff_s": 0.01, "sampling": {"max_tokens": 64}},
            "ray": {"no_progress_timeout_s": 120, "batch_size": 2}, "store": {"path": str(tmp_path)},
        })
        run = open_run(job, "j")
        run.log = lambda line: None
        uncapped = lambda calls: np.zeros(calls.height, dtype=np.int64)  # noqa: E731 (no cap: never counted)
        scores = judge_sample_scores(FRAME, lambda prompts: run.generate(prompts, job.as_judge(), uncapped))
        # fluency 2 x correctness 3 / 6; wrong on both answers; blank -> 0 without a call; fluency 1 x 1 of 2
        # sentences: one call per (row, answer), a summary's fluency and precision calls apart
        assert scores.to_list() == [1.0, 0.0, 0.0, 0.5]
        assert server.stats["completed"] == 5
        stored = run.folder.completions(JUDGE_SHARDS)
        assert stored.height == 5 and stored["error"].null_count() == 5 and set(stored["task"]) == {"judge"}
        again = judge_sample_scores(FRAME, lambda prompts: run.generate(prompts, job.as_judge(), uncapped))
        assert again.to_list() == scores.to_list() and server.stats["completed"] == 5  # every call was stored
    assert not (tmp_path / "j" / "requests").exists() and not (tmp_path / "j" / "infer").exists()


def test_job_without_judge():
    with pytest.raises(ValueError, match="no judge"):
        parse_job({"name": "x"}).as_judge()
