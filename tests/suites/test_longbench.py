"""LongBench v1 as a protocol (issue 16): its prompts, lengths, metric map, first-line rule,
truncation and rounding, checked against figures the official ``eval.py`` produced outside the
project (``tests/data/longbench_v1/README.md`` has the commands)."""

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from raylc.scoring import metrics
from raylc.suites.longbench import (
    DATASET_MAXLEN,
    DATASET_METRIC,
    DATASET_PROMPTS,
    FIRST_LINE_DATASETS,
    NO_CHAT_DATASETS,
    LongBenchDataError,
    LongBenchSuite,
    build_longbench,
    load_longbench,
    longbench_report,
)
from raylc.suites.samples import check_samples
from raylc.sweep.stages import score_samples
from raylc.text.tokenize import get_tokenizer
from raylc.text.truncation import truncate_prompt_middle

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "jobs" / "data" / "longbench" / "fixture.jsonl"
OFFICIAL = ROOT / "tests" / "data" / "longbench_v1"


def _suite(**kw):
    return LongBenchSuite(kind="longbench", data=str(FIXTURE), **kw)


def test_prompts_and_lengths_are_the_config_files_byte_for_byte():
    # sha256 of json.dumps(json.load(f), ensure_ascii=False, sort_keys=True) of LongBench/config/dataset2prompt.json
    # and (ensure_ascii default) dataset2maxlen.json at THUDM/LongBench 2e00731f8d0bff23dc4325161044d0ed8af94c1e
    prompts = json.dumps(DATASET_PROMPTS, ensure_ascii=False, sort_keys=True).encode()
    assert hashlib.sha256(prompts).hexdigest() == "e7d865d712fe45e2455f5e864ac474001d7758d68d349e76ffbcdd382483358f"
    lengths = json.dumps(DATASET_MAXLEN, sort_keys=True).encode()
    assert hashlib.sha256(lengths).hexdigest() == "39a79d9491ead3dc8bcea6dbd8b963b29248eb4c344dde1e176b0a58b4e758a9"
    assert "Answer the question asconcisely as you can" in DATASET_PROMPTS["narrativeqa"]  # their typo, kept
    assert DATASET_PROMPTS["lcc"] == "Please complete the code given below. \n{context}Next line of code:\n"
    assert DATASET_MAXLEN["gov_report"] == 512 and DATASET_MAXLEN["hotpotqa"] == 32


def test_metric_map_and_first_line_rule_are_eval_py():
    assert set(DATASET_METRIC) == set(DATASET_PROMPTS) == set(DATASET_MAXLEN)
    assert FIRST_LINE_DATASETS == ("trec", "triviaqa", "samsum", "lsht")
    expected = {"multifieldqa_zh": "qa_f1_zh", "dureader": "rouge_zh", "vcsum": "rouge_zh",
                "gov_report": "rouge_longbench",
                "samsum": "rouge_longbench", "trec": "classification", "lsht": "classification", "triviaqa": "f1",
                "passage_count": "count", "passage_retrieval_en": "retrieval", "passage_retrieval_zh": "retrieval_zh",
                "lcc": "edit_sim", "repobench-p": "edit_sim", "narrativeqa": "f1"}
    assert {k: DATASET_METRIC[k] for k in expected} == expected
    assert all(m in metrics.METRICS for m in DATASET_METRIC.values())


def test_samples_are_pred_py_prompts():
    samples = build_longbench(_suite(), seed=0)
    assert check_samples(samples).equals(samples)
    records = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert samples.height == len(records) == 30
    by_id = {r["_id"]: r for r in records}
    tok = get_tokenizer(None)
    for row in samples.iter_rows(named=True):
        rec = by_id[row["sample_id"]]
        assert row["task"] == rec["dataset"]
        assert row["head"] + row["context"] + row["tail"] == DATASET_PROMPTS[rec["dataset"]].format(**rec)
        assert row["context"] == rec["context"] and row["length"] == row["context_tokens"] == tok.count(rec["context"])
        assert row["max_tokens"] == DATASET_MAXLEN[rec["dataset"]] and row["metric"] == DATASET_METRIC[rec["dataset"]]
        assert row["extractor"] == ("raw_first_line" if rec["dataset"] in FIRST_LINE_DATASETS else "none")
        assert row["answers"] == rec["answers"] and row["all_classes"] == rec["all_classes"]
    trec = samples.filter(pl.col("sample_id") == "lb1-fx-trec-1").row(0, named=True)
    assert trec["head"] == "Please determine the type of the question below. Here are some examples of questions.\n\n"
    assert trec["tail"] == "\nQuestion: Where is Mount Kilimanjaro ?\nType:"
    # a context holding braces is inserted as is (str.format never re-reads a value)
    assert build_longbench(_suite(datasets=["lcc"]), 0)["task"].unique().to_list() == ["lcc"]


