import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from raylc.scoring.extract import EXTRACTORS
from raylc.scoring.metrics import METRICS, candidate_accuracy
from raylc.suites.samples import check_samples
from raylc.suites.thesis import PREDICATE, RELATIONS, ThesisSuite, build_thesis
from raylc.text.tokenize import get_tokenizer

PIECES = [4, 12, 40]
SUITE = ThesisSuite(kind="thesis_units", pieces=PIECES, base_pieces=[4], samples_per_setting=8, selectivity=0.25,
                    exclusion=0.2)
TOK = get_tokenizer(None)


@pytest.fixture(scope="module")
def samples():
    return build_thesis(SUITE, seed=5)


def _lines(row):
    """{name: text} of the candidates in the context."""
    out = {}
    for line in row["context"].split("\n"):
        name, text = line.split(": ", 1)
        out[name] = text
    return out


def test_contract_determinism_and_lengths(samples):
    assert check_samples(samples).equals(samples)
    assert samples.height == 3 * 8 * len(PIECES)
    assert build_thesis(SUITE, seed=5).equals(samples)
    assert not build_thesis(SUITE, seed=6)["context"].equals(samples["context"])
    assert samples["context_tokens"].to_list() == [TOK.count(c) for c in samples["context"]]
    cells = samples.group_by("task", "n_pieces").agg(
        pl.col("length").n_unique().alias("lengths"), pl.col("length").first(), pl.col("context_tokens").max())
    assert (cells["lengths"] == 1).all() and (cells["length"] == cells["context_tokens"]).all()
    for row in samples.iter_rows(named=True):
        assert len(_lines(row)) == row["n_pieces"] == len(row["candidates"])
        assert set(_lines(row)) == set(row["candidates"])
    # longer piece counts give longer contexts
    mean = samples.group_by("task", "n_pieces").agg(pl.col("context_tokens").mean()).sort("task", "n_pieces")
    for _, part in mean.group_by("task"):
        assert part["context_tokens"].is_sorted()


def test_key_retrieval_passage_is_the_key_line(samples):
    for row in samples.filter(pl.col("task") == "key_retrieval").iter_rows(named=True):
        key = row["question"]
        assert f'related to "{key}" from the following.' in row["head"]
        lines = _lines(row)
        assert lines[key] == row["gold"] == " ".join(row["answers"])
        assert len(row["answers"]) in (2, 3) and all(s.startswith(key + " ") for s in row["answers"])
        assert sum(key in text for text in lines.values()) == 1  # no other passage mentions the key
        assert list(lines).index(key) == round(row["depth"] * (row["n_pieces"] - 1))
    # the same key candidate and passage at every piece count
    same = samples.filter(pl.col("task") == "key_retrieval").group_by("sample_id").agg(pl.col("gold").n_unique())
    assert (same["gold"] == 1).all()


def test_filter_and_exclusion_answers_are_the_brute_force_filter(samples):
    for row in samples.filter(pl.col("task") != "key_retrieval").iter_rows(named=True):
        preds = row["predicates"]
        assert len(preds) in (2, 3)
        for p in preds:  # the query states every predicate
            rel = next(r for r in RELATIONS if p.startswith(PREDICATE[r].split("{v}")[0]))
            value = p[len(PREDICATE[rel].split("{v}")[0]):]
            assert value in RELATIONS[rel][0] and RELATIONS[rel][2].format(v=value) in row["question"]
        lines = _lines(row)
        passing = [name for name, text in lines.items() if all(p in text for p in preds)]
        assert len(passing) == round(SUITE.selectivity * row["n_pieces"])
        expected = [name for name in passing if name not in row["ignored"]]
        assert row["answers"] == expected
        assert row["gold"] == (", ".join(expected) if expected else "None")
        for name, text in lines.items():  # one piece per constraint, each on its own relation
            assert len(re.findall(rf"\b{re.escape(name)} ", text)) == len(preds)
        if row["task"] == "exclusion":
            assert len(row["ignored"]) == max(1, round(SUITE.exclusion * row["n_pieces"]))
            assert f"Ignore {', '.join(row['ignored'])}." in row["head"]
            assert any(name in passing for name in row["ignored"])
        else:
            assert row["ignored"] == [] and "Ignore" not in row["head"]


def test_vocabularies_are_prefix_free():
    for values, _, _ in RELATIONS.values():
        assert len(set(values)) == len(values)
        assert not any(a != b and b.startswith(a) for a in values for b in values)
    assert set(PREDICATE) == set(RELATIONS)


def test_gold_scores_the_maximum(samples):
    kr = samples.filter(pl.col("task") == "key_retrieval")
    assert (METRICS["recall"](EXTRACTORS["none"](kr["gold"]), kr["answers"]) == 1.0).all()
    fe = samples.filter(pl.col("task") != "key_retrieval")
    assert set(fe["metric"]) == {"candidate_accuracy"}
    assert (candidate_accuracy(fe["gold"], fe["answers"], fe["candidates"]) == 1.0).all()
    # listing every candidate scores the share of non-passing candidates wrong
    everyone = fe["candidates"].list.join(", ")
    got = candidate_accuracy(everyone, fe["answers"], fe["candidates"])
    assert got.to_list() == pytest.approx((fe["answers"].list.len() / fe["candidates"].list.len()).to_list())


