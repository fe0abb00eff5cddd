"""Document pools and the length-controlled context builder (100-LongBench Section 3.1)."""

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.suites.context import (
    LONGBENCH_SOURCES,
    BuiltContext,
    ContextTooLong,
    PoolError,
    build_context,
    load_distractors,
    load_sources,
    pool_from_frame,
)
from raylc.text.tokenize import get_tokenizer

TOK = get_tokenizer()
WORDS = ("river harbour lantern copper orchard ledger meadow signal granary chapel festival kettle bridge "
         "mill archive tide clay loom pulley barley").split()
PASSAGE = re.compile(r"(?:^|\n\n)Passage (\d+):\n")


def _doc(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(WORDS, size=n_words)
    sentences = [" ".join(words[i:i + 9]).capitalize() + "." for i in range(0, n_words, 9)]
    return " ".join(sentences)


def _pool(n: int, lo: int, hi: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    texts = [f"Doc {i}. " + _doc(rng, int(rng.integers(lo, hi))) for i in range(n)]
    return pool_from_frame(pl.DataFrame({"text": texts}), TOK, source="pool.jsonl")


SMALL = _pool(60, 5, 200, seed=1)
BIG = _pool(600, 20, 900, seed=2)  # about 270K tokens of documents from ~25 to ~1000 tokens


def passages(ctx: BuiltContext) -> list[str]:
    """The passage texts of a built context, split on the labels."""
    parts = PASSAGE.split(ctx.text)
    assert parts[0] == "" and [int(x) for x in parts[1::2]] == list(range(1, ctx.n_passages + 1))
    return parts[2::2]


# --------------------------------------------------------------------------------------------- #
# pools
# --------------------------------------------------------------------------------------------- #


def test_pool_formats_and_token_cache(tmp_path):
    frame = pl.DataFrame({"id": ["a", "b", "c"], "text": ["  One doc.  ", "Two docs here.", "One doc."]})
    frame.write_ndjson(tmp_path / "d.jsonl")
    frame.write_parquet(tmp_path / "d.parquet")
    frame.write_csv(tmp_path / "d.csv")
    for name in ("d.jsonl", "d.parquet", "d.csv"):
        pool = load_distractors(str(tmp_path / name), TOK)
        assert pool.texts == ["One doc.", "Two docs here."]  # stripped; the exact duplicate dropped...
        assert pool.skipped == {"duplicate text": 1}  # ...and counted
        assert pool.frame["row"].to_list() == [1, 2] and pool.frame["id"].to_list() == ["a", "b"]
        assert pool.tokens.tolist() == [TOK.count(t) for t in pool.texts]


def test_source_pool_fields(tmp_path):
    rows = [
        {"text": "Doc A.", "question": "Q?", "answers": ["x", "y"], "summary": None, "group": None},
        {"text": "Doc B.", "question": None, "answers": None, "summary": "S.", "group": None},
        {"text": "Doc C.", "question": "Q2?", "answers": ["z"], "summary": None, "group": "g"},
        {"text": "Doc D.", "question": None, "answers": None, "summary": None, "group": "g"},
    ]
    pl.DataFrame(rows).write_ndjson(tmp_path / "s.jsonl")
    pool = load_sources(str(tmp_path / "s.jsonl"), TOK)
    assert pool.frame["id"].to_list() == ["row1", "row2", "row3", "row4"]
    assert pool.frame["answers"].to_list() == [["x", "y"], None, ["z"], None]
    # CSV: answers as one string
    pl.DataFrame({"text": ["Doc."], "question": ["Q?"], "answers": ["x"]}).write_csv(tmp_path / "s.csv")
    assert load_sources(str(tmp_path / "s.csv"), TOK).frame["answers"].to_list() == [["x"]]


BAD_POOLS = [
    ("distractors", {"body": ["x"]}, "missing field 'text'"),
    ("distractors", {"text": ["ok", "   "]}, "row 2: field 'text' is empty"),
    ("distractors", {"text": ["ok", None]}, "row 2: field 'text' is missing"),
    ("distractors", {"text": [1, 2]}, "field 'text' must be a string"),
    ("distractors", {"id": ["a", "a"], "text": ["x", "y"]}, "row 1: field 'id' 'a' is not unique"),
    ("sources", {"text": ["a"], "question": ["Q?"]}, "row 1: field 'answers' is missing"),
    ("sources", {"text": ["a"], "answers": [["x"]]}, "row 1: field 'question' is missing"),
    ("sources", {"text": ["a", "b"], "question": ["Q?", "Q?"], "answers": [["x"], [""]]},
     "row 2: field 'answers' is empty"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", None]}, "row 2: needs 'question' + 'answers' or 'summary'"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", "  "]}, "row 2: field 'summary' is empty"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", "T."], "group": [None, "g"]},
     "row 2: field 'group' 'g' has a single document"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", "T."], "group": ["g", "g"]},
     "row 1: field 'group' 'g' has different values of 'summary'"),
    ("sources", {"text": ["a", "b"], "question": ["Q?", None], "answers": [["x"], None], "summary": [None, "S."],
                 "group": [None, None]}, None),
    ("sources", {"text": ["a", "b"], "group": ["g", "g"]}, "row 1: field 'group' 'g' has no 'question'"),
    ("sources", {"text": ["a"], "question": ["Q?"], "answers": [1]}, "field 'answers' must be a string or a list"),
    ("sources", {"text": ["a", "b"], "question": ["Q?", None], "answers": [["x"], None], "query": ["q", None],
                 "summary": [None, "S."]}, "row 1: field 'summary' is missing (a 'query' is the query of a summary)"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", None], "query": ["q1", "q2"], "group": ["g", "g"]},
     "row 1: field 'group' 'g' has different values of 'query'"),
    ("sources", {"text": ["a", "b"], "summary": ["S.", None], "query": [None, "q"], "group": ["g", "g"]}, None),
]