def test_pred_py_sends_few_shot_and_code_datasets_without_the_chat_template():
    """LongBench/pred.py: ``if dataset not in ["trec", "triviaqa", "samsum", "lsht", "lcc",
    "repobench-p"]: prompt = build_chat(...)``; ``chat_template: probe`` gives every request the
    probe's setting; a raw request has its own request id."""
    from types import SimpleNamespace

    from raylc.sweep.stages import requests

    official = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}
    assert set(NO_CHAT_DATASETS) == official
    samples = build_longbench(_suite(), seed=0)
    raw = dict(samples.group_by("task").agg(pl.col("raw_prompt").unique()).iter_rows())
    assert {t for t, v in raw.items() if v == [True]} == official & set(raw) == {"trec", "triviaqa", "samsum", "lsht",
                                                                                 "lcc"}  # the fixture's
    assert all(v == [False] for t, v in raw.items() if t not in official)
    assert not build_longbench(_suite(chat_template="probe"), seed=0)["raw_prompt"].any()
    job = SimpleNamespace(probe_fingerprint=lambda: "fp")
    one = requests(samples.filter(pl.col("task") == "lcc"), job)
    two = requests(samples.filter(pl.col("task") == "lcc").with_columns(raw_prompt=pl.lit(False)), job)
    assert one["raw_prompt"].all() and set(one["request_id"]).isdisjoint(two["request_id"])
    qasper = samples.filter(pl.col("task") == "qasper")
    assert requests(qasper, job)["request_id"].equals(requests(qasper.drop("raw_prompt"), job)["request_id"])


