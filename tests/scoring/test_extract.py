"""Answer extractors on realistic model outputs, and against the reference parsers they follow
(LongBench v2 ``extract_answer``, LongBench ``code_sim_score`` line rule, HELMET ``parse_output``)."""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.scoring.extract import (
    EXTRACTORS,
    TABLE4_EXTRACTOR,
    answer_phrase,
    choice,
    code_line,
    first_line,
    first_line_last_uuid,
    first_line_number,
    first_word,
    identity,
    is_idk,
    longbench_v2,
    numeric,
    raw_first_line,
    trec_label,
)

# --------------------------------------------------------------------------------------------- #
# oracles
# --------------------------------------------------------------------------------------------- #


def ref_longbench_v2(response):  # LongBench v2 pred.py
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response)
    if match:
        return match.group(1)
    match = re.search(r"The correct answer is ([A-D])", response)
    return match.group(1) if match else None


def ref_code_line(prediction):  # LongBench metrics.code_sim_score, line selection
    for line in prediction.lstrip("\n").split("\n"):
        if ("`" not in line) and ("#" not in line) and ("//" not in line):
            return line
    return None


def ref_parse_output(output, prefix="Answer:"):  # HELMET utils.parse_output (None for "")
    def lstrip_string(s, sub):
        return re.sub(f"^{re.escape(sub)}", "", s, flags=re.IGNORECASE)

    patterns = [re.compile(f"(?:{prefix})(.*)(?:\n|$)", flags=re.IGNORECASE), re.compile(r"(?:^)(.*)(?:\n|$)")]
    for pat in patterns:
        matches = pat.search(output)
        if matches is not None:
            return lstrip_string(matches[1].strip(), prefix).strip() or None
    return None


# --------------------------------------------------------------------------------------------- #
# four-choice letters
# --------------------------------------------------------------------------------------------- #

CHOICE_CASES = [
    ("B", "B"),
    ("(B)", "B"),
    ("B.", "B"),
    ("B) The author disagrees with the critics.", "B"),
    ("[C]", "C"),
    ("D: because the passage says so", "D"),
    ("A\nThe first paragraph states ...", "A"),
    ("C - the lecture's main point", "C"),
    ("Answer: B", "B"),
    ("**Answer:** (C)", "C"),
    ("The answer is D.", "D"),
    ("The correct answer is (A) The professor's example.", "A"),
    ("To answer this question we need the third paragraph. The answer would be (D).", "D"),
    ("A careful reading shows the answer is C", "C"),
    ("I think option B is right.", "B"),
    ("The best choice is: A", "A"),
    ("Based on the passage, (C) is the most accurate.", "C"),
    ("I believe C.", "C"),
    ("Answer: Both statements are wrong", None),  # "B" of "Both" is not a choice
    ("A man is walking his dog.", None),  # the article is not option A
    ("The passage does not say.", None),
    ("E. The question is unanswerable.", None),  # E is not a choice without the IDK option
    ("", None),
    (None, None),
]


@pytest.mark.parametrize(("output", "expected"), CHOICE_CASES)
def test_choice_realistic_outputs(output, expected):
    assert choice([output]).item() == expected


def test_choice_idk_extension_and_series_io():
    outputs = pl.Series("completion", ["E. The question is unanswerable.", "Answer: E", "(E)", "B", "E"])
    got = choice(outputs, idk=True)
    assert got.name == "completion"
    assert got.to_list() == ["E", "E", "E", "B", "E"]
    assert choice(outputs).to_list() == [None, None, None, "B", None]


def test_choice_multi_for_coursera():
    outputs = ["A, C and D", "Answer: ABD", "The answers are B and C.\nA is wrong", "BD", "none of them"]
    assert choice(outputs, multi=True).to_list() == ["ACD", "ABD", "BC", "BD", None]


def test_choice_as_expression():
    df = pl.DataFrame({"completion": ["(C) foo", "Answer: A"]})
    assert df.select(choice(pl.col("completion")).alias("c"))["c"].to_list() == ["C", "A"]


# --------------------------------------------------------------------------------------------- #
# LongBench v2
# --------------------------------------------------------------------------------------------- #


def test_longbench_v2_realistic_outputs():
    outputs = [
        "The correct answer is (B)",
        "Let me think. ... **The correct answer is (C)**",
        "The correct answer is D. The author argues ...",
        "the correct answer is (B)",  # case-sensitive, as the official parser: invalid
        "I don't know the answer.",
        "The correct answer is (E)",
        None,
    ]
    assert longbench_v2(outputs).to_list() == ["B", "C", "D", None, None, None, None]
    assert longbench_v2(["The correct answer is (E)"], idk=True).item() == "E"


