import json
import re

import numpy as np
import polars as pl
import pytest

from raylc.scoring.extract import EXTRACTORS
from raylc.scoring.metrics import METRICS
from raylc.suites.context import PoolError
from raylc.suites.helmet_recall import (
    RULER_NOISE,
    HelmetRecallError,
    HelmetRecallSuite,
    build_helmet_recall,
    depth_grid,
)
from raylc.suites.samples import check_samples
from raylc.text.tokenize import get_tokenizer

LENGTHS = [200, 700, 3000]
SUITE = HelmetRecallSuite(kind="helmet_recall", lengths=LENGTHS, base_lengths=[200], samples_per_length=6)
TOK = get_tokenizer(None)
NEEDLE = re.compile(r"^One of the special magic (numbers|uuids) for (\S+) is: (\S+)\.$")


@pytest.fixture(scope="module")
def samples():
    return build_helmet_recall(SUITE, seed=11)


def _rows(samples, task):
    return list(samples.filter(pl.col("task") == task).iter_rows(named=True))


def test_contract_and_determinism(samples):
    assert check_samples(samples).equals(samples)
    assert samples.height == 4 * 6 * len(LENGTHS)
    assert build_helmet_recall(SUITE, seed=11).equals(samples)
    assert not build_helmet_recall(SUITE, seed=12)["context"].equals(samples["context"])
    tok_counts = [TOK.count(c) for c in samples["context"]]
    assert samples["context_tokens"].to_list() == tok_counts


def _units(row):
    if row["task"] == "json_kv":
        return ",\n ", row["context"][1:-1].split(",\n ")
    if row["task"] == "mv_needle":
        return " ", re.split(r"(?<=\.) ", row["context"])
    return "\n", row["context"].split("\n")


def test_never_over_target_and_within_one_unit_of_it(samples):
    for row in samples.iter_rows(named=True):
        assert row["context_tokens"] <= row["length"]
        sep, units = _units(row)
        unit = max(TOK.count(sep + u) for u in units)
        assert row["length"] - row["context_tokens"] <= unit + 1, (row["task"], row["length"])


def test_json_kv_value_is_in_the_json_at_the_sample_depth(samples):
    depths = depth_grid(6, SUITE.depths)
    for row in _rows(samples, "json_kv"):
        data = json.loads(row["context"])
        key = row["question"]
        assert data[key] == row["gold"] and row["answers"] == [row["gold"]]
        keys = list(data)
        i = int(row["sample_id"][-4:])
        assert row["depth"] == depths[i]
        assert keys.index(key) == round(row["depth"] * (len(keys) - 1))
        assert row["head"] == ""


def test_multikey_needle_once_and_noise_uses_other_keys(samples):
    for task, kind in (("mk_needle_number", "numbers"), ("mk_needle_uuid", "uuids")):
        for row in _rows(samples, task):
            key = re.search(r"special magic \w+ for (\S+) mentioned", row["tail"]).group(1)
            needles = [NEEDLE.match(line) for line in row["context"].split("\n")]
            assert all(m is not None and m.group(1) == kind for m in needles)
            gold = [i for i, m in enumerate(needles) if m.group(2) == key]
            assert len(gold) == 1 and needles[gold[0]].group(3) == row["gold"]
            assert gold[0] == round(row["depth"] * (len(needles) - 1))
            assert all(m.group(3) != row["gold"] for i, m in enumerate(needles) if i != gold[0])
            if kind == "numbers":
                assert re.fullmatch(r"\d{7}", row["gold"])
            else:
                assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", row["gold"])


def test_multivalue_needles_all_present_in_filler(samples):
    for row in _rows(samples, "mv_needle"):
        key = re.search(r"special magic numbers for (\S+) mentioned", row["tail"]).group(1)
        found = re.findall(rf"One of the special magic numbers for {re.escape(key)} is: (\d+)\.", row["context"])
        assert sorted(found) == sorted(row["answers"]) and len(set(found)) == 4
        rest = re.sub(r"One of the special magic numbers for \S+ is: \d+\.", "", row["context"])
        assert {s.strip() for s in re.findall(r"[^.]+\.", rest)} <= set(RULER_NOISE)
        assert row["depth"] is None and row["metric"] == "recall"


