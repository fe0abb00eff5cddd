"""Span outcomes per prompt template (DOLCE Appendix E): metric, IDK, choice letters, summaries."""

import polars as pl
import pytest

from raylc.scoring import OBSERVATION_SCHEMA, score_spans

PROBLEMS = pl.DataFrame({
    "problem_id": ["p", "q", "c", "s"],
    "answer": ["42", "Paris", "B", "the cat sat on the mat"],
    "answers": [["42"], ["Paris", "City of Paris"], ["B"], ["the cat sat on the mat"]],
    "template": ["planted", "qa", "choice", "summary"],
})


def spans(rows):
    return pl.DataFrame(rows, schema=["task", "problem_id", "L", "C", "start", "completion"], orient="row")


def test_each_template_scores_by_its_rule_in_input_order():
    done = spans([
        ("t", "c", 9, 1, 0, "The correct answer is (B)"), ("t", "p", 9, 1, 0, "42"),
        ("t", "q", 9, 1, 0, "city of paris"),
        ("t", "c", 9, 1, 1, "E"), ("t", "q", 9, 1, 1, "Unanswerable"), ("t", "s", 9, 2, 0, "the cat sat"),
        ("t", "c", 9, 1, 2, "(A)"), ("t", "p", 9, 1, 1, "41"),
    ])
    out = score_spans(done, PROBLEMS)
    assert out.schema == pl.Schema(OBSERVATION_SCHEMA)
    assert out["start"].to_list() == [0, 0, 0, 1, 1, 0, 2, 1]
    assert out["score"].to_list()[:5] == [1.0, 1.0, 1.0, None, None]
    assert out["score"][5] == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # ROUGE-L F of 3 of 6 tokens
    assert out["score"].to_list()[6:] == [0.0, 0.0]
    assert out["metric"].to_list() == ["accuracy", "exact_match", "exact_match", "accuracy", "exact_match", "rougeL",
                                       "accuracy", "exact_match"]


def test_partial_credit_metric_and_planted_default():
    done = spans([("t", "q", 9, 1, 0, "Paris, France"), ("t", "p", 9, 1, 0, "I don't know")])
    out = score_spans(done, PROBLEMS, metric="f1")
    assert out["score"][0] == pytest.approx(2 / 3) and out["score"][1] is None
    planted = score_spans(done.filter(pl.col("problem_id") == "p"), PROBLEMS.select("problem_id", "answer"))
    assert planted["score"].to_list() == [None] and planted["metric"].to_list() == ["exact_match"]
    with pytest.raises(ValueError, match="unknown metric"):
        score_spans(done, PROBLEMS, metric="bleu")