@pytest.mark.parametrize("kind,data,message", BAD_POOLS)
def test_malformed_pools_one_line_errors(tmp_path, kind, data, message):
    path = tmp_path / f"{kind}.jsonl"
    pl.DataFrame(data).write_ndjson(path)
    load = load_sources if kind == "sources" else load_distractors
    if message is None:  # the valid control
        assert len(load(str(path), TOK)) == 2
        return
    with pytest.raises(PoolError) as err:
        load(str(path), TOK)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path)) and message in text


def test_missing_file_is_a_pool_error(tmp_path):
    with pytest.raises(PoolError, match="no such file"):
        load_distractors(str(tmp_path / "nope.jsonl"), TOK)


# --------------------------------------------------------------------------------------------- #
# building
# --------------------------------------------------------------------------------------------- #


@settings(max_examples=40, deadline=None)
@given(target=st.integers(60, 6000), seed=st.integers(0, 2**32 - 1), n_req=st.integers(0, 2))
def test_never_over_target_and_count_is_exact(target, seed, n_req):
    rng = np.random.default_rng(seed)
    required = [f"Gold {j}. " + _doc(rng, 15) for j in range(n_req)]
    try:
        ctx = build_context(target, SMALL, rng, required=required)
    except ContextTooLong:
        assert sum(TOK.count(r) for r in required) + 4 * n_req > target - 20
        return
    assert ctx.tokens <= target and ctx.tokens == TOK.count(ctx.text)
    texts = passages(ctx)
    for j, r in enumerate(required):
        assert texts[ctx.required_labels[j] - 1] == r and texts.count(r) == 1
    kinds = [k for k, _ in ctx.order]
    assert kinds.count("required") == n_req and ctx.n_unique == ctx.n_passages


@pytest.mark.parametrize("target", [8192, 16384, 32768, 65536, 131072, 262144])
def test_fills_at_least_95_percent_when_the_pool_allows(target):
    fills = [build_context(target, BIG, np.random.default_rng(s), required=["The gold passage."]).fill
             for s in range(4)]
    assert min(fills) >= 0.95 and max(fills) <= 1.0