def _predictions(samples: pl.DataFrame) -> pl.DataFrame:
    """The fixture predictions (pred.py's pred/<model>/<dataset>.jsonl, lines in data order) on the samples."""
    rows = []
    for path in sorted((OFFICIAL / "pred" / "fixture").glob("*.jsonl")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            rows.append({"task": path.stem, "index": i, "completion": json.loads(line)["pred"]})
    numbered = samples.with_columns(index=pl.int_range(pl.len()).over("task", order_by="record"))
    return numbered.join(pl.DataFrame(rows),
                         on=["task", "index"], how="inner").with_columns(error=pl.lit(None, pl.String))


def test_scores_equal_the_official_eval_py_on_the_fixture_predictions():
    samples = build_longbench(_suite(), seed=0)
    answered = _predictions(samples)
    assert answered.height == samples.height
    scores = score_samples(answered)
    expected = pl.read_ndjson(OFFICIAL / "expected_per_sample.jsonl").rename({"dataset": "task"})
    got = scores.join(expected, on=["task", "index"], how="inner", suffix="_official")
    assert got.height == samples.height
    assert got["score"].to_list() == got["score_official"].to_list()  # per sample, to the last bit
    report = longbench_report(scores)
    official = json.loads((OFFICIAL / "expected_result.json").read_text())
    assert dict(zip(report["task"], report["score"])) == official


def test_classification_score_keeps_eval_py_list_quirk():
    # LongBench classification_score removes from the list it walks, so the item after a removed
    # one is skipped: found [a, ab, abc, abcd] -> drops 'a' (then 'ab' is skipped), drops 'abc' -> [ab, abcd]
    classes = [["a", "ab", "abc", "abcd"]]
    assert metrics.classification(["abcd"], ["abcd"], classes).to_list() == [0.5]
    assert metrics.classification(["xyz"], ["abcd"], classes).to_list() == [0.0]
    assert metrics.classification(["Other location"], [["Other location"]],
                                  [["Location", "Other location", "Other"]]).to_list() == [1.0]


def test_number_metrics_compare_digit_strings():
    assert metrics.count_score(["5 of 5, not 05", "none", ""], ["5", "5", "5"]).to_list() == [2 / 3, 0.0, 0.0]
    assert metrics.retrieval(["Paragraph 12", "Paragraph 1 and 12"], ["Paragraph 12"] * 2).to_list() == [1.0, 0.5]
    assert metrics.retrieval_zh(["段落3", "答案：段落 3 或 段落4"], ["段落3"] * 2).to_list() == [1.0, 0.5]
    assert metrics.retrieval(["3"], ["no id here"]).to_list() == [0.0]


def test_chinese_metrics_segment_with_jieba():
    assert metrics.normalize_zh("Ａ，北京 。") == "ａ北京"  # full-width comma, ASCII space and 。 dropped, lower-cased
    assert metrics.qa_f1_zh(["北京。"], ["北京"]).to_list() == [1.0]
    # jieba: 我/爱/北京/天安门 vs 我/爱/北京: precision 3/4, recall 1 -> 6/7
    assert metrics.qa_f1_zh(["我爱北京天安门"], ["我爱北京"]).to_list() == [pytest.approx(6 / 7, abs=0)]
    assert metrics.rouge_zh([""], ["北京"]).to_list() == [0.0]  # the rouge package raises on an empty hypothesis


def test_rouge_is_the_rouge_package_not_rouge_score():
    pred, ref = "Amy hasn't fed the cat yet.", "Amy has not fed the cat yet."
    official = 0.7692307642603551  # eval.py rouge_score on this pair (tests/data/longbench_v1: samsum index 2)
    assert metrics.rouge_longbench([pred], [ref]).to_list() == [official]
    assert metrics.rouge_l([pred], [ref]).to_list() != [official]
    assert metrics.rouge_longbench([""], ["x"]).to_list() == [0.0]


def test_truncation_keeps_the_prompts_first_and_last_halves():
    tok = get_tokenizer(None)
    head, context, tail = "Read.\n", " ".join(f"w{i}" for i in range(40)), "\nQ?"
    ids = tok.encode(head + context + tail)
    out = truncate_prompt_middle(head, context, tail, tok, 11)
    cut = tok.decode(ids[:5]) + tok.decode(ids[-5:])
    assert "".join(out) == cut and out[0] == head and out[2] == tail
    assert truncate_prompt_middle(head, "short", tail, tok, 100) == (head, "short", tail)
    assert truncate_prompt_middle("h " * 20, context, tail, tok, 6)[0] == ""  # the cut fell in the head: one piece
    samples = build_longbench(_suite(max_length=40, datasets=["hotpotqa"]), 0)
    assert (samples["context_tokens"] < samples["length"]).all()
    assert all(tok.count(h + c + t) <= 40 for h, c, t in samples.select("head", "context", "tail").iter_rows())


def _bad(tmp_path, records):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records), encoding="utf-8")
    with pytest.raises(LongBenchDataError) as info:
        load_longbench(str(path))
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    return str(info.value)


def test_loader_errors_are_one_line_naming_file_record_and_field(tmp_path):
    good = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert load_longbench(str(FIXTURE))["record"].to_list() == list(range(30))
    assert "line 1 (_id='lb1-fx-hotpotqa-1'): missing field 'all_classes'" in _bad(
        tmp_path, [{k: v for k, v in good[0].items() if k != "all_classes"}])
    assert "unknown dataset 'nq'" in _bad(tmp_path, [dict(good[0], dataset="nq")])
    assert "field 'answers' must be a list of strings" in _bad(tmp_path, [dict(good[0], answers="Dijon")])
    assert ("line 2: duplicate _id 'lb1-fx-hotpotqa-1' in dataset 'hotpotqa' (first at"
            in _bad(tmp_path, [good[0], good[0]]))
    with pytest.raises(LongBenchDataError, match="missing.jsonl: no such file"):
        load_longbench(str(tmp_path / "missing.jsonl"))
    with pytest.raises(LongBenchDataError, match="dataset 'qasper' of suite.datasets has no records"):
        build_longbench(_suite(datasets=["qasper"]), 0)



