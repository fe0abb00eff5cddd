"""100-LongBench's eight tasks on the shipped fixtures: contract, validity of every sample,
gold scores the maximum, the QA prior-knowledge filter and the judge metrics."""

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from raylc.scoring.extract import EXTRACTORS
from raylc.scoring.judge import JUDGE_TEMPLATES, judge_sample_prompts, judge_sample_scores, parse_judgement
from raylc.scoring.metrics import METRICS
from raylc.suites.context import PoolError
from raylc.suites.longbench100 import (
    LONGBENCH100_TASKS,
    MAX_TOKENS,
    METRIC,
    NO_CONTEXT_QA,
    PROMPTS,
    QA_TASKS,
    LongBench100Suite,
    build_longbench100,
    longbench100_report,
    prior_knowledge_filter,
    star_options,
    stars_question,
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
    """Grades like a perfect judge on exact matches: full marks when the answer is the correct
    answer (QA) or the summary equals the expert summary, zero otherwise; every text is fluent."""
    out = []
    for p in prompts:
        if "\nCorrect answers: " in p:
            ref, answer = re.search(r"\nCorrect answers: (.*)\nAnswer: (.*)\n\Z", p, re.DOTALL).groups()
            out.append('{"fluency": 2, "correctness": %d}' % (3 if answer == ref else 0))
        elif '\n\nProvided summary: "' in p:
            fields = p.rsplit('\n\nExpert summary: "', 1)[1].removesuffix('"\n')
            expert, given = fields.split('"\n\nProvided summary: "')
            n = given.count(". ") + 1
            out.append('{"precision": %d, "sentence_count": %d}' % (n if given == expert else 0, n))
        else:
            out.append('{"fluency": 1}')
    return pl.DataFrame({"completion": out})


def test_kv_chain_resolves_to_the_answer(samples):
    for r in samples.filter(pl.col("task") == "kv_retrieval").iter_rows(named=True):
        pairs = dict(re.findall(r"The value of ([0-9a-f-]{36}) is ([0-9a-f-]{36})\.", r["context"]))
        assert len(pairs) == 3
        key = re.search(r"the value of ([0-9a-f-]{36}) is $", r["tail"]).group(1)
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
        assert "\n1. unanswerable\n" in r["tail"]
        options = dict(re.findall(r"\n([2-5])\. (\[[0-9, ]+\])", r["tail"]))
        assert len(counts) == 4 and len(options) == 4 and len(set(options.values())) == 4
        assert json.loads(options[r["answers"][0]]) == counts and r["gold"] == r["answers"][0]
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
            shown = ",".join(str(i) for i in sorted(r["gold_passages"]))
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


class _Order:
    """A stand-in rng whose permutation is fixed (the shuffle of a worked example)."""

    def __init__(self, order):
        self.order = order

    def permutation(self, n):
        assert n == len(self.order)
        return np.array(self.order)


def test_prompts_are_dataset2prompt_json_byte_for_byte():
    """uservan/100-LongBench config/dataset2prompt.json and dataset2maxlen.json, transcribed by hand
    (the space after kv_retrieval's {input} and after qa_old's "Answer:\\n" included)."""
    qa = ("Answer the question based on the given passages. Only give me the answer and do not output any other "
          "words.\n\nThe following are given passages and these passages are from many different fields.\n\n"
          "{context}\n\nAnswer the question based on the given passages following the instruction: \n"
          "{instruction}\n\nQuestion: {input}\nOnly give me the answer and do not output any other words. "
          "Answer:\n")
    summary = ("You are given several passages as follows, but not all of them need to be summarized.\n\n{context}"
               "\n\nPlease follow these instructions:\n1.{input}\n2.Ignore and do not summarize any passages not "
               "listed above.\n3.")
    assert PROMPTS == {
        "kv_retrieval": "There are some passages below sourced from many different fields.\n\n{context}\n\nGiven "
                        "several key-value pairs in these passages, you need to find the value of the key. Read the "
                        "question related with these key-value pairs and give the correct answer. {input} ",
        "counting_stars": "There are some passages below sourced from many different fields.\n\n{context}\n\nOnly "
                          "output the results without any explanation. Read the following question and give the "
                          "correct answer: {input}\nThe final answer is: ",
        "passage_retrieval": "Here are some passages from many different fields, along with an summarization. Please "
                             "determine which passage the summarization is from.\n\n{context}\n\nThe following is "
                             "a summarization.\n\n{input}\n\nPlease enter the number of the passage that the "
                             "summarization is from. The answer format must be like \"Passage 1\", \"Passage 2\", "
                             "etc.\n\nThe answer is Passage ",
        "passage_count": "There are some paragraphs below sourced from many different fields. Some of them may be "
                         "duplicates. Please carefully read these paragraphs and determine how many unique paragraphs "
                         "there are after removing duplicates. In other words, how many non-repeating paragraphs are "
                         "there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after "
                         "removing duplicates. The output format should only contain the number, such as 1, 2, 3, "
                         "and so on.\n\nThe final answer is: ",
        "single_doc_qa": qa,
        "multi_doc_qa": qa,
        "single_doc_sum": summary + "For the selected passages, the summary should include: the main arguments or "
                          "conclusions of each article, the key evidence or supporting data presented and any unique "
                          "or innovative points made in the passages.\n4.The summary should be concise, focusing only "
                          "on the most important information from the passages. Now, please generate the summary for "
                          "the specified passage, following the instructions carefully.\nSummary:\n",
        "multi_doc_sum": summary + "All the selected passages should be summarized into a few short sentences and do "
                         "not summarize each selected passages separately. The summary should include: the main "
                         "arguments or conclusions of each article, the key evidence or supporting data presented "
                         "and any unique or innovative points made in the passages.\n4.The summary should be concise, "
                         "focusing only on the most important information from the passages. Now, please combine and "
                         "summarize the main ideas from the selected relevant passages into one cohesive summary, "
                         "following the instructions carefully.\n\nSummary:\n",
    }
    assert NO_CONTEXT_QA == (
        "Answer the question as concisely as you can, using a single phrase or sentence if possible. If the question "
        "cannot be answered, write \"unanswerable\". Do not provide any explanation. Question: {input}\nOnly give "
        "me the answer and do not output any other words. Answer:\n ")
    assert MAX_TOKENS == {"multi_doc_qa": 256, "single_doc_qa": 256, "single_doc_sum": 512, "multi_doc_sum": 512,
                          "passage_count": 32, "passage_retrieval": 32, "kv_retrieval": 64, "counting_stars": 32}


def test_inputs_and_instructions_are_data_utils_py(samples):
    """utils/data_utils.py: kv "Answer: the value of <k1> is"; single-doc QA "Answer the question related
    with Passage 3. ", multi-doc QA "Passage 2,5. " (a bare comma); "Write a one-page summary of Passage 3
    into a few short sentences."; multi-doc summary "...cohesive summary: Passage 1,Passage 4."."""
    kv = _rows_of(samples, "kv_retrieval")[0]
    assert re.fullmatch(r"Answer: the value of [0-9a-f-]{36} is", kv["question"])
    assert kv["tail"].endswith(f"give the correct answer. {kv['question']} ")
    for task in QA_TASKS:
        for r in _rows_of(samples, task):
            shown = ",".join(str(i) for i in sorted(r["gold_passages"]))
            assert f"instruction: \nAnswer the question related with Passage {shown}. \n\nQuestion: " in r["tail"]
    multi = [r for r in _rows_of(samples, "multi_doc_qa") if len(r["gold_passages"]) > 1]
    assert multi and all(re.search(r"related with Passage \d+(,\d+)+\. \n", r["tail"]) for r in multi)
    for r in _rows_of(samples, "single_doc_sum"):
        passage = r["gold_passages"][0]
        assert r["question"] == f"Write a one-page summary of Passage {passage} into a few short sentences."
    for r in _rows_of(samples, "multi_doc_sum"):
        listed = ",".join(f"Passage {i}" for i in sorted(r["gold_passages"]))
        assert r["question"] == ("Combine and summarize the main ideas from the selected relevant passages into one "
                                 f"cohesive summary: {listed}.")
        assert "\n1." + r["question"] + " \n2." not in r["tail"] and "\n1." + r["question"] + "\n2." in r["tail"]


def _rows_of(samples, task):
    return list(samples.filter((pl.col("task") == task) & (pl.col("length") > 0)).iter_rows(named=True))


def test_counting_stars_question_and_answer_are_data_utils_py():
    """generate_dataset_counting_stars (test_type "Acquisition"), worked by hand: the four lists
    shuffled (here to options 2, 0, 3, 1) after "unanswerable", numbered from 1; the answer is the
    correct list's number, "3". acc_score on the first line: the first \\d+ must equal "3"."""
    options = [[38, 10, 90, 42], [10, 38, 90, 42], [38, 10, 7, 42], [38, 42, 90, 10]]
    question, number = stars_question(options, _Order([2, 0, 3, 1]))
    assert number == "3"
    assert question == (
        "On this moonlit and misty night, the little penguin is looking up at the sky and concentrating on counting "
        "★. Please help the little penguin collect the number of ★, for example: [x, x, x,...]. The summation is not "
        "required, and the numbers in [x, x, x,...]. represent the counted number of ★ by the little penguin.\n"
        "Question: Which of the following is the correct number of ★ the little penguin collect?\n"
        "1. unanswerable\n2. [38, 10, 7, 42]\n3. [38, 10, 90, 42]\n4. [38, 42, 90, 10]\n5. [10, 38, 90, 42]\n"
        "Please provide your answer as a single number (1, 2, 3, 4 ...) without any explanation.")
    assert METRIC["counting_stars"] == ("accuracy", "first_line_number")
    outputs = ["3", "\n3. [38, 10, 90, 42]", "[38, 10, 90, 42]", "Option 3", "2\n3", "The answer is 3"]
    got = METRICS["accuracy"](EXTRACTORS["first_line_number"](outputs), [[number]] * len(outputs))
    assert got.to_list() == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_judge_prompts_are_metrics_py_byte_for_byte():
    """utils/metrics.py judge_prompt, fluency_prompt and precision_prompt after str.format's {{ -> {:
    SHA-256 of the official strings (computed from the file), their lengths and ends."""
    import hashlib

    from raylc.scoring.judge import JUDGE_FLUENCY_TEMPLATE, JUDGE_PRECISION_TEMPLATE, JUDGE_QA_TEMPLATE

    digest = {name: hashlib.sha256(t.encode()).hexdigest() for name, t in (
        ("qa", JUDGE_QA_TEMPLATE), ("fluency", JUDGE_FLUENCY_TEMPLATE), ("precision", JUDGE_PRECISION_TEMPLATE))}
    assert digest == {"qa": "d61cb8e53e3225e36d55c9af1872bbabc2e4039fe84e6989b651809ebb4eb285",
                      "fluency": "cd4f7af4ac43f78592153a68193e372eb83234df7bebb23263be23e5e24e79b6",
                      "precision": "082aec7e907132f7cb0b5c406524ae76713bdea94cc7a4e180b8a74738c2b82e"}
    assert [len(JUDGE_QA_TEMPLATE), len(JUDGE_FLUENCY_TEMPLATE), len(JUDGE_PRECISION_TEMPLATE)] == [2070, 2412, 9976]
    assert JUDGE_QA_TEMPLATE.endswith('{"fluency": 0, "correctness": 1}.\n\nQuestion: {question}\n'
                                      "Correct answers: {correct_answers}\nAnswer: {parsed_output}\n")
    assert JUDGE_FLUENCY_TEMPLATE.endswith('json format: {"fluency": 1}.\n\nText: "{text}"\n')
    assert JUDGE_PRECISION_TEMPLATE.endswith('{"precision": 2, "sentence_count": 6}.\n\nExpert summary: '
                                             '"{expert_summary}"\n\nProvided summary: "{summary}"\n')


def test_judge_calls_and_scores_are_metrics_py():
    """qa_model_score / sum_model_score and eval_trec.py's max over answers, worked by hand:
    row 0 (QA, two answers): one call per answer, 2 x 1 / 6 and 2 x 3 / 6 -> 1.0; row 1: a reply with
    single quotes is not JSON -> 0; row 2: "fluency": null counts 0; row 3: no JSON -> 0; row 4
    (summary): fluency 1, the precision reply's last {...} does not parse, its ```json block gives
    2 / 3; row 5: sentence_count 0 -> 0; row 6: an empty prediction scores 0 without a call; row 7:
    a blank but non-empty one is judged (len(prediction) != 0)."""
    frame = pl.DataFrame({
        "metric": ["judge_qa"] * 4 + ["judge_sum"] * 2 + ["judge_qa"] * 2,
        "question": ["Who?", "Q1", "Q2", "Q3", "Summarize.", "Summarize.", "Q4", "Q5"],
        "answers": [["Ada Lovelace", "Lovelace"], ["a"], ["b"], ["c"], ["Expert text."], ["Other text."], ["d"],
                    ["e"]],
        "prediction": ["Ada", "x1", "x2", "x3", "  Mine.  ", "Yours.", "", "  "]})
    calls = judge_sample_prompts(frame)
    assert calls.select("row", "kind").rows() == [(0, "qa"), (0, "qa"), (1, "qa"), (2, "qa"), (3, "qa"),
                                                  (4, "fluency"), (4, "precision"), (5, "fluency"), (5, "precision"),
                                                  (6, "qa"), (7, "qa")]
    prompts = calls["judge_prompt"].to_list()
    assert prompts[1].endswith("\n\nQuestion: Who?\nCorrect answers: Lovelace\nAnswer: Ada\n")
    assert prompts[5].endswith('\n\nText: "Mine."\n')
    assert prompts[6].endswith('\n\nExpert summary: "Expert text."\n\nProvided summary: "Mine."\n')
    replies = {prompts[0]: 'Partly. {"note": 1} then {"fluency": 2, "correctness": 1}',
               prompts[1]: '{"fluency": 2, "correctness": 3}',
               prompts[2]: "{'fluency': 2, 'correctness': 3}",
               prompts[3]: '{"fluency": null, "correctness": 3}',
               prompts[4]: "fluency 2, correctness 3",
               prompts[5]: 'Fine. {"fluency": 1}',
               prompts[6]: '```json\n{"precision": 2, "sentence_count": 3}\n```\nSee {above}',
               prompts[7]: '{"fluency": 1}',
               prompts[8]: '{"precision": 0, "sentence_count": 0}',
               prompts[10]: '{"fluency": 1, "correctness": 3}'}
    asked = []

    def generate(batch):
        asked.extend(batch.to_list())
        return pl.DataFrame({"completion": [replies[p] for p in batch]})

    scores = judge_sample_scores(frame, generate).to_list()
    assert scores == pytest.approx([1.0, 0.0, 0.0, 0.0, 2 / 3, 0.0, 0.0, 0.5])
    assert prompts[9] not in asked and len(asked) == 10
    assert parse_judgement("{'fluency': 1}", "fluency") is None
    failed = judge_sample_scores(frame.head(2), lambda b: pl.DataFrame({"completion": [None] * len(b)}))
    assert failed.to_list() == [None, None]  # a failed call: not scored (metrics.py would count 0)


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


def test_threshold_zero_filters_nothing_as_eval_trec_py():
    """eval_trec.py ``scorer`` filters only ``if qa_filter>0``: at 0 every sample counts (a
    ``score >= 0`` rule would drop every probed sample), and no no-context rows are built."""
    rows = [("single_doc_qa", sid, L, s) for sid, s in (("a", 0.0), ("b", 1.0)) for L, s in ((0, s), (2048, 0.5))]
    scores = pl.DataFrame(rows, schema=["task", "sample_id", "length", "score"], orient="row")
    kept, dropped = prior_knowledge_filter(scores, 0.0)
    assert sorted(kept["sample_id"]) == ["a", "b"] and dropped["dropped"].to_list() == [0]
    zero = suite(tasks=["single_doc_qa"], prior_knowledge_threshold=0, lengths=[2048], samples_per_length=2)
    assert zero.prior_knowledge_threshold is None
    assert (build_longbench100(zero, seed=0)["length"] > 0).all()


def _longbench_record(dataset: str, _id: str, context: str, answers: list[str], input: str = "") -> dict:
    """A record in LongBench v1's released format (THUDM/LongBench, LongBench/README.md)."""
    return {"input": input, "context": context, "answers": answers, "length": len(context.split()),
            "dataset": dataset, "language": "en", "all_classes": None, "_id": _id}


DECIDED = "The group agreed to buy the team's new microphone.\nIt was cheap."


def test_a_suite_built_from_longbench_v1_records(tmp_path, caplog):
    """Sources as LongBench v1 publishes them, built as 100-LongBench builds its tasks from them
    (utils/data_utils.py): the record's input and answers for QA with its context (or, for a
    multi-document record, the context's passages) among the distractors; a summary record's
    first answer as the reference, its non-empty input appended to the instruction (QMSum's
    query: f'{instruction}: {inp}'), and passage retrieval shown that summary."""
    paper = ("The authors train a tagger on newswire. They report gains on three benchmarks. "
             "The tagger uses a small model. ") * 3
    records = [
        _longbench_record("qasper", "q1", paper, ["newswire"], "What data is the tagger trained on?"),
        _longbench_record("2wikimqa", "w1", "Passage 1:\nAlpha Film\nAlpha Film was directed by Ann Lee.\n"
                          "Passage 2:\nAnn Lee\nAnn Lee was born in Oslo.\n", ["Oslo"],
                          "Where was the director of Alpha Film born?"),
        _longbench_record("qmsum", "m1", "Grad A: we should buy the new microphone. Professor B: agreed, buy it. "
                          * 4, [DECIDED], "What did the group decide about the microphone?"),
        _longbench_record("multi_news", "n1", "Passage 1:\nA storm hit the coast on Monday.\n"
                          "Passage 2:\nPower was cut to many towns.\n", ["A storm hit the coast and cut power."]),
        _longbench_record("lcc", "c1", "def f():\n    return 1\n", ["return 1"]),
    ]
    path = tmp_path / "longbench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    built = build_longbench100(suite(sources=str(path), lengths=[2048], base_lengths=[2048], samples_per_length=1,
                                     tasks=["single_doc_qa", "multi_doc_qa", "single_doc_sum", "multi_doc_sum",
                                            "passage_retrieval"]), seed=3)
    check_samples(built)
    assert f"{path}: skipped 1 rows (LongBench datasets 100-LongBench builds no source from (lcc))" in caplog.messages
    rows = {r["task"]: r for r in built.filter(pl.col("length") > 0).iter_rows(named=True)}
    assert rows["single_doc_qa"]["question"] == "What data is the tagger trained on?"
    assert rows["single_doc_qa"]["answers"] == ["newswire"]
    assert passages(rows["single_doc_qa"]["context"])[rows["single_doc_qa"]["gold_passages"][0] - 1] == paper.strip()
    multi = rows["multi_doc_qa"]
    assert multi["answers"] == ["Oslo"] and len(multi["gold_passages"]) == 2
    shown = [passages(multi["context"])[i - 1] for i in multi["gold_passages"]]
    assert sorted(shown) == ["Alpha Film\nAlpha Film was directed by Ann Lee.", "Ann Lee\nAnn Lee was born in Oslo."]
    summary = rows["single_doc_sum"]
    assert summary["question"] == (f"Write a one-page summary of Passage {summary['gold_passages'][0]} into a few "
                                   "short sentences: What did the group decide about the microphone?")
    assert summary["answers"] == [DECIDED]
    listed = ",".join(f"Passage {i}" for i in sorted(rows["multi_doc_sum"]["gold_passages"]))
    assert rows["multi_doc_sum"]["question"] == ("Combine and summarize the main ideas from the selected relevant "
                                                 f"passages into one cohesive summary: {listed}.")
    # data_utils.py nests a LongBench record's answers, so pred.py's prompt shows the list as str() prints it
    retrieval = rows["passage_retrieval"]
    shown = '["The group agreed to buy the team\'s new microphone.\\nIt was cheap."]'
    assert retrieval["question"] == shown == str([DECIDED])  # ungrouped
    assert retrieval["tail"].startswith(f"\n\nThe following is a summarization.\n\n{shown}\n\nPlease enter the number")


def test_prompts_go_without_the_chat_template_as_pred_py_sends_them(samples):
    """``pred.py`` calls ``HFModel.generate`` (``use_chat_template=False``: the prompt is tokenized
    as is) for every open model, the no-context QA probe included; ``chat_template: probe`` gives
    every row the probe's setting instead."""
    from types import SimpleNamespace

    from raylc.sweep.stages import requests

    assert samples["raw_prompt"].all() and (samples["length"] == 0).any()
    probe = build_longbench100(suite(chat_template="probe"), seed=11)
    assert not probe["raw_prompt"].any() and probe.drop("raw_prompt").equals(samples.drop("raw_prompt"))
    job = SimpleNamespace(probe_fingerprint=lambda: "fp")
    assert requests(samples, job)["raw_prompt"].all()
