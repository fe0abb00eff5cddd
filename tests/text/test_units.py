"""Unit splitting by DOLCE Table 3 specs (raylc.text.units): offsets, letters, composition."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.text.tokenize import get_tokenizer
from raylc.text.units import LETTERS, UnitSpecError, parse_spec, split_units, unit_stats

# Pieces that exercise every letter: markers, line breaks of all kinds, Unicode spaces, commas, pretokenized
# punctuation.
PIECES = ["Review #1 ", "Review #23", "Passage 4:", "Passage:", "Question:", "Answer:\n", "Dialogue:", "Summary:",
          "Dr.", "U.S.", "word", "héllo", "🙂", ",", ", ", ".", " . ", "!", "?", " ", "  ", "\n", "\n\n", "\r\n", "\t",
          "\u00a0", "\u2003", "\u2029", "\x1c", "1,000", "Cat sat.", "It ran!", "` ", "''"]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=6), max_size=40).map("".join)
specs = st.text(alphabet="".join(LETTERS), min_size=1, max_size=3)


def check_offsets(document: str, units) -> None:
    s, e = units.starts, units.ends
    assert len(units.text) == len(document)
    assert np.all(s < e) and np.all(s >= 0) and np.all(e <= len(document))
    assert np.all(e[:-1] <= s[1:])  # increasing, non-overlapping
    covered = np.zeros(len(document), int)
    for a, b, unit in zip(s.tolist(), e.tolist(), units.texts):
        assert units.text[a:b] == unit and unit == unit.strip() and unit
        covered[a:b] += 1
    solid = np.array([not ch.isspace() for ch in document], bool)
    assert np.all(covered[solid] == 1)  # every non-whitespace character in exactly one unit
    # the text differs from the document only where 'r' rewrote a comma
    diff = [i for i, (x, y) in enumerate(zip(document, units.text)) if x != y]
    assert all(document[i] == "," and units.text[i] == "." for i in diff)
    assert not diff or "r" in units.spec


@settings(max_examples=300, deadline=None)
@given(texts, specs)
def test_offsets_property(document, spec):
    check_offsets(document, split_units(document, spec))


def per_unit(document: str, first: str, second: str):
    """``second`` applied to each unit of ``first`` separately, offsets shifted back into the document."""
    outer = split_units(document, first)
    spans = []
    for a, b in zip(outer.starts.tolist(), outer.ends.tolist()):
        inner = split_units(outer.text[a:b], second)
        spans += [(a + x, a + y) for x, y in zip(inner.starts.tolist(), inner.ends.tolist())]
    return spans


@settings(max_examples=200, deadline=None)
@given(texts, st.sampled_from("bclnoqru"), st.sampled_from("bclnoqu"))
def test_composition_applies_each_letter_to_the_previous_units(document, first, second):
    composed = split_units(document, first + second)
    assert list(zip(composed.starts.tolist(), composed.ends.tolist())) == per_unit(document, first, second)


def test_letters():
    doc = "Title line\nDr. Smith went home. He slept!\n\n \t\r\n  Second block, with commas, here\nthird line\nfourth"
    assert split_units(doc, "b").texts == [
        "Title line\nDr. Smith went home. He slept!", "Second block, with commas, here\nthird line\nfourth"]
    assert split_units(doc, "l").texts == [
        "Title line", "Dr. Smith went home. He slept!", "Second block, with commas, here", "third line", "fourth"]
    assert split_units(doc, "ls").texts == [
        "Title line", "Dr. Smith went home.", "He slept!", "Second block, with commas, here", "third line", "fourth"]
    # c: pairs of lines, restarting in each unit of the previous letter; an odd last line stands alone
    assert split_units(doc, "c").texts == [
        "Title line\nDr. Smith went home. He slept!", "Second block, with commas, here\nthird line", "fourth"]
    assert split_units(doc, "bc").texts == split_units(doc, "c").texts
    assert split_units("a\nb\n\nc\nd\ne", "bc").texts == ["a\nb", "c\nd", "e"]
    assert split_units("a\nb\n\nc\nd\ne", "c").texts == ["a\nb", "c\nd", "e"]
    assert split_units("a\n\nb\nc\nd", "bc").texts == ["a", "b\nc", "d"]
    # r: commas followed by whitespace become periods (length kept); 1,000 and a,b stay
    r = split_units("so, um, we paid 1,000 for a,b,", "r")
    assert r.texts == ["so. um. we paid 1,000 for a,b."] and r.starts.tolist() == [0]
    assert split_units("so, um, we went home, then slept", "rs").texts == ["so.", "um.", "we went home.", "then slept"]


def test_marker_letters_keep_markers_and_preamble():
    assert split_units("Intro.\nReview #1 good. Review #22 bad.", "n").texts == [
        "Intro.", "Review #1 good.", "Review #22 bad."]
    assert split_units("Passage 1:\nA b.\nPassage 2:\nC d.", "o").texts == ["Passage 1:\nA b.", "Passage 2:\nC d."]
    q = "Answer these.\n\nPassage: foo\nbar\nQuestion: who?\nAnswer:\nme\n\nPassage: p2\nQuestion: q2\nAnswer:\na2"
    assert split_units(q, "q").texts == [
        "Answer these.", "Passage: foo\nbar\nQuestion: who?\nAnswer:\nme", "Passage: p2\nQuestion: q2\nAnswer:\na2"]
    u = "Dialogue: A: hi\nB: yo\nSummary: they greet.\n\nDialogue: C: x\nSummary: y\nThe end."
    assert split_units(u, "u").texts == ["Dialogue: A: hi\nB: yo\nSummary: they greet.",
                                         "Dialogue: C: x\nSummary: y", "The end."]


def test_sentences_and_pretokenized():
    assert split_units("Dr. Smith met Mr. Jones at 5 p.m. on Monday. They talked! Why? Nobody knows", "s").texts == [
        "Dr. Smith met Mr. Jones at 5 p.m. on Monday.", "They talked!", "Why?", "Nobody knows"]
    pretok = "the cat sat on the mat . it ran away ! why ? because , well , it did ."
    assert split_units(pretok, "t").texts == ["the cat sat on the mat .", "it ran away !", "why ?",
                                              "because , well , it did ."]
    assert split_units(pretok, "rt").texts[-3:] == ["because .", "well .", "it did ."]
    emoji = "Hi 🙂 there. Ünïcode works. Done."
    u = split_units(emoji, "s")
    assert u.texts == ["Hi 🙂 there.", "Ünïcode works.", "Done."] and [emoji[a:b] for a,
                                                                      b in zip(u.starts, u.ends)] == u.texts


def test_empty_and_blank_documents():
    for doc in ("", "   \n\t\u2003"):
        for spec in LETTERS:
            u = split_units(doc, spec)
            assert len(u) == 0 and u.texts == []


def test_units_object_and_spec_errors():
    u = split_units("  One. Two.  ", "s")
    assert len(u) == 2 and u[1] == "Two." and u.starts.tolist() == [2, 7] and u.ends.tolist() == [6, 11]
    assert parse_spec("rlt") == "rlt"
    for bad in ("", "lx", "LS"):
        with pytest.raises(UnitSpecError, match="unit spec") as exc:
            split_units("text", bad)
        assert "\n" not in str(exc.value) and isinstance(exc.value, ValueError)


def test_unit_stats():
    frame = pl.DataFrame({
        "task": ["a", "a", "b"], "spec": ["s"] * 3,
        "context": ["x y. z.", "w.", "p q r s."],
        "units": [["x y.", "z."], ["w."], ["p q r s."]],
    })
    stats = unit_stats(frame, get_tokenizer())
    a = stats.filter(pl.col("task") == "a").row(0, named=True)
    assert a["problems"] == 2 and a["units_max"] == 2 and a["units_p50"] == 1.5
    assert a["ctx_tokens_max"] == 5 and a["unit_tokens_max"] == 3 and a["unit_tokens_p50"] == 2.0
    b = stats.filter(pl.col("task") == "b").row(0, named=True)
    assert b["problems"] == 1 and b["units_p99"] == 1.0 and b["unit_tokens_p50"] == 5.0