def test_documents_suite_reads_the_released_format_with_dolce_table_4_units():
    from raylc.suites.documents import DocumentsSuite, build_documents
    from raylc.suites.longbench import DOLCE_UNITS

    problems = build_documents(DocumentsSuite(kind="documents", data=str(FIXTURE), task_units={"lcc": "b"}), 0)
    records = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert problems["problem_id"].to_list() == [r["_id"] for r in records]
    assert problems["task"].to_list() == [r["dataset"] for r in records]
    assert problems["question"].to_list() == [r["input"] for r in records]
    assert problems["answers"].to_list() == [r["answers"] for r in records]
    specs = dict(problems.select("task", "unit_spec").unique().iter_rows())
    assert specs == {**{t: DOLCE_UNITS[t] for t in specs}, "lcc": "b"}  # Table 4's unit unless the job names one
    assert (DOLCE_UNITS["hotpotqa"], DOLCE_UNITS["trec"], DOLCE_UNITS["triviaqa"],
            DOLCE_UNITS["samsum"]) == ("b", "c", "q", "u")
    hotpot = problems.filter(pl.col("task") == "hotpotqa").row(0, named=True)
    assert hotpot["L"] == 3 and hotpot["units"][1].startswith("Passage 2:")  # blank-line blocks: the three passages


@pytest.mark.ray
def test_cli_run_of_the_shipped_job_reports_the_official_scores(ray_session, tmp_path):
    from typer.testing import CliRunner

    from raylc.cli import app

    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["run", str(ROOT / "jobs" / "longbench.yaml"), "--store", str(store),
                                      "--run-id", "lb", "--set", "ray.no_progress_timeout_s=300"])
    assert result.exit_code == 0, result.output
    scores = pl.read_parquet(store / "lb" / "score" / "scores.parquet").sort("record")
    # the run's completions are the predictions the official eval.py scored (pred/simulated, README)
    for (task,), group in scores.group_by("task", maintain_order=True):
        shipped = (OFFICIAL / "pred" / "simulated" / f"{task}.jsonl").read_text(encoding="utf-8").splitlines()
        assert group["completion"].to_list() == [json.loads(line)["pred"] for line in shipped]
    report = pl.read_parquet(store / "lb" / "report" / "longbench.parquet")
    official = json.loads((OFFICIAL / "expected_result_simulated.json").read_text())
    assert dict(zip(report["task"], report["score"])) == official
    assert "## LongBench" in (store / "lb" / "report" / "summary.md").read_text()


def test_code_matcher_chooses_fuzzywuzzys_matcher_for_the_code_datasets():
    """suite.code_matcher: difflib (LongBench/requirements.txt installs no python-Levenshtein, the
    default) or levenshtein; the pair of tests/scoring/test_metrics.py worked by hand: 13 and 22."""
    lcc = build_longbench(_suite(datasets=["lcc"]), seed=0)
    assert set(lcc["metric"]) == {"edit_sim"}
    lev = build_longbench(_suite(datasets=["lcc", "hotpotqa"], code_matcher="levenshtein"), seed=0)
    assert dict(lev.select("task", "metric").unique().iter_rows()) == {"lcc": "edit_sim_levenshtein", "hotpotqa": "f1"}
    pred, ref = ["Unanswerable"], ["    return len(text.splitlines())"]
    assert metrics.METRICS["edit_sim"](pred, ref).item() == 0.13
    assert metrics.METRICS["edit_sim_levenshtein"](pred, ref).item() == 0.22


def test_the_cut_counts_a_models_bos_as_pred_py_does(tmp_path):
    """``pred.py``'s ``tokenizer(prompt).input_ids`` holds a Llama-style BOS: a prompt one text
    token over ``max_length - 1`` is cut, the BOS takes one of the first half's tokens and is not
    decoded (``skip_special_tokens=True``)."""
    from doubles.model_dir import train_tokenizer
    from tokenizers import Tokenizer

    (tmp_path / "tokenizer.json").write_text(train_tokenizer("llama"))
    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok = get_tokenizer(f"hf:{tmp_path / 'tokenizer.json'}")
    head, tail = "Read the passage.\n\n", "\n\nQuestion: who wrote it?\nAnswer:"
    context = " ".join(f"Line {i} of the report." for i in range(40))
    for max_length in (tok.count(head + context + tail), tok.count(head + context + tail) + 1, 60, 61):
        tokenized_prompt = raw.encode(head + context + tail).ids  # pred.py, restated
        prompt = head + context + tail
        if len(tokenized_prompt) > max_length:
            half = int(max_length / 2)
            prompt = (raw.decode(tokenized_prompt[:half], skip_special_tokens=True)
                      + raw.decode(tokenized_prompt[-half:], skip_special_tokens=True))
        assert "".join(truncate_prompt_middle(head, context, tail, tok, max_length)) == prompt
