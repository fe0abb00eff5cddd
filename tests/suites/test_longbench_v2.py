import json
from pathlib import Path

import polars as pl
import pytest

from raylc.scoring.extract import EXTRACTORS
from raylc.spec import Job
from raylc.suites.longbench_v2 import (
    FIELDS,
    LongBenchV2DataError,
    LongBenchV2Suite,
    build_longbench_v2,
    load_longbench_v2,
    longbench_v2_report,
)
from raylc.suites.samples import check_samples
from raylc.sweep import stages as length
from raylc.text.tokenize import get_tokenizer

FIXTURE = Path(__file__).resolve().parents[2] / "jobs" / "data" / "longbench_v2" / "fixture.json"
JOB = Job(name="t")


def _suite(mode="zero_shot", data=FIXTURE):
    return LongBenchV2Suite(kind="longbench_v2", data=str(data), mode=mode)


def test_fixture_loads_in_both_released_formats(tmp_path):
    records = json.loads(FIXTURE.read_text())
    data = load_longbench_v2(str(FIXTURE))
    assert data.columns == list(FIELDS) and data.height == 12
    assert data.group_by("difficulty", "length").len()["len"].to_list() == [2] * 6  # every cell twice
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    assert load_longbench_v2(str(jsonl)).equals(data)