lb2_text = st.lists(
    st.sampled_from(
        ["The correct answer is ", "The correct answer is", "(", ")", "A", "B", "C", "D", "E", "*",
         "**", " ", "x", "\n"]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(lb2_text, min_size=1, max_size=20))
def test_longbench_v2_equals_official_parser(outputs):
    assert longbench_v2(outputs).to_list() == [ref_longbench_v2(o) for o in outputs]


# --------------------------------------------------------------------------------------------- #
# first word / first line / answer phrase
# --------------------------------------------------------------------------------------------- #


def test_first_word_toefl_outputs():
    outputs = ["B", "  **B.** The speaker implies ...", "C because the professor says", "** D", "(A)", "", "...", None]
    assert first_word(outputs).to_list() == ["B", "B", "C", "D", "A", None, None, None]
    assert first_word(["don't know"]).item() == "don't"


def test_first_line_outputs():
    outputs = [
        "Paragraph 3\nThe abstract matches paragraph 3 because ...",
        "\n\n  Location  \nThe question asks about a place.",
        "Sure!",
        "   \n",
        None,
    ]
    assert first_line(outputs).to_list() == ["Paragraph 3", "Location", "Sure!", None, None]


def test_answer_phrase_helmet_style():
    outputs = [
        "The passage describes his childhood.\nAnswer: in a small village\nHe later moved.",
        "Answer: Answer: Rome",
        "final answer: 1912",
        "Marie Curie",
        "",
    ]
    assert answer_phrase(outputs).to_list() == ["in a small village", "Rome", "1912", "Marie Curie", None]


phrase_text = st.lists(
    st.sampled_from(["Answer:", "answer:", "ANSWER: ", "Answer", " ", "\n", "Paris", "x", ":", "  y "]), max_size=10
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(phrase_text, min_size=1, max_size=20))
def test_answer_phrase_equals_helmet_parse_output(outputs):
    assert answer_phrase(outputs).to_list() == [ref_parse_output(o) for o in outputs]


# --------------------------------------------------------------------------------------------- #
# numeric, TREC, code
# --------------------------------------------------------------------------------------------- #


def test_numeric_gsm_outputs():
    outputs = [
        "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4, so 16 - 3 - 4 = 9. The answer is 18.",
        "The answer is $1,234.50.",
        "Answer: -5",
        "18",
        "It costs 1,000,000 dollars",
        "Temperature dropped to \u22127 degrees",
        "About 3,4 apples",
        "COVID-19 started in 2019",
        "The answer is 2.500",
        "approximately .5",
        "no number here",
        None,
    ]
    assert numeric(outputs).to_list() == [
        "18", "1234.5", "-5", "18", "1000000", "-7", "3", "19", "2.5", "0.5", None, None,
    ]


TREC_LABELS = ["Abbreviation", "Animal", "Date", "Other", "Other entity", "Individual", "Definition of something"]


def test_trec_label_outputs():
    outputs = [
        "Date",
        "Type: individual\nBecause the question asks who ...",
        "The question asks for an Animal, not a date.",
        "Other entity",
        "Definition of something.",
        "Another question type",  # "Other" inside "Another" is not a label
        "I am not sure.",
        None,
    ]
    assert trec_label(outputs, TREC_LABELS).to_list() == [
        "Date", "Individual", "Animal", "Other entity", "Definition of something", None, None, None,
    ]
    with pytest.raises(ValueError):
        trec_label(["x"], [])


def test_code_line_outputs():
    outputs = [
        "```python\n# complete the loop\n    total += x\n```",
        "\n\n    return self.cache[key]\n",
        "// TODO\n```",
        "    y = 1  # note\n    z = 2",
        None,
    ]
    assert code_line(outputs).to_list() == ["    total += x", "    return self.cache[key]", None, "    z = 2", None]


code_text = st.lists(
    st.sampled_from(["x = 1", "  return y", "# c", "// c", "```", "`a`", "\n", "\n", " ", "foo(", "/", "ab"]),
    max_size=10,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(code_text, min_size=1, max_size=20))
def test_code_line_equals_longbench(outputs):
    assert code_line(outputs).to_list() == [ref_code_line(o) for o in outputs]


# --------------------------------------------------------------------------------------------- #
# IDK
# --------------------------------------------------------------------------------------------- #


def test_is_idk_outputs():
    outputs = [
        "Unanswerable",
        "unanswerable.",
        "I don\u2019t know.",
        "I do not know the answer.",
        "This question cannot be answered based on the given passages.",
        "There is not enough information in the article.",
        "E. The question is unanswerable.",
        "E",
        "The correct answer is (E)",
        "The answer is B",
        "Paris",
        "",
        None,
    ]
    assert is_idk(outputs).to_list() == [True, True, True, True, True, True, True, False, False, False,
                                         False, False, False]
    assert is_idk(outputs, choice_idk=True).to_list() == [
        True, True, True, True, True, True, True, True, True, False, False, False, False,
    ]
    assert is_idk(["nobody knows"], patterns=[r"\bnobody knows\b"]).item() is True
    assert is_idk(["Unanswerable"], patterns=[]).item() is False


# --------------------------------------------------------------------------------------------- #
# registry
# --------------------------------------------------------------------------------------------- #


def test_registry_covers_table4():
    assert set(TABLE4_EXTRACTOR.values()) <= set(EXTRACTORS)
    assert EXTRACTORS["none"] is identity
    outputs = pl.Series(["(B) because", "Answer: 42"])
    assert EXTRACTORS[TABLE4_EXTRACTOR["Extract 4-choice answer"]](outputs).to_list() == ["B", None]
    assert EXTRACTORS[TABLE4_EXTRACTOR["Extract numeric answer"]](outputs).to_list() == [None, "42"]
    assert EXTRACTORS["trec"](["animal"], labels=TREC_LABELS).to_list() == ["Animal"]
    assert EXTRACTORS["none"](outputs).to_list() == outputs.to_list()


# 100-LongBench eval_trec.py cuts every prediction to prediction.lstrip('\n').split('\n')[0]; then
# utils/metrics.py acc_score takes re.search(r'\d+') and kv_retrieval_score the last UUID. By hand:
UUID_A = "1f2e3d4c-aaaa-bbbb-cccc-0123456789ab"
UUID_B = "11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize(("output", "number", "uuid", "line"), [
    ("12", "12", None, "12"),
    ("\n\nThe answer is 12 and 13\n7", "12", None, "The answer is 12 and 13"),   # first number, first line
    ("Paragraph 007.", "007", None, "Paragraph 007."),                               # as written
    ("I count\n5 passages", None, None, "I count"),                                 # the number is on line 2
    ("  \n5", None, None, "  "),                                                    # a blank first line
    (f"The value is {UUID_A}.", "1", UUID_A, f"The value is {UUID_A}."),             # a sentence around it
    (f"{UUID_A} or rather {UUID_B}\n{UUID_A}", "1", UUID_B, f"{UUID_A} or rather {UUID_B}"),  # the last one
    (f"{UUID_A.replace('-', '')}", "1", None, UUID_A.replace("-", "")),              # no hyphens: no UUID
    ("", None, None, None),
])
def test_longbench100_first_line_rules(output, number, uuid, line):
    assert first_line_number([output]).to_list() == [number]
    assert first_line_last_uuid([output]).to_list() == [uuid]
    assert raw_first_line([output]).to_list() == [line]


