"""100-LongBench's eight tasks on the shipped fixtures: contract, validity of every sample,
gold scores the maximum, the QA prior-knowledge filter and the judge metrics."""

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from raylc.scoring.extract import EXTRACTORS
from raylc.scoring.judge import JUDGE_TEMPLATES, judge_sample_prompts, judge_sample_scores, parse_judgements
from raylc.scoring.metrics import METRICS
from raylc.suites.context import PoolError
from raylc.suites.longbench100 import (
    LONGBENCH100_TASKS,
    METRIC,
    QA_TASKS,
    LongBench100Suite,
    build_longbench100,
    longbench100_report,
    prior_knowledge_filter,
    star_options,
)
from raylc.suites.samples import SAMPLE_SCHEMA, check_samples

DATA = Path(__file__).resolve().parents[2] / "jobs" / "data" / "longbench100"
SOURCES, DISTRACTORS = str(DATA / "sources.jsonl"), str(DATA / "distractors.jsonl")
LENGTHS = [2048, 8192]
LABEL = re.compile(r"(?:^|\n\n)(?:Passage|Paragraph) (\d+):\n")


def suite(**kw) -> LongBench100Suite:
    args = dict(kind="longbench100", sources=SOURCES, distractors=DISTRACTORS, lengths=LENGTHS,
                base_lengths=[2048], samples_per_length=6)
    return LongBench100Suite(**{**args, **kw})


@pytest.fixture(scope="module")
def samples() -> pl.DataFrame:
    return build_longbench100(suite(), seed=11)


@pytest.fixture(scope="module")
def sources() -> pl.DataFrame:
    return pl.read_ndjson(SOURCES, infer_schema_length=None)