def _bad(tmp_path, records, name="bad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records) if name.endswith(".json") else "\n".join(json.dumps(r) for r in records))
    with pytest.raises(LongBenchV2DataError) as info:
        load_longbench_v2(str(path))
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_loader_errors_are_one_line_naming_file_record_and_field(tmp_path):
    good = json.loads(FIXTURE.read_text())
    no_answer = [dict(good[0]), {k: v for k, v in good[1].items() if k != "answer"}]
    assert "record 1 (_id='lb2-fx-02'): missing field 'answer'" in _bad(tmp_path, no_answer)
    bad_letter = [dict(good[0], answer="E")]
    assert ("record 0 (_id='lb2-fx-01'): field 'answer' must be one of A, B, C, D (got 'E')"
            in _bad(tmp_path, bad_letter))
    bad_difficulty = [dict(good[0]), dict(good[1]), dict(good[2], difficulty="medium")]
    assert "record 2 (_id='lb2-fx-03'): field 'difficulty'" in _bad(tmp_path, bad_difficulty)
    assert "field 'length' must be one of short, medium, long" in _bad(tmp_path, [dict(good[0], length="8k")])
    assert "field 'context' must be a string, got int" in _bad(tmp_path, [dict(good[0], context=5)])
    dup = [good[0], good[1], good[0]]
    assert "line 3: duplicate _id 'lb2-fx-01' (first at line 1)" in _bad(tmp_path, dup, "d.jsonl")
    assert "line 2: expected a JSON object, got list" in _bad(tmp_path, [good[0], [1, 2]], "l.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(good[0]) + "\n{\"_id\": \n")
    with pytest.raises(LongBenchV2DataError, match=r"broken.jsonl: line 2: invalid JSON at column"):
        load_longbench_v2(str(broken))
    with pytest.raises(LongBenchV2DataError, match=r"missing.json: no such file"):
        load_longbench_v2(str(tmp_path / "missing.json"))


def test_zero_shot_samples_follow_appendix_c():
    samples = build_longbench_v2(_suite(), seed=0)
    assert check_samples(samples).equals(samples)
    assert samples.height == 12 and samples["sample_id"].to_list() == [f"lb2-fx-{i:02d}" for i in range(1, 13)]
    assert {"domain", "sub_domain", "difficulty", "length_class"} <= set(samples.columns)
    tok = get_tokenizer(None)
    row = samples.row(2, named=True)
    assert row["length"] == row["context_tokens"] == tok.count(row["context"])
    prompt = row["head"] + row["context"] + row["tail"]
    assert prompt == (
        "Please read the following text and answer the question below.\n\n<text>\n"
        "Document 1: Kestrel Mills earned 40 million in 2021. Document 2: Kestrel Mills earned 10 percent more in "
        "2022 than in 2021. Document 3: In 2023 Kestrel Mills earned 6 million less than in 2022.\n</text>\n\n"
        "What is the correct answer to this question: How much did Kestrel Mills earn in 2023?\nChoices:\n"
        "(A) 38 million\n(B) 34 million\n(C) 44 million\n(D) 50 million\n\n"
        'Format your response as follows: "The correct answer is (insert answer here)".'
    )
    assert row["max_tokens"] == 128 and row["followup"] is None and row["followup_max_tokens"] is None
    assert (row["metric"], row["extractor"], row["answers"]) == ("longbench_v2", "longbench_v2", ["A"])
    assert build_longbench_v2(_suite(), seed=7).equals(samples)  # nothing random


#: THUDM/LongBench prompts/0shot_cot.txt and 0shot_cot_ans.txt, as the files have them (note "questions"
#: and the typographic apostrophe of "Let’s"); pred.py fills them with str.replace
OFFICIAL_ZERO_SHOT = ("Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
                      "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n"
                      "(C) $C_C$\n(D) $C_D$\n\nFormat your response as follows: \"The correct answer is (insert "
                      "answer here)\".")
OFFICIAL_COT = ("Please read the following text and answer the questions below.\n\n<text>\n$DOC$\n</text>\n\n"
                "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n"
                "(D) $C_D$\n\nLet\u2019s think step by step:")
OFFICIAL_COT_ANS = ("Please read the following text and answer the questions below.\n\nThe text is too long and "
                    "omitted here.\n\nWhat is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n"
                    "(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\nLet\u2019s think step by step: $COT$\n\nBased on the above, "
                    "what is the single, most likely answer choice? Format your response as follows: \"The correct "
                    "answer is (insert answer here)\".")


def _official(template: str, record: dict, cot: str = "") -> str:
    out = template.replace("$DOC$", record["context"].strip()).replace("$Q$", record["question"].strip())
    for c in "ABCD":
        out = out.replace(f"$C_{c}$", record[f"choice_{c}"].strip())
    return out.replace("$COT$", cot)


def test_cot_prompts_are_the_official_files_byte_for_byte():
    samples = build_longbench_v2(_suite("cot"), seed=0)
    records = {r["_id"]: r for r in json.loads(FIXTURE.read_text())}
    for row in samples.iter_rows(named=True):
        record = records[row["sample_id"]]
        assert row["head"] + row["context"] + row["tail"] == _official(OFFICIAL_COT, record)
        assert row["followup"] == _official(OFFICIAL_COT_ANS, record, "{completion}")
        assert (row["max_tokens"], row["followup_max_tokens"]) == (1024, 128)
    zero = build_longbench_v2(_suite(), seed=0)
    assert samples["context"].equals(zero["context"])


def test_the_answer_call_gets_the_stripped_reasoning_and_an_empty_one_stops(tmp_path):
    """pred.py: ``response = output.strip()`` goes in place of $COT$; ``if output == '': continue``."""
    samples = build_longbench_v2(_suite("cot"), seed=0).head(3)
    first = length.requests(samples, JOB).with_columns(
        completion=pl.Series(["  \n I think (B).\n\n", "", "Because."]), error=pl.lit(None, pl.String))
    second = length.requests(samples, JOB, first)
    assert second["sample_id"].to_list() == [samples["sample_id"][0], samples["sample_id"][2]]  # no call after ""
    assert "Let\u2019s think step by step: I think (B).\n\nBased on the above" in second["tail"][0]
    answered = second.with_columns(completion=pl.lit("The correct answer is (B)"), error=pl.lit(None, pl.String))
    final = length.final_completions(samples, first, answered)
    assert final["completion"].to_list() == ["The correct answer is (B)", "", "The correct answer is (B)"]
    assert final["error"].to_list() == [None, None, None]


def test_gold_extracts_to_the_answer():
    samples = build_longbench_v2(_suite(), seed=0)
    extracted = EXTRACTORS["longbench_v2"](samples["gold"])
    assert extracted.to_list() == samples["answers"].list.first().to_list()


# fixture order: (difficulty, length) = easy/short, easy/medium, easy/long, easy/short, easy/medium, easy/long,
# hard/short, hard/short, hard/medium, hard/medium, hard/long, hard/long; answers B C A D B C D B C A B D
PROBE_OUTPUTS = [
    "The correct answer is (B)",  # 01 correct
    "The correct answer is (A)",  # 02 wrong
    "I think it's A.",  # 03 invalid: no answer statement
    "The correct answer is D",  # 04 correct (letter without parentheses)
    "**The correct answer is (B)**",  # 05 correct (markdown removed)
    "the correct answer is (C)",  # 06 invalid: the official parser is case-sensitive
    "The correct answer is (C)",  # 07 wrong
    "The correct answer is (B)",  # 08 correct
    "",  # 09 invalid
    "The correct answer is (A)",  # 10 correct
    "The correct answer is (D)",  # 11 wrong
    "I cannot determine the answer.",  # 12 invalid
]


def test_report_accuracy_splits_and_compensated_score_are_exact():
    samples = build_longbench_v2(_suite(), seed=0)
    scores = samples.select(
        "difficulty", "length_class", "answers",
        prediction=EXTRACTORS["longbench_v2"](pl.Series(PROBE_OUTPUTS)),
    )
    assert scores["prediction"].null_count() == 4
    report = longbench_v2_report(scores)
    # by hand: correct = 01 04 05 08 10; invalid = 03 06 09 12
    expected = {  # split: (n, accuracy %, invalid %, compensated %)
        "overall": (12, 100 * 5 / 12, 100 * 4 / 12, 100 * (5 + 4 * 0.25) / 12),  # 41.67, 33.33, 50.0
        "easy": (6, 100 * 3 / 6, 100 * 2 / 6, 100 * (3 + 0.5) / 6),  # 01 04 05 right, 03 06 invalid
        "hard": (6, 100 * 2 / 6, 100 * 2 / 6, 100 * (2 + 0.5) / 6),  # 08 10 right, 09 12 invalid
        "short": (4, 75.0, 0.0, 75.0),  # 01 04 08 right, 07 wrong
        "medium": (4, 50.0, 25.0, 56.25),  # 05 10 right, 02 wrong, 09 invalid
        "long": (4, 0.0, 75.0, 18.75),  # 11 wrong, 03 06 12 invalid
    }
    assert report["split"].to_list() == list(expected)
    for row in report.iter_rows(named=True):
        n, acc, inv, comp = expected[row["split"]]
        assert row["n"] == n
        assert row["accuracy"] == pytest.approx(acc) and row["invalid"] == pytest.approx(inv)
        assert row["compensated"] == pytest.approx(comp)
    assert report.row(0, named=True)["compensated"] == pytest.approx(50.0)


def test_report_by_group_and_empty_split():
    scores = pl.DataFrame({
        "model": ["m1", "m1", "m2"], "difficulty": ["easy", "hard", "easy"], "length_class": ["short"] * 3,
        "prediction": ["A", None, "B"], "answer": ["A", "B", "A"],
    })
    report = longbench_v2_report(scores, by=["model"])
    assert report.height == 12
    m1 = {r["split"]: r for r in report.filter(pl.col("model") == "m1").iter_rows(named=True)}
    assert m1["overall"]["accuracy"] == 50.0 and m1["overall"]["compensated"] == 62.5
    assert m1["long"]["n"] == 0 and m1["long"]["accuracy"] is None
    m2 = {r["split"]: r for r in report.filter(pl.col("model") == "m2").iter_rows(named=True)}
    assert m2["hard"]["n"] == 0 and m2["easy"]["accuracy"] == 0.0
    with pytest.raises(ValueError, match="lack column 'prediction'"):
        longbench_v2_report(scores.drop("prediction"))


def test_empty_outputs_leave_the_denominators_as_pred_py_skips_them():
    """Output 09 is empty: pred.py writes no result for it, so overall is 5 right of 11 (45.45%),
    3 invalid (27.27%), compensated (5 + 0.75) / 11; ``empty_outputs: invalid`` keeps 12 rows."""
    samples = build_longbench_v2(_suite(), seed=0)
    scores = samples.with_columns(
        length=pl.lit(1), completion=pl.Series(PROBE_OUTPUTS),
        prediction=EXTRACTORS["longbench_v2"](pl.Series(PROBE_OUTPUTS)))
    skip = _suite()
    kept = skip.kept(scores)
    assert kept.filter(~pl.col("kept"))["sample_id"].to_list() == ["lb2-fx-09"]
    (_, heading, table), = skip.report_sections(kept)
    overall = table.row(0, named=True)
    assert heading.endswith("; 1 empty output(s) skipped, as pred.py does)")
    assert (overall["n"], overall["accuracy"], overall["invalid"], overall["compensated"]) == (11, 45.5, 27.3, 52.3)
    counted = LongBenchV2Suite(**{**skip.model_dump(), "empty_outputs": "invalid"})
    (_, heading, table), = counted.report_sections(counted.kept(scores))
    assert table.row(0, named=True)["n"] == 12 and "skipped" not in heading


def test_report_rounds_and_compensates_as_result_py():
    """result.py, worked by hand: 16 easy/short questions, 1 right, 1 invalid (pred None), 14 wrong:
    accuracy round(100 * 1 / 16, 1) = round(6.25, 1) = 6.2 (Python rounds half to even), compensated
    (result.py with ``compensated = True``: the invalid one counts 0.25) round(100 * 1.25 / 16, 1) = 7.8."""
    scores = pl.DataFrame({"difficulty": ["easy"] * 16, "length_class": ["short"] * 16,
                           "prediction": ["A", None] + ["B"] * 14, "answers": [["A"]] * 16})
    (_, _, table), = _suite().report_sections(scores)
    rows = {r["split"]: r for r in table.iter_rows(named=True)}
    assert (rows["overall"]["n"], rows["overall"]["accuracy"], rows["overall"]["invalid"],
            rows["overall"]["compensated"]) == (16, 6.2, 6.2, 7.8)
    assert rows["easy"] == {**rows["overall"], "split": "easy"} and rows["hard"]["n"] == 0
    assert rows["hard"]["accuracy"] is None


def _official_cut(raw, prompt: str, max_len: int) -> str:
    """``pred.py`` ``query_llm`` restated on a ``tokenizers`` tokenizer, as Hugging Face's calls it:
    ``encode`` adds the special tokens, ``decode(skip_special_tokens=True)``."""
    input_ids = raw.encode(prompt).ids
    if len(input_ids) > max_len:
        input_ids = input_ids[:max_len // 2] + input_ids[-max_len // 2:]
        prompt = raw.decode(input_ids, skip_special_tokens=True)
    return prompt


@pytest.mark.parametrize("max_len", [400, 401])
def test_a_prompt_over_max_length_is_cut_as_query_llm_cuts_it(tmp_path, max_len):
    """A Llama-style tokenizer (BOS added): the BOS takes one of the first half's tokens, the end
    takes the odd one, the halves are decoded as one; a prompt within the limit is untouched."""
    from doubles.model_dir import train_tokenizer
    from tokenizers import Tokenizer

    (tmp_path / "tokenizer.json").write_text(train_tokenizer("llama"))
    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    records = json.loads(FIXTURE.read_text())
    records[0]["context"] = " ".join(f"Line {i} of a long report says little." for i in range(60))
    data = tmp_path / "data.json"
    data.write_text(json.dumps(records))
    suite = LongBenchV2Suite(kind="longbench_v2", data=str(data), tokenizer=f"hf:{tmp_path / 'tokenizer.json'}",
                             max_length=max_len)
    samples = build_longbench_v2(suite, 0)
    for row in samples.iter_rows(named=True):
        record = next(r for r in records if r["_id"] == row["sample_id"])
        whole = _official(OFFICIAL_ZERO_SHOT, record)
        assert row["head"] + row["context"] + row["tail"] == _official_cut(raw, whole, max_len)
    first = samples.row(0, named=True)
    assert first["context_tokens"] < first["length"] and first["tail"].endswith("(insert answer here)\".")
    uncut = build_longbench_v2(suite.model_copy(update={"max_length": None}), 0)
    assert uncut["context"][0] == records[0]["context"].strip() != first["context"]