def test_candidate_accuracy_by_hand():
    cands = [["Ann Lee", "Bo Kim", "Cy Ray", "Di Fox"]] * 4
    answers = [["Ann Lee", "Bo Kim"]] * 4
    preds = ["ann lee and Cy Ray.", "Ann Leeds, Bo Kim", None, "None"]
    # 1: Ann TP, Bo FN, Cy FP, Di TN -> 2/4; 2: Ann FN (word boundary), Bo TP, Cy TN, Di TN -> 3/4
    assert candidate_accuracy(preds, answers, cands).to_list() == [0.5, 0.75, 0.0, 0.5]
    assert candidate_accuracy(["x"], [[]], [[]]).to_list() == [None]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=12))
def test_candidate_accuracy_is_tp_plus_tn_over_n(flags):
    names = [f"Name{chr(65 + i // 26)}{chr(97 + i % 26)} Zed" for i in range(len(flags))]
    answers = [n for n, (truth, _) in zip(names, flags) if truth]
    pred = "; ".join(n for n, (_, said) in zip(names, flags) if said)
    expected = sum(truth == said for truth, said in flags) / len(flags)
    assert candidate_accuracy([pred], [answers], [names]).to_list() == [pytest.approx(expected)]


def test_spec_validation():
    with pytest.raises(ValidationError, match=r"base_pieces \[8\] are not in pieces"):
        ThesisSuite(kind="thesis_units", pieces=[4, 16], base_pieces=[8])
    with pytest.raises(ValidationError, match="every value of pieces must be >= 2"):
        ThesisSuite(kind="thesis_units", pieces=[1, 16], base_pieces=[16])


def test_prompts_are_table_a1(samples):
    """Table A.1 transcribed by hand (its paragraphs joined by a blank line, the candidates one per
    line): key retrieval with its one "bitcoin" exemplar, filter, and exclusion's "Ignore <names>."."""
    exemplar = (
        'Find and return all passages related to "bitcoin" from the following.\n\n'
        "Twitterrific: Twitterrific is a Mac OS X and iOS client for the social networking site Twitter.\n"
        "Mod4Win: It was one of the first Mod players for the Windows platform.\n"
        "Atom: Atom is a free and open-source text and source code editor for OS X, Linux, and Windows with "
        "support for plug-ins written in Node.js, and embedded Git Control, developed by GitHub.\n"
        "Polyworld: Polyworld is a cross-platform (Linux, Mac OS X) program written by Larry Yaeger to evolve "
        "Artificial Intelligence through natural selection and evolutionary algorithms.\n"
        "MongoDB: MongoDB (from humongous) is a cross-platform document-oriented database.\n"
        "Stella: It is open source, and runs on most major modern platforms including Amiga, Windows, Mac OS X, "
        "Linux, Windows CE/Mobile, Dreamcast, GP2X, Nintendo DS, and Wii.\n"
        "BetterZip: It is developed solely for the OS X platform.\n"
        "Qt Jambi: Qt Jambi is a Java binding of the cross-platform application framework Qt.\n"
        "Overlayfs: OverlayFS is a filesystem service for Linux which implements a union mount for other file "
        "systems.\n"
        "bitcoin: In February 2014, a beta version of a Windows/Linux Firefox plugin called FreeSpeechMe was "
        "released that allows automated resolution of .bit addresses, by downloading the Namecoin block chain and "
        "running it in the background.\n\n"
        "Answer: In February 2014, a beta version of a Windows/Linux Firefox plugin called FreeSpeechMe was released "
        "that allows automated resolution of .bit addresses, by downloading the Namecoin block chain and running it "
        "in the background.\n\n")
    first = {t: next(r for r in samples.iter_rows(named=True) if r["task"] == t)
             for t in ("key_retrieval", "filter", "exclusion")}
    kr = first["key_retrieval"]
    asked = f'Find and return all passages related to "{kr["question"]}" from the following.\n\n'
    assert kr["head"] == exemplar + asked
    fl, ex = first["filter"], first["exclusion"]
    assert fl["head"] == ("List all passing candidates if any. (Names of candidates only)\n\n"
                          f"Query: {fl['question']}\n\nCandidates:\n")
    assert ex["head"] == (f"List all passing candidates if any. (Names of candidates only) Ignore "
                          f"{', '.join(ex['ignored'])}.\n\nQuery: {ex['question']}\n\nCandidates:\n")
    assert kr["tail"] == fl["tail"] == ex["tail"] == "\n\nAnswer:"


def test_key_retrieval_matching_percentage_by_hand():
    """Section 4.2: the share of the key candidate's passages found in the response (any case):
    one of two sentences -> 0.5; both, in another order and upper case -> 1.0; none -> 0."""
    gold = ["Ada Bar was born in Fenwick in 1990.", "Ada Bar received the Iris Medal in 2001 for work on old clocks."]
    outputs = ["Ada Bar was born in Fenwick in 1990. Nothing else.",
               "ADA BAR RECEIVED THE IRIS MEDAL IN 2001 FOR WORK ON OLD CLOCKS. Ada Bar was born in Fenwick in 1990.",
               "Ada Bar was born in Fenwick."]
    assert METRICS["recall"](outputs, [gold] * 3).to_list() == [0.5, 1.0, 0.0]