def test_deterministic_per_seed():
    a = build_context(4096, BIG, np.random.default_rng(7), required=["Gold."])
    b = build_context(4096, BIG, np.random.default_rng(7), required=["Gold."])
    c = build_context(4096, BIG, np.random.default_rng(8), required=["Gold."])
    assert a == b and a.text != c.text


def test_shuffled_gold_position_varies():
    labels = {build_context(4096, BIG, np.random.default_rng(s), required=["Gold."]).required_labels[0]
              for s in range(20)}
    assert len(labels) > 5


def test_needles_in_distinct_distractors():
    needles = [f"The secret number {k} is {k * 111}." for k in range(4)]
    for at in ("end", "sentence"):
        ctx = build_context(3000, BIG, np.random.default_rng(3), needles=needles, needle_at=at)
        texts = passages(ctx)
        assert len(set(ctx.needle_labels)) == 4 and ctx.tokens <= 3000
        for needle, label in zip(needles, ctx.needle_labels):
            assert [i + 1 for i, t in enumerate(texts) if needle in t] == [label]
            assert ctx.order[label - 1][0] == "distractor"
            if at == "end":
                assert texts[label - 1].endswith(needle)


def test_too_few_hosts_or_too_long_required():
    with pytest.raises(ContextTooLong, match="fewer than 4 documents"):
        build_context(100, BIG, np.random.default_rng(0), needles=["a.", "b.", "c.", "d."])
    with pytest.raises(ContextTooLong, match="> target 50"):
        build_context(50, BIG, np.random.default_rng(0), required=[_doc(np.random.default_rng(0), 60)])


def test_repeats_count_unique_passages():
    ctx = build_context(8192, BIG, np.random.default_rng(5), max_repeats=3, label="Paragraph {i}:\n")
    texts = re.split(r"(?:^|\n\n)Paragraph \d+:\n", ctx.text)[1:]
    assert len(texts) == ctx.n_passages and len(set(texts)) == ctx.n_unique < ctx.n_passages
    assert ctx.tokens <= 8192 and ctx.fill >= 0.95


def test_identical_distractor_is_never_drawn():
    gold = SMALL.texts[0]
    for s in range(10):
        ctx = build_context(20000, SMALL, np.random.default_rng(s), required=[gold])
        assert passages(ctx).count(gold) == 1 and ("distractor", 0) not in ctx.order


def test_exclude_indices():
    ctx = build_context(20000, SMALL, np.random.default_rng(0), exclude=np.arange(30))
    assert all(k >= 30 for _, k in ctx.order)


class _Superadditive:
    """Counts words ``n`` plus ``n**2 / 50000``: a long text costs more than its parts, so the
    estimate undershoots and the builder must repair the context after counting it."""

    name = "superadditive"

    def count(self, text: str) -> int:
        n = len(text.split())
        return n + n * n // 50000

    def encode(self, text: str) -> list[int]:
        return list(range(self.count(text)))

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError


def test_repairs_when_the_joined_text_tokenizes_differently():
    pool = pool_from_frame(pl.DataFrame({"text": BIG.texts}), _Superadditive(), source="pool.jsonl")
    tok = pool.tokenizer
    for s in range(5):
        ctx = build_context(5000, pool, np.random.default_rng(s), required=["A gold passage."])
        estimate = sum(int(pool.tokens[k]) + 4 for kind, k in ctx.order if kind == "distractor")
        assert estimate < ctx.tokens == tok.count(ctx.text) <= 5000  # the parts undercount the whole
        assert ctx.fill >= 0.95