def passages(context: str) -> list[str]:
    parts = LABEL.split(context)
    assert parts[0] == "" and [int(x) for x in parts[1::2]] == list(range(1, len(parts) // 2 + 1))
    return parts[2::2]


def test_contract_and_lengths(samples):
    assert check_samples(samples).columns[: len(SAMPLE_SCHEMA)] == list(SAMPLE_SCHEMA)
    built = samples.filter(pl.col("length") > 0)
    assert built.group_by("task", "length").len()["len"].to_list() == [6] * 16
    assert set(built["task"]) == set(LONGBENCH100_TASKS)
    assert (built["context_tokens"] <= built["length"]).all()
    assert (built.filter(pl.col("length") == 8192)["context_tokens"] >= 0.95 * 8192).all()
    fills = longbench100_report(samples, suite())
    assert fills["skipped"].to_list() == [0] * 16 and fills["min_fill"].min() > 0.9
    # sample ids are stable across lengths for the source tasks
    for task in ("single_doc_qa", "multi_doc_sum"):  # every fixture source fits 2K: the same samples
        ids = built.filter(pl.col("task") == task).group_by("length").agg(pl.col("sample_id").sort())
        assert ids["sample_id"].to_list()[0] == ids["sample_id"].to_list()[1]


def test_deterministic_per_seed(samples):
    again = build_longbench100(suite(tasks=["kv_retrieval", "single_doc_qa"]), seed=11)
    other = build_longbench100(suite(tasks=["kv_retrieval", "single_doc_qa"]), seed=12)
    mine = samples.filter(pl.col("task").is_in(["kv_retrieval", "single_doc_qa"]))
    key = ["task", "length", "sample_id"]
    assert again.sort(key).equals(mine.sort(key))
    assert not other.sort(key)["context"].equals(mine.sort(key)["context"])


def test_gold_gets_the_max_score(samples):
    for (metric, extractor), group in samples.partition_by("metric", "extractor", as_dict=True).items():
        if metric in METRICS:
            pred = EXTRACTORS[extractor](group["gold"])
            assert METRICS[metric](pred, group["answers"]).to_list() == [1.0] * group.height, metric
    judged = samples.filter(pl.col("metric").is_in(list(JUDGE_TEMPLATES))).with_columns(prediction=pl.col("gold"))
    assert judge_sample_scores(judged, _fair_judge).to_list() == [1.0] * judged.height


def _fair_judge(prompts: pl.Series) -> pl.DataFrame:
    """Grades like a perfect judge on exact matches: full marks when the answer is one of the
    correct answers (QA) or the summary equals the expert summary, zero otherwise."""
    out = []
    for p in prompts:
        if "Correct answers: " in p:
            refs = json.loads(p.split("Correct answers: ")[1].split("\n")[0])
            answer = p.split("\nAnswer: ")[1].rstrip("\n")
            out.append('{"fluency": 2, "correctness": %d}' % (3 if answer in refs else 0))
        else:
            expert = p.split("Expert summary: ")[1].split("\n\nProvided summary: ")[0]
            given = p.split("\n\nProvided summary: ")[1].rstrip("\n")
            n = given.count(". ") + 1
            out.append('{"fluency": 1, "precision": %d, "sentence_count": %d}' % (n if given == expert else 0, n))
    return pl.DataFrame({"completion": out})


def test_kv_chain_resolves_to_the_answer(samples):
    for r in samples.filter(pl.col("task") == "kv_retrieval").iter_rows(named=True):
        pairs = dict(re.findall(r"The value of ([0-9a-f-]{36}) is ([0-9a-f-]{36})\.", r["context"]))
        assert len(pairs) == 3
        key = re.search(r"the value of ([0-9a-f-]{36}) is$", r["tail"]).group(1)
        assert pairs[key] == r["gold"] == r["answers"][0]
        # a chain: k1 -> k2 -> k3 -> k4, each pair in its own passage
        chain = [key]
        while chain[-1] in pairs:
            chain.append(pairs[chain[-1]])
        assert len(chain) == 4
        texts = passages(r["context"])
        for k, v in pairs.items():
            holders = [i + 1 for i, t in enumerate(texts) if f"The value of {k} is {v}." in t]
            assert len(holders) == 1 and holders[0] in r["gold_passages"]
        assert len(set(r["gold_passages"])) == 3


def test_star_counts_match_the_correct_option(samples):
    for r in samples.filter(pl.col("task") == "counting_stars").iter_rows(named=True):
        counts = [int(n) for n in re.findall(r"The little penguin counted (\d+) ★", r["context"])]
        options = dict(re.findall(r"\(([A-D])\) (\[[0-9, ]+\])", r["tail"]))
        assert len(counts) == 4 and len(options) == 4 and len(set(options.values())) == 4
        assert json.loads(options[r["answers"][0]]) == counts and r["gold"] == f"({r['answers'][0]})"
        texts = passages(r["context"])
        assert [i + 1 for i, t in enumerate(texts) if "little penguin counted" in t] == r["gold_passages"]


def test_star_options_are_distinct_distractors():
    rng = np.random.default_rng(0)
    for _ in range(200):
        counts = [int(x) for x in rng.choice(np.arange(1, 101), size=4, replace=False)]
        options = star_options(counts, rng)
        assert options[0] == counts and len({tuple(o) for o in options}) == 4
        assert sorted(options[1]) == sorted(counts) and sorted(options[3]) == sorted(counts)
        assert sum(a != b for a, b in zip(options[2], counts)) == 1


def test_passage_count_is_the_number_of_distinct_passages(samples):
    rows = samples.filter(pl.col("task") == "passage_count")
    for r in rows.iter_rows(named=True):
        texts = passages(r["context"])
        assert int(r["gold"]) == len(set(texts)) and r["n_passages"] == len(texts)
    assert (rows["n_passages"] > rows["gold"].cast(pl.Int64)).any()  # duplicates are there


def test_retrieved_passage_is_the_summarized_one(samples, sources):
    by_summary = {s: t for s, t in sources.filter(pl.col("group").is_null()).select("summary", "text").iter_rows()
                  if s is not None}
    for r in samples.filter(pl.col("task") == "passage_retrieval").iter_rows(named=True):
        texts = passages(r["context"])
        assert r["gold_passages"] == [int(r["gold"])]
        assert texts[int(r["gold"]) - 1] == by_summary[r["question"]]
        assert texts.count(by_summary[r["question"]]) == 1


def _item_docs(sources: pl.DataFrame, sample_id: str) -> list[str]:
    docs = sources.filter((pl.col("group") == sample_id) | (pl.col("id") == sample_id))
    return docs["text"].to_list()


def test_qa_gold_documents_present_and_answerable(samples, sources):
    for task in QA_TASKS:
        rows = samples.filter((pl.col("task") == task) & (pl.col("length") > 0))
        for r in rows.iter_rows(named=True):
            texts = passages(r["context"])
            docs = _item_docs(sources, r["sample_id"])
            assert sorted(texts[i - 1] for i in r["gold_passages"]) == sorted(docs)
            shown = ", ".join(str(i) for i in sorted(r["gold_passages"]))
            assert f"related with Passage {shown}. " in r["tail"] and r["question"] in r["tail"]
            assert any(a in d for a in r["answers"] for d in docs) and r["gold"] == r["answers"][0]
        probes = samples.filter((pl.col("task") == task) & (pl.col("length") == 0))
        assert set(probes["sample_id"]) == set(rows["sample_id"])
        assert (probes["context"] == "").all() and (probes["context_tokens"] == 0).all()
        assert all(q in t for q, t in probes.select("question", "tail").iter_rows())


def test_summary_gold_documents_present(samples, sources):
    for task in ("single_doc_sum", "multi_doc_sum"):
        for r in samples.filter(pl.col("task") == task).iter_rows(named=True):
            texts = passages(r["context"])
            docs = _item_docs(sources, r["sample_id"])
            assert sorted(texts[i - 1] for i in r["gold_passages"]) == sorted(docs)
            assert all(f"Passage {i}" in r["tail"] for i in r["gold_passages"])
            assert r["answers"] == [r["gold"]] and r["gold"] in sources["summary"].to_list()


def test_no_probe_rows_without_threshold():
    built = build_longbench100(suite(tasks=["single_doc_qa"], prior_knowledge_threshold=None,
                                     lengths=[2048], samples_per_length=2), seed=0)
    assert (built["length"] > 0).all()


def test_too_long_sources_are_counted_not_shortened(tmp_path):
    long_doc = " ".join(["The harbour ledger lists copper kettles."] * 500)  # ~3000 tokens
    rows = [{"id": f"q{i}", "text": long_doc if i == 0 else f"Short doc {i}. The answer is {i}.",
             "question": f"Q{i}?", "answers": [str(i)]} for i in range(3)]
    pl.DataFrame(rows).write_ndjson(tmp_path / "s.jsonl")
    s = suite(sources=str(tmp_path / "s.jsonl"), tasks=["single_doc_qa"], lengths=[2048, 4096],
              samples_per_length=3)
    built = build_longbench100(s, seed=0)
    report = longbench100_report(built, s)
    assert report["built"].to_list() == [2, 3] and report["skipped"].to_list() == [1, 0]
    assert "q0" not in built.filter(pl.col("length") == 2048)["sample_id"].to_list()


def test_pool_without_items_for_a_task(tmp_path):
    pl.DataFrame({"text": ["Doc."], "summary": ["S."]}).write_ndjson(tmp_path / "s.jsonl")
    with pytest.raises(PoolError, match=r"s\.jsonl: no ungrouped rows with 'question' \+ 'answers'"):
        build_longbench100(suite(sources=str(tmp_path / "s.jsonl"), tasks=["single_doc_qa"]), seed=0)


def test_prior_knowledge_filter():
    rows = []
    for task, sid, probe in [("single_doc_qa", "a", 0.9), ("single_doc_qa", "b", 0.2), ("multi_doc_qa", "c", None),
                             ("multi_doc_qa", "d", 0.6)]:
        rows.append((task, sid, 0, probe))
        rows += [(task, sid, L, 0.5) for L in (2048, 8192)]
    rows += [("kv_retrieval", "k", L, 1.0) for L in (2048, 8192)]
    scores = pl.DataFrame(rows, schema=["task", "sample_id", "length", "score"], orient="row")
    kept, dropped = prior_knowledge_filter(scores, 0.5)
    assert (kept["length"] > 0).all()
    assert sorted(set(kept["sample_id"])) == ["b", "c", "k"] and kept.height == 6
    assert dropped.rows() == [("multi_doc_qa", 2, 1), ("single_doc_qa", 2, 1)]
    kept_all, _ = prior_knowledge_filter(scores, None)
    assert kept_all.height == 10


def test_prior_knowledge_filter_is_eval_trec_py():
    """100-LongBench eval_trec.py: drop when the no-context score >= qa_filter, but never when the
    first line of the no-context answer contains 'unanswerable' (any case). By hand, threshold 0.5:
    a (0.5, "Paris") dropped; b (1.0, "UNANSWERABLE, but Paris") kept; c (1.0, "Paris\nunanswerable")
    dropped (the word is on line 2); d (0.49, "Paris") kept."""
    rows = []
    for sid, probe, said in [("a", 0.5, "Paris"), ("b", 1.0, "UNANSWERABLE, but Paris"),
                             ("c", 1.0, "Paris\nunanswerable"), ("d", 0.49, "Paris")]:
        rows.append(("single_doc_qa", sid, 0, probe, said))
        rows += [("single_doc_qa", sid, L, 1.0, "x") for L in (2048, 8192)]
    scores = pl.DataFrame(rows, schema=["task", "sample_id", "length", "score", "completion"], orient="row")
    kept, dropped = prior_knowledge_filter(scores, 0.5)
    assert sorted(set(kept["sample_id"])) == ["b", "d"]
    assert dropped.rows() == [("single_doc_qa", 4, 2)]


def test_judge_templates_and_parsing():
    frame = pl.DataFrame({"metric": ["judge_qa", "judge_sum"], "question": ["Who?", "Summarize."],
                          "answers": [["Ada", "A. L."], ["Expert text."]], "prediction": ["Ada", "Mine."]})
    qa, sm = judge_sample_prompts(frame).to_list()
    assert 'Correct answers: ["Ada", "A. L."]\nAnswer: Ada' in qa and "Question: Who?" in qa
    assert "Expert summary: Expert text.\n\nProvided summary: Mine." in sm
    replies = pl.Series(['ok {"fluency": 1, "correctness": 3}', "{'fluency': 1, 'precision': 2, 'sentence_count': 4}",
                         '{"fluency": 3, "correctness": 3}', '{"fluency": 1, "precision": 5, "sentence_count": 4}',
                         "no json", '{"fluency": 0, "precision": 0, "sentence_count": 0}'])
    metrics = pl.Series(["judge_qa", "judge_sum", "judge_qa", "judge_sum", "judge_qa", "judge_sum"])
    assert parse_judgements(replies, metrics).to_list() == [0.5, 0.5, None, None, None, 0.0]
    blank = frame.with_columns(prediction=pl.Series([None, "  "], dtype=pl.String))
    assert judge_sample_scores(blank, lambda p: pytest.fail("no judge call for blank predictions")).to_list() == [
        0.0, 0.0]


def test_the_judge_sees_the_first_line_only():
    """eval_trec.py cuts every prediction to ``lstrip('\\n').split('\\n')[0]`` before qa_model_score /
    sum_model_score: the QA and summary tasks use that extractor, and an empty first line scores 0
    without a judge call."""
    from raylc.sweep.stages import score_samples

    assert {t: METRIC[t][1] for t in QA_TASKS} == dict.fromkeys(QA_TASKS, "raw_first_line")
    assert METRIC["single_doc_sum"][1] == METRIC["multi_doc_sum"][1] == "raw_first_line"
    rows = pl.DataFrame({
        "task": ["single_doc_qa"] * 3, "sample_id": ["a", "b", "c"], "length": [2048] * 3, "metric": ["judge_qa"] * 3,
        "extractor": ["raw_first_line"] * 3, "question": ["Who?"] * 3, "answers": [["Ada"]] * 3,
        "completion": ["\n\nAda wrote it.\nThen more text.", "\n  \nAda", "Nobody"],
        "head": "", "context": "", "tail": "", "gold": "Ada", "followup": None, "max_tokens": 32,
        "followup_max_tokens": None})
    seen = []

    def judge(frame):
        seen.extend(frame["prediction"].to_list())
        return pl.Series([1.0] * frame.height)

    scored = score_samples(rows, judge)
    assert scored["prediction"].to_list() == ["Ada wrote it.", "  ", "Nobody"]
    assert seen == ["Ada wrote it.", "  ", "Nobody"]