def test_sample_identity_across_lengths(samples):
    per_sample = samples.group_by("task", "sample_id").agg(pl.col("gold").n_unique(), pl.col("length").n_unique())
    assert (per_sample["gold"] == 1).all() and (per_sample["length"] == len(LENGTHS)).all()


def test_gold_scores_the_maximum_and_noise_does_not(samples):
    for metric, part in samples.group_by("metric"):
        extracted = EXTRACTORS["none"](part["gold"])
        assert (METRICS[metric[0]](extracted, part["answers"]) == 1.0).all()
        wrong = METRICS[metric[0]](pl.Series(["The value is 1234567"] * part.height), part["answers"])
        assert (wrong == 0.0).all()


def test_haystack_pool_is_the_multivalue_filler(tmp_path):
    pool = tmp_path / "pool.jsonl"
    docs = [f"Essay {i} starts here. It has a second line about topic {i}! And a question {i}?" for i in range(5)]
    pl.DataFrame({"text": docs}).write_ndjson(pool)
    suite = HelmetRecallSuite(kind="helmet_recall", tasks=["mv_needle"], lengths=[300], base_lengths=[300],
                              samples_per_length=2, haystack=str(pool))
    sentences = {s for d in docs for s in re.split(r"(?<=[.!?])\s+", d)}
    for row in build_helmet_recall(suite, seed=0).iter_rows(named=True):
        rest = re.sub(r"One of the special magic numbers for \S+ is: \d+\.", "|", row["context"])
        parts = [p for chunk in rest.split("|") for p in re.split(r"(?<=[.!?]) ", chunk.strip()) if p]
        assert set(parts) <= sentences
        assert row["context_tokens"] <= 300
    pl.DataFrame({"body": docs}).write_ndjson(tmp_path / "bad.jsonl")
    bad = suite.model_copy(update={"haystack": str(tmp_path / "bad.jsonl")})
    with pytest.raises(PoolError, match=r"bad.jsonl: missing field 'text' \(columns: body; "):
        build_helmet_recall(bad, seed=0)


def test_rulers_published_essay_file_is_a_haystack(tmp_path):
    """RULER publishes its essay haystack as ``PaulGrahamEssays.json``, one JSON object
    ``{"text": <the essays>}`` (``download_paulgraham_essay.py``: ``json.dump({"text": text}, f)``):
    read as it is, its sentences are the multi-value needle's filler."""
    essays = "How to start. Work on hard problems!\nWhy? Because they matter.\n\nThe second essay begins. It ends."
    (tmp_path / "PaulGrahamEssays.json").write_text(json.dumps({"text": essays}))
    suite = HelmetRecallSuite(kind="helmet_recall", tasks=["mv_needle"], lengths=[200], base_lengths=[200],
                              samples_per_length=1, haystack=str(tmp_path / "PaulGrahamEssays.json"))
    sentences = set(re.split(r"(?<=[.!?])\s+", essays.strip()))
    for row in build_helmet_recall(suite, seed=0).iter_rows(named=True):
        rest = re.sub(r"One of the special magic numbers for \S+ is: \d+\.", "|", row["context"])
        parts = [p for chunk in rest.split("|") for p in re.split(r"(?<=[.!?]) ", chunk.strip()) if p]
        assert parts and set(parts) <= sentences


def test_target_below_the_needle_is_a_one_line_error():
    suite = HelmetRecallSuite(kind="helmet_recall", tasks=["json_kv"], lengths=[10], base_lengths=[10],
                              samples_per_length=1)
    with pytest.raises(HelmetRecallError) as info:
        build_helmet_recall(suite, seed=0)
    assert "\n" not in str(info.value)
    assert re.fullmatch(r"helmet_recall task json_kv: target length 10 is below the \d+ tokens of the needles alone",
                        str(info.value))


def test_depth_grid_is_evenly_spaced_and_cycles():
    assert np.allclose(depth_grid(8, 6), [0, 0.2, 0.4, 0.6, 0.8, 1.0, 0, 0.2])
    assert np.allclose(depth_grid(2, 1), [0, 0])