def test_with_a_real_subword_tokenizer(tmp_path):
    """A byte-level BPE (trained here, offline) merges across label/separator boundaries unlike
    the default tokenizer: contexts still never exceed the target and the reported count is exact."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(BIG.texts[:50], trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bpe.save(str(tmp_path / "tokenizer.json"))
    tok = get_tokenizer(f"hf:{tmp_path}")
    pool = pool_from_frame(pl.DataFrame({"text": BIG.texts[:300]}), tok, source="pool.jsonl")
    for s, target in enumerate([1500, 6000, 20000]):
        ctx = build_context(target, pool, np.random.default_rng(s), required=["Gold."], needles=["Key k is v."],
                            needle_at="sentence")
        assert ctx.tokens == tok.count(ctx.text) <= target and ctx.fill >= 0.95


# --------------------------------------------------------------------------------------------- #
# LongBench v1's released records as pools
# --------------------------------------------------------------------------------------------- #

LONGBENCH_FIXTURE = Path(__file__).resolve().parents[2] / "jobs" / "data" / "longbench" / "fixture.jsonl"


def _record(dataset: str, _id: str, context: str, answers: list[str], input: str = "") -> dict:
    """A record in LongBench v1's released format (THUDM/LongBench, LongBench/README.md)."""
    return {"input": input, "context": context, "answers": answers, "length": len(context.split()),
            "dataset": dataset, "language": "en", "all_classes": None, "_id": _id}


def _passages(*texts: str) -> str:
    """A multi-document context as LongBench lays it out (hotpotqa, 2wikimqa, musique, multi_news)."""
    return "".join(f"Passage {i}:\n{t}\n" for i, t in enumerate(texts, 1))


def _write(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


LONGBENCH_RECORDS = [
    _record("qasper", "q1", "The paper trains a tagger on news text.", ["news text"], "What data is used?"),
    _record("trec", "t1", "Question: Who wrote it?\nType: Human", ["Human"], "Who is he?"),
    _record("hotpotqa", "h1", _passages("Eiffel Tower\nDesigned by Eiffel.", "Gustave Eiffel\nBorn in Dijon."),
            ["Dijon", "Dijon, France"], "Where was the designer born?"),
    _record("gov_report", "g1", "The agency reviewed costs. Costs rose.", ["Costs rose, the agency found."]),
    _record("qmsum", "m1", "Grad A: we chose the mic. Professor B: fine.", ["They chose the microphone."],
            "What did the group decide about the microphone?"),
    _record("multi_news_e", "n1", _passages("A storm hit the coast.", "Power was cut to towns."),
            ["A storm hit the coast and cut power."]),
]


def test_longbench_v1_records_are_a_source_pool(tmp_path):
    """100-LongBench builds its sources from LongBench records (utils/data_utils.py): input as the
    question with the answers, the context as the document; a multi-document record's passages
    form one group; a summary dataset's first answer is the summary, its input the query;
    other datasets are skipped and counted. Rows name the record's line in the file."""
    pool = load_sources(_write(tmp_path / "lb.jsonl", LONGBENCH_RECORDS), TOK)
    got = pool.frame.drop("answers").to_dicts()
    assert got == [
        {"row": 1, "id": "q1", "text": "The paper trains a tagger on news text.", "question": "What data is used?",
         "summary": None, "query": None, "group": None, "_shown_summary": None},
        {"row": 3, "id": "h1#1", "text": "Eiffel Tower\nDesigned by Eiffel.",
         "question": "Where was the designer born?", "summary": None, "query": None, "group": "h1",
         "_shown_summary": None},
        {"row": 3, "id": "h1#2", "text": "Gustave Eiffel\nBorn in Dijon.", "question": "Where was the designer born?",
         "summary": None, "query": None, "group": "h1", "_shown_summary": None},
        {"row": 4, "id": "g1", "text": "The agency reviewed costs. Costs rose.", "question": None,
         "summary": "Costs rose, the agency found.", "query": None, "group": None,
         "_shown_summary": "['Costs rose, the agency found.']"},
        {"row": 5, "id": "m1", "text": "Grad A: we chose the mic. Professor B: fine.", "question": None,
         "summary": "They chose the microphone.", "query": "What did the group decide about the microphone?",
         "group": None, "_shown_summary": "['They chose the microphone.']"},
        {"row": 6, "id": "n1#1", "text": "A storm hit the coast.", "question": None,
         "summary": "A storm hit the coast and cut power.", "query": None, "group": "n1",
         "_shown_summary": "['A storm hit the coast and cut power.']"},
        {"row": 6, "id": "n1#2", "text": "Power was cut to towns.", "question": None,
         "summary": "A storm hit the coast and cut power.", "query": None, "group": "n1",
         "_shown_summary": "['A storm hit the coast and cut power.']"},
    ]
    assert pool.frame["answers"].to_list() == [["news text"], ["Dijon", "Dijon, France"],
                                               ["Dijon", "Dijon, France"], None, None, None, None]
    assert pool.skipped == {"LongBench datasets 100-LongBench builds no source from (trec)": 1}


def test_the_released_longbench_fixture_reads_as_both_pools():
    """The shipped LongBench v1 fixture (30 records in the released format, 12 datasets) as is."""
    records = [json.loads(line) for line in LONGBENCH_FIXTURE.read_text(encoding="utf-8").splitlines()]
    distractors = load_distractors(str(LONGBENCH_FIXTURE), TOK)
    unique = list(dict.fromkeys(r["context"].strip() for r in records))
    assert distractors.texts == unique and distractors.skipped.get("duplicate text", 0) == len(records) - len(unique)
    sources = load_sources(str(LONGBENCH_FIXTURE), TOK)
    used = [r for r in records if r["dataset"].removesuffix("_e") in LONGBENCH_SOURCES]
    assert {r["dataset"] for r in used} == {"hotpotqa", "gov_report"}
    assert sorted(set(sources.frame["group"].drop_nulls())) == sorted(r["_id"] for r in used
                                                                    if r["dataset"] == "hotpotqa")
    assert sources.frame.filter(pl.col("summary").is_not_null())["summary"].to_list() == [
        r["answers"][0] for r in used if r["dataset"] == "gov_report"]
    assert sum(sources.skipped.values()) == len(records) - len(used)


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(st.characters(categories=("L", "N", "P", "S", "Zs"), include_characters="\n"),
                              min_size=1, max_size=40)
                      .filter(lambda t: t.strip() and "Passage" not in t), min_size=2, max_size=6))
