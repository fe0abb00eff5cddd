"""Layouts suite (:mod:`raylc.suites.layouts`): generated documents whose evidence layout is known
by construction. For any seed the answer (as SubEM normalizes it) is in exactly the designed
paragraphs, the asked subject in no other, two-paragraph halves adjacent, ids unique; bad
configs are one line."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.scoring.metrics import normalize_squad, subem
from raylc.spec import JobSpecError, parse_job
from raylc.suites.layouts import CLOSED_BOOK, KINDS, SCHEMA, LayoutsSuite, build_layouts, build_problem
from raylc.text.prompts import IDK_ANSWER, TEMPLATES, render_prompts
from raylc.text.sampling import Sampling, sample_spans
from raylc.text.units import split_units


def norm(texts: list[str]) -> list[str]:
    return pl.DataFrame({"t": texts}).select(normalize_squad(pl.col("t")))["t"].to_list()


def holding(texts: list[str], needle: str, words: bool = False) -> list[int]:
    """Indices of ``texts`` whose normalized text holds the normalized ``needle`` (as SubEM looks
    for a reference; ``words``: as whole words)."""
    [n] = norm([needle])
    pad = " " if words else ""
    return [i for i, t in enumerate(norm(texts)) if f"{pad}{n}{pad}" in f"{pad}{t}{pad}"]


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return build_layouts(LayoutsSuite(problems_per_kind=12), seed=0)


def test_table_shape_ids_and_units(table):
    assert table.schema == pl.Schema(SCHEMA) and table.height == 4 * 12
    assert table["task"].to_list() == [k for k in KINDS for _ in range(12)]
    assert table["problem_id"].n_unique() == table.height
    assert set(table["template"]) == {"qa"} and IDK_ANSWER == "Unanswerable" and IDK_ANSWER in TEMPLATES["qa"]
    assert set(table["unit_spec"]) == {"b"}
    for row in table.iter_rows(named=True):
        assert row["L"] == len(row["units"]) == 7 and row["answer"] == row["answers"][0]
        assert [row["document"][a:b] for a, b in zip(row["unit_starts"], row["unit_ends"])] == row["units"]
        assert split_units(row["document"], "b").texts == row["units"]  # what the documents suite would cut
    designed = table.group_by("task").agg(pl.col("planted_lam").unique().sort(),
                                          pl.col("planted_k").unique().sort()).sort("task")
    assert designed.rows() == [("closed_book", [0], [0]), ("lookup", [1], [1]), ("repeated", [1], [2, 3]),
                               ("two_paragraphs", [2], [1])]


def test_seeded_and_different_per_seed(table):
    suite = LayoutsSuite(problems_per_kind=12)
    assert table.equals(build_layouts(suite, seed=0))
    other = build_layouts(suite, seed=1)
    assert not table.equals(other)
    for col in ("document", "question", "answer", "evidence_starts"):  # names, numbers, wording, order
        assert (table[col] != other[col]).sum() >= 6, col
    # a problem depends on (seed, kind, index) only: listing fewer kinds does not change it
    alone = build_layouts(LayoutsSuite(kinds=["repeated"], problems_per_kind=3), seed=0)
    assert alone.equals(table.filter(pl.col("task") == "repeated").head(3))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, 999), kind=st.sampled_from(KINDS),
       paragraphs=st.integers(5, 12))
def test_the_answer_is_in_exactly_the_designed_paragraphs(seed, index, kind, paragraphs):
    row = build_problem(kind, seed, index, paragraphs, [2, 3])
    units, starts, answer = row["units"], row["evidence_starts"], row["answers"][0]
    assert len(units) == paragraphs == len(set(units)) and all(units)
    assert len(starts) == (row["planted_k"] if kind != "two_paragraphs" else 1)
    if kind in ("lookup", "repeated"):
        assert holding(units, answer) == starts
        assert all(b - a >= 2 for a, b in zip(starts, starts[1:]))  # no two copies adjacent
        assert row["planted_k"] == 1 if kind == "lookup" else row["planted_k"] in (2, 3)
        for term in row["subject"]:
            assert holding(units, term, words=True) == starts, term
    elif kind == "two_paragraphs":
        first, last = answer.split(" ")
        s = starts[0]
        assert 0 <= s < paragraphs - 1 and holding(units, answer) == []  # no paragraph holds the full name
        assert holding(units, first, words=True) == [s] and holding(units, last, words=True) == [s + 1]
        for term in row["subject"]:
            assert set(holding(units, term, words=True)) <= {s, s + 1} and s in holding(units, term, words=True)
    else:
        assert starts == [] and row["planted_lam"] == 0 and row["subject"] == []
        assert (row["question"], row["answers"]) in [(q, a) for q, a in CLOSED_BOOK]
        for ref in row["answers"]:
            assert holding(units, ref) == []


def test_no_single_paragraph_of_a_two_paragraph_problem_scores_under_subem(table):
    """Even a probe that copied a whole paragraph would not score from one of the two alone."""
    rows = table.filter(pl.col("task") == "two_paragraphs")
    for row in rows.iter_rows(named=True):
        s = row["evidence_starts"][0]
        paragraphs = row["units"][s: s + 2]
        assert subem(paragraphs, [row["answers"]] * 2).to_list() == [0.0, 0.0]
        assert subem([" ".join(paragraphs).replace(". ", " ")], [row["answers"]]).to_list() == [0.0]  # not verbatim
        assert subem([f"{row['answers'][0]}."], [row["answers"]]).to_list() == [1.0]


def test_prompts_render_the_spans_paragraphs(table):
    spans = sample_spans(table, Sampling()).filter(pl.col("problem_id") == "lookup-000")
    assert sorted(set(spans["C"])) == [0, 1, 2, 5, 7] and spans.height == 1 + 7 + 6 + 3 + 1
    prompts = render_prompts(spans, table)
    row = table.row(0, named=True)
    one = prompts[spans["C"].to_list().index(1)]
    assert one.startswith("Answer the question based on the context.") and "Unanswerable" in one
    assert row["units"][0] in one and row["units"][1] not in one
    assert one.endswith(f"Question: {row['question']}\nAnswer:")
    full = prompts[spans["C"].to_list().index(7)]
    assert row["document"] in full


@pytest.mark.parametrize("suite, message", [
    ({"kinds": []}, "key 'suite.kinds': List should have at least 1 item"),
    ({"kinds": ["lookup", "nope"]}, "key 'suite.kinds.1': Input should be 'lookup', 'repeated', 'closed_book' or "
                                    "'two_paragraphs'"),
    ({"kinds": ["lookup", "lookup"]}, "key 'suite.kinds': kind 'lookup' is listed twice"),
    ({"problems_per_kind": 0}, "key 'suite.problems_per_kind': Input should be greater than or equal to 1"),
    ({"paragraphs": 2}, "key 'suite.paragraphs': Input should be greater than or equal to 3"),
    ({"copies": [1, 2]}, "key 'suite.copies': every number of copies must be >= 2 (one copy is a lookup)"),
    ({"copies": [2, 4]}, "key 'suite.copies': every number of copies must be <= 3 (a repeated fact has 3 wordings"),
    ({"paragraphs": 4}, "paragraphs must be >= 5 for 3 non-adjacent copies (got 4)"),
    ({"problems_per_task": 4}, "unknown key 'suite.problems_per_task' (allowed: kind, kinds, problems_per_kind, "
                               "paragraphs, copies)"),
])
def test_a_bad_config_is_one_line(suite, message):
    with pytest.raises(JobSpecError) as err:
        parse_job({"name": "t", "suite": {"kind": "layouts", **suite}}, "job.yaml")
    text = str(err.value)
    assert "\n" not in text and message in text, text


def test_four_paragraphs_suffice_without_the_repeated_kind():
    suite = LayoutsSuite(kinds=["lookup", "two_paragraphs"], paragraphs=4, problems_per_kind=3)
    assert build_layouts(suite, seed=5)["L"].to_list() == [4] * 6
