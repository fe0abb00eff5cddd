"""Stage functions of length-controlled runs (no Ray): requests, two-call rounds, scoring."""

import polars as pl
import pytest
from in_process import make_backend

from raylc.backends.simulated import SIMULATED_COT, SimulatedLengthBackend
from raylc.spec import Job
from raylc.suites.helmet_recall import HelmetRecallSuite
from raylc.suites.samples import check_samples
from raylc.sweep import stages as length
from raylc.text.prompts import IDK_ANSWER

JOB = Job(name="t")


def samples() -> pl.DataFrame:
    rows = [
        # task, sample_id, length, context_tokens, context, answers, gold, metric, extractor, followup
        ("kv", "s1", 1024, 1000, "key A -> 17", ["17"], "17", "subem", "none", None),
        ("kv", "s1", 2048, 2000, "key A -> 17 and more", ["17"], "17", "subem", "none", None),
        ("kv", "s2", 1024, 990, "key B -> 5", ["5"], "5", "subem", "none", None),
        ("mc", "q1", 4000, 3900, "a long story", ["B"], "The correct answer is (B)", "longbench_v2", "longbench_v2",
         "Text omitted. Question q1? Reasoning: {completion}\n\nSo the answer?"),
        ("mc", "q2", 4000, 3950, "another story", ["C"], "The correct answer is (C)", "longbench_v2", "longbench_v2",
         "Text omitted. Question q2? Reasoning: {completion}\n\nSo the answer?"),
    ]
    frame = pl.DataFrame(
        rows, orient="row",
        schema=["task", "sample_id", "length", "context_tokens", "context", "answers", "gold", "metric", "extractor",
                "followup"],
    )
    return check_samples(frame.with_columns(
        head=pl.lit("Read this.\n\n"), tail=pl.format("\n\nQuestion {}?\nAnswer:", "sample_id"),
        question=pl.format("Question {}?", "sample_id"),
        max_tokens=pl.when(pl.col("followup").is_null()).then(None).otherwise(1024),
        followup_max_tokens=pl.when(pl.col("followup").is_null()).then(None).otherwise(128),
    ))


def test_request_ids_are_stable_and_depend_on_probe_and_prompt():
    s = samples()
    a, b = length.requests(s, JOB), length.requests(s, JOB)
    assert a["request_id"].to_list() == b["request_id"].to_list() and a["request_id"].n_unique() == s.height
    other = length.requests(s, JOB.model_copy(update={"seed": 1}))
    assert set(other["request_id"]).isdisjoint(a["request_id"])
    assert a["round"].unique().to_list() == [1]
    assert a.filter(pl.col("task") == "mc")["max_tokens"].to_list() == [1024, 1024]


def test_second_round_appends_the_first_completion_and_followup():
    s = samples()
    first = length.requests(s, JOB).with_columns(
        completion=pl.when(pl.col("sample_id") == "q2").then(None).otherwise(pl.lit("thinking...")),
        error=pl.lit(None, pl.String))
    second = length.requests(s, JOB, first)
    assert second["sample_id"].to_list() == ["q1"]  # only two-call samples whose first call succeeded
    row = second.row(0, named=True)
    assert row["round"] == 2 and row["max_tokens"] == 128
    assert (row["head"], row["context"]) == ("", "")  # the answer call omits the document (LongBench v2 C.3)
    assert row["tail"] == "Text omitted. Question q1? Reasoning: thinking...\n\nSo the answer?"
    final = length.final_completions(s, first, second.with_columns(completion=pl.lit("The correct answer is (B)"),
                                                                   error=pl.lit(None, pl.String)))
    by_id = {r["sample_id"] + str(r["length"]): r for r in final.iter_rows(named=True)}
    assert by_id["q14000"]["completion"] == "The correct answer is (B)" and by_id["q14000"]["error"] is None
    assert by_id["q24000"]["completion"] is None and by_id["q24000"]["error"] == "second call missing"
    assert by_id["s11024"]["completion"] == "thinking..."


def test_scoring_gold_gives_full_marks_and_v2_invalid_is_flagged():
    s = samples()
    gold = s.with_columns(completion=pl.col("gold"), error=pl.lit(None, pl.String))
    scored = length.score_samples(gold)
    assert scored["score"].to_list() == [1.0] * s.height and scored["valid"].all()
    bad = s.with_columns(completion=pl.lit("no idea"), error=pl.lit(None, pl.String))
    scored = length.score_samples(bad)
    v2 = scored.filter(pl.col("metric") == "longbench_v2")
    assert v2["valid"].to_list() == [False, False] and v2["score"].to_list() == [0.0, 0.0]
    assert "context" not in scored.columns and "answers" in scored.columns


def test_judge_metrics_need_a_judge():
    s = samples().with_columns(metric=pl.lit("judge_qa"), completion=pl.col("gold"), error=pl.lit(None, pl.String))
    with pytest.raises(ValueError, match="needs a judge"):
        length.score_samples(s)
    scored = length.score_samples(s, judge=lambda f: pl.Series([0.5] * f.height))
    assert scored["score"].to_list() == [0.5] * s.height


def test_simulated_probe_on_samples_decays_with_length_and_runs_two_calls():
    """The simulated probe knows the samples table it is built with and finds a batch's
    requests there by their keys; a two-call sample's first call gets the fixed reasoning line."""
    s = samples()
    probe = JOB.probe.model_copy(update={"accuracy": 1.0, "half_life_tokens": 10**9})
    backend = make_backend(JOB.model_copy(update={"probe": probe}), s)
    reqs = length.requests(s, JOB)
    assert isinstance(backend.for_rows(reqs), SimulatedLengthBackend)
    parts = list(zip(reqs["head"], reqs["context"], reqs["tail"]))
    out = [g["completion"] for g in backend.for_rows(reqs).generate(parts)]
    assert out[:3] == ["17", "17", "5"] and out[3:] == [SIMULATED_COT] * 2
    second = length.requests(s, JOB, reqs.with_columns(completion=pl.Series(out)))
    q1 = second.filter(pl.col("sample_id") == "q1")
    (final,) = backend.for_rows(q1).generate(list(zip(q1["head"], q1["context"], q1["tail"])))
    assert final["completion"] == "The correct answer is (B)"
    never = make_backend(JOB.model_copy(update={"probe": probe.model_copy(update={"half_life_tokens": 1})}), s)
    assert [g["completion"] for g in never.for_rows(reqs[:3]).generate(parts[:3])] == [IDK_ANSWER] * 3


def test_prior_filter_marks_length_zero_rows_not_kept_without_a_threshold():
    scores = pl.DataFrame({"task": ["a", "a"], "sample_id": ["x", "x"], "length": [0, 1024], "score": [1.0, 0.0]})
    out = HelmetRecallSuite(kind="helmet_recall").kept(scores)  # a sweep suite without a prior-knowledge filter
    assert out["kept"].to_list() == [False, True]