def test_multikey_needles_are_scored_as_helmet_collects_them(samples):
    """HELMET scripts/collect_results.py reports ruler_niah_mk_2 / mk_3 with ruler_recall (RULER
    string_match_all: ``ref.lower() in pred.lower()``) and json_kv with substring_exact_match. By
    hand: a UUID written without hyphens, or a number with thousands separators, is a miss for
    ruler_recall, a hit for SubEM (which drops punctuation)."""
    assert dict(samples.select("task", "metric").unique().rows()) == {
        "json_kv": "subem", "mk_needle_number": "recall", "mk_needle_uuid": "recall", "mv_needle": "recall"}
    uuid, number = "1f2e3d4c-aaaa-bbbb-cccc-0123456789ab", "1234567"
    outputs = pl.Series([uuid.replace("-", ""), uuid.upper(), "1,234,567", f"It is {number}."])
    refs = [[uuid], [uuid], [number], [number]]
    assert METRICS["recall"](outputs, refs).to_list() == [0.0, 1.0, 0.0, 1.0]
    assert METRICS["subem"](outputs, refs).to_list() == [1.0, 1.0, 1.0, 1.0]


def test_prompts_are_helmet_load_ruler_and_load_json_kv(samples):
    """HELMET data.py, worked by hand: load_ruler's singular template for the multi-key needles
    (needle type "number" / "uuid", as RULER's niah.py makes it singular), its plural one for the
    multi-value needle, each ``user_template + "\\n" + system_template``; load_json_kv's
    ``{context}\\n\\nExtract ... below.\\n\\n{demos}Key: {question}`` + ``"\\nCorresponding value:"``."""
    number = _rows(samples, "mk_needle_number")[0]
    key = re.search(r"magic number for (\S+) mentioned", number["question"]).group(1)
    assert number["head"] == ("A special magic number is hidden within the following text. Make sure to memorize it. "
                              "I will quiz you about the number afterwards.\n")
    assert number["tail"] == (f"\nWhat is the special magic number for {key} mentioned in the provided text?\n"
                              f"The special magic number for {key} mentioned in the provided text is")
    assert number["question"] == f"What is the special magic number for {key} mentioned in the provided text?"
    uuid_row = _rows(samples, "mk_needle_uuid")[0]
    assert uuid_row["head"].startswith("A special magic uuid is hidden") and uuid_row["tail"].endswith("text is")
    multi = _rows(samples, "mv_needle")[0]
    key = re.search(r"magic numbers for (\S+) mentioned", multi["question"]).group(1)
    assert multi["head"] == ("Some special magic numbers are hidden within the following text. Make sure to memorize "
                             "it. I will quiz you about the numbers afterwards.\n")
    assert multi["tail"] == (f"\nWhat are all the special magic numbers for {key} mentioned in the provided text?\n"
                             f"The special magic numbers for {key} mentioned in the provided text are")
    assert multi["question"] == f"What are all the special magic numbers for {key} mentioned in the provided text?"
    kv = _rows(samples, "json_kv")[0]
    assert kv["head"] == "" and kv["context"].startswith("{") and kv["context"].endswith("}")
    assert kv["tail"] == ("\n\nExtract the value corresponding to the specified key in the JSON object below.\n\n"
                          f'Key: "{kv["question"]}"\nCorresponding value:')


def test_budgets_and_chat_template_are_helmet_recall_yaml(samples):
    """HELMET configs/recall.yaml: generation_max_length 50 (ruler_niah_mk_2), 100 (mk_3), 50 (mv),
    100 (json_kv); use_chat_template: false (raw prompts; ``chat_template: probe`` defers to the probe)."""
    assert dict(samples.select("task", "max_tokens").unique().rows()) == {
        "mk_needle_number": 50, "mk_needle_uuid": 100, "mv_needle": 50, "json_kv": 100}
    assert samples["raw_prompt"].all()
    probe = SUITE.model_copy(update={"chat_template": "probe", "tasks": ["json_kv"], "samples_per_length": 1})
    assert not build_helmet_recall(probe, seed=11)["raw_prompt"].any()