_UUID_RE = r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"


def ref_kv_retrieval_last_uuid(prediction):  # 100-LongBench utils/metrics.py kv_retrieval_score, first line
    uuids = re.findall(_UUID_RE, prediction.lstrip("\n").split("\n")[0])
    return uuids[-1] if uuids else None


@pytest.mark.parametrize("after", ["\u0301", "\u200d", "\u00bd", "\u00b2", "\u0663", "\u00e9", "\u3000", "\u2014"])
def test_kv_retrieval_word_boundary_is_pythons(after):
    """Next to a combining mark or ZWJ (word characters to the Rust engine, not to Python's
    ``re``) the official rule finds the UUID; next to ½ or ² (numbers to Python) it does not."""
    u = "0a1b2c3d-1111-2222-3333-444455556666"
    for text in (u + after, after + u, f"key {u}{after} and {u[:-1]}7"):
        assert first_line_last_uuid([text]).to_list() == [ref_kv_retrieval_last_uuid(text)], repr(text)
    assert first_line_last_uuid([u + "\u0301"]).to_list() == [u]


_HEX = "0123456789abcdefABCDEF"
_PIECES = st.one_of(
    st.text(alphabet=_HEX, min_size=4, max_size=12),
    st.just("-"), st.just(" "), st.just("\n"),
    st.sampled_from(["\u0301", "\u200d", "\u00bd", "\u00b2", "\u0663", "\u00e9", "_", "\u2060",
                     "\ufe0f", "\U0001F600"]),
    # unassigned in this Python's Unicode database (Cn) but assigned since: documented in python_word_boundaries
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cn")),
    st.builds(lambda a, b, c, d, e: f"{a}-{b}-{c}-{d}-{e}", *(st.text(alphabet=_HEX, min_size=n, max_size=n)
                                                              for n in (8, 4, 4, 4, 12))),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_kv_retrieval_last_uuid_equals_python_re(text):
    assert first_line_last_uuid([text]).to_list() == [ref_kv_retrieval_last_uuid(text)]


def test_python_word_class_is_letters_numbers_underscore():
    """Python's ``\\w`` equals ``[\\p{L}\\p{N}_]`` on every code point its Unicode database
    assigns: the premise of :func:`python_word_boundaries`."""
    import unicodedata

    cps = [chr(i) for i in range(0x110000) if not 0xD800 <= i <= 0xDFFF and unicodedata.category(chr(i)) != "Cn"]
    ours = pl.Series(cps).str.contains(r"^[\p{L}\p{N}_]$").to_list()
    differ = [hex(ord(c)) for c, o in zip(cps, ours) if o != bool(re.fullmatch(r"\w", c))]
    assert differ == []