def test_a_multi_document_record_is_its_passages(tmp_path_factory, texts):
    """``re.split(r'Passage \\d+:\\n', context)`` with the blank parts dropped, as data_utils.py
    splits hotpotqa's and multi_news' contexts: each passage is one document of the group (a
    passage that repeats is refused: the group would hold one document twice)."""
    path = _write(tmp_path_factory.mktemp("lb") / "lb.jsonl",
                  [_record("musique", "x", _passages(*texts), ["a"], "Q?")])
    stripped = [t.strip() for t in texts]
    if len(set(stripped)) < len(stripped):
        with pytest.raises(PoolError, match=r"row 1: field 'context' repeats a passage \(Passage \d+\)$"):
            load_sources(path, TOK)
        return
    pool = load_sources(path, TOK)
    assert pool.texts == stripped
    assert pool.frame["group"].to_list() == ["x"] * len(texts)


BAD_LONGBENCH = [
    ({"context": None}, "row 2: field 'context' is missing"),
    ({"context": " "}, "row 2: field 'context' is empty"),
    ({"answers": []}, "row 2: field 'answers' is empty"),
    ({"answers": [""]}, "row 2: field 'answers' is empty"),
    ({"input": None}, "row 2: field 'input' is missing"),
    ({"dataset": None}, "row 2: field 'dataset' is missing"),
    ({"context": "Eiffel Tower. Gustave Eiffel."},
     "row 2: field 'context' holds 1 passage(s) (\"Passage i:\" labels); a hotpotqa record needs two or more"),
]


@pytest.mark.parametrize("change,message", BAD_LONGBENCH)
def test_bad_longbench_records_one_line(tmp_path, change, message):
    records = [LONGBENCH_RECORDS[0], {**LONGBENCH_RECORDS[2], **change}]
    path = _write(tmp_path / "lb.jsonl", records)
    with pytest.raises(PoolError) as err:
        load_sources(path, TOK)
    assert str(err.value) == f"{path}: {message}"


def test_longbench_answers_must_be_a_list(tmp_path):
    path = _write(tmp_path / "lb.jsonl", [{**LONGBENCH_RECORDS[0], "answers": "news text"}])
    with pytest.raises(PoolError, match=r"lb.jsonl: field 'answers' must be a list of strings, got String$"):
        load_distractors(path, TOK)
