"""100-LongBench's eight length-controllable tasks (Section 3.1, Table 2, Appendix A.2-A.3).

Every sample is rebuilt at each target length of the suite: the ground-truth document(s) of the
sample plus random distractors up to the length (:func:`raylc.suites.context.build_context`).

* ``kv_retrieval``: ``kv_pairs`` chained UUID pairs ``k1 -> k2 -> ... `` ("The value of k_i is
  k_{i+1}.") put before random sentences of distinct distractors; asked: the value of k1.
  Accuracy of the last UUID of the first line.
* ``counting_stars``: ``star_passages`` distractors end with "The little penguin counted N ★";
  asked which numbered option is the list of counts: "1. unanswerable" then the correct list and
  three distractors (two swaps of two counts, one altered count) in random order, as
  ``utils/data_utils.py`` writes them. Accuracy of the first number of the first line; gold the
  option number ("2" to "5").
* ``passage_retrieval``: a source document with a summary among distractors; asked which
  passage the summary is from. Accuracy of the number.
* ``passage_count``: distractors each repeated 1..``max_repeats`` times; asked the number of
  distinct paragraphs. Accuracy of the number.
* ``single_doc_qa`` / ``multi_doc_qa``: a QA document (a group of documents) among distractors,
  the instruction names its passage number(s); scored by the judge (``judge_qa``: fluency x
  correctness). Length-0 rows ask the question with no context (the prior-knowledge probe,
  :func:`prior_knowledge_filter`) when the suite's threshold is set.
* ``single_doc_sum`` / ``multi_doc_sum``: summarize the named passage(s); ``judge_sum``
  (fluency x precision).

Prompts are ``config/dataset2prompt.json`` of uservan/100-LongBench byte for byte (the paper's
Appendix A.3 prints them with "Import" for "Ignore" and without the ``{context}`` of Counting
Stars and Multi-Doc Sum), split into ``head + context + tail``, and sent without the chat template
as ``pred.py`` sends them to an open model (``raw_prompt``; ``chat_template: probe`` gives them the
probe's setting). Sample ids are stable across
lengths (a QA sample keeps its id at every length, so the prior-knowledge filter can drop it
everywhere). At each length a task takes the first ``samples_per_length`` source samples, in
one seeded order, whose documents fit that length, so a sample used at one length may give way
to another at a longer one; samples that fit nowhere, or fewer than ``samples_per_length`` at a
length, are counted (:func:`longbench100_report`) and logged. The synthetic tasks draw their
keys and needles afresh at each length (seeded per length): only the ids are shared.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Callable, Literal, Optional

import numpy as np
import polars as pl
from pydantic import Field, field_validator

from raylc.io.schemas import TableSchema, declare
from raylc.scoring.extract import raw_first_line
from raylc.suites.context import (
    SHOWN_SUMMARY,
    BuiltContext,
    ContextTooLong,
    DocumentPool,
    PoolError,
    build_context,
    load_distractors,
    load_sources,
)
from raylc.suites.registry import SuiteInfo, Task, register_suite
from raylc.suites.samples import LENGTHS_DEFAULT, SAMPLE_SCHEMA, LengthSuite, check_samples
from raylc.text.tokenize import get_tokenizer

LONGBENCH100_TASKS = ("kv_retrieval", "counting_stars", "passage_retrieval", "passage_count",
                      "single_doc_qa", "multi_doc_qa", "single_doc_sum", "multi_doc_sum")


LONGBENCH100_JUDGED = ("single_doc_qa", "multi_doc_qa", "single_doc_sum", "multi_doc_sum")


class LongBench100Suite(LengthSuite):
    """The eight length-controllable tasks of 100-LongBench (Appendix A.2), built from a pool of
    real source documents (``sources``) and a pool of distractor documents (``distractors``),
    JSONL/Parquet/CSV, local or s3://. QA samples scoring at least ``prior_knowledge_threshold``
    with no context are dropped from the statistics (0 or null disables the filter, as
    ``eval_trec.py`` ``scorer``'s ``if qa_filter>0``; the no-context rows are then not built).
    Appendix A.2 settings: ``kv_pairs`` chained UUID pairs (KV Retrieval), ``star_passages``
    star-count sentences (Counting Stars), each Passage Count document repeated 1..``max_repeats``
    times."""

    kind: Literal["longbench100"] = Field(description="`longbench100`: 100-LongBench's eight tasks.")
    tasks: list[Literal[LONGBENCH100_TASKS]] = Field(  # type: ignore[valid-type]
        default=list(LONGBENCH100_TASKS), min_length=1, description="The tasks to build.")
    sources: str = Field(min_length=1, description=(
        "The source pool (JSONL/JSON/Parquet/CSV, local or s3://): documents with a question and answers or a "
        "summary (`raylc/suites/context.py`), or LongBench v1's released JSONL as published."))
    distractors: str = Field(min_length=1, description=(
        "The distractor pool: documents with a `text` column, or LongBench v1's released JSONL (each record's "
        "`context`)."))
    prior_knowledge_threshold: Optional[float] = Field(default=0.5, ge=0.0, le=1.0, description=(
        "QA samples scoring at least this with no context are dropped at every length; 0 or null: no filter (and "
        "no no-context rows)."))
    kv_pairs: int = Field(default=3, ge=1, le=1000, description="Chained UUID key-value pairs of KV Retrieval.")
    star_passages: int = Field(default=4, ge=2, le=100, description=(
        "Star-count sentences of Counting Stars (their counts are distinct, from 1 to 100)."))
    max_repeats: int = Field(default=3, ge=1, description=(
        "Passage Count repeats each document 1 to this many times."))
    chat_template: Literal["pred_py", "probe"] = Field(default="pred_py", description=(
        "`pred_py`: every prompt without the chat template, as `pred.py` sends them to an open model "
        "(`utils/model_utils.py` `HFModel`: `use_chat_template=False`, the prompt tokenized as is); `probe`: the "
        "probe's `chat_template` setting."))

    columns = declare(
        ("n_passages", pl.Int64, "Passages (or paragraphs) in the context."),
        ("gold_passages", pl.List(pl.Int64), "The passage numbers of the ground truth (or of the needles)."))

    @field_validator("prior_knowledge_threshold")
    @classmethod
    def _zero_is_off(cls, value: Optional[float]) -> Optional[float]:
        """0 filters nothing in the official scorer (``if qa_filter>0``), not every sample."""
        return None if value == 0 else value

    def judged_tasks(self) -> list[str]:
        return sorted(set(self.tasks) & set(LONGBENCH100_JUDGED))

    def kept(self, scores: pl.DataFrame) -> pl.DataFrame:
        """Length-0 rows never count; with the QA prior-knowledge filter
        (``prior_knowledge_threshold``), neither do the rows of QA samples answered above the
        threshold with no context (:func:`prior_knowledge_filter`)."""
        keys = ["task", "sample_id", "length"]
        if self.prior_knowledge_threshold is None or not (scores["length"] == 0).any():
            return super().kept(scores)
        cols = [*keys, "score", *(["completion"] if "completion" in scores.columns else [])]
        kept, _ = prior_knowledge_filter(scores.select(cols), self.prior_knowledge_threshold)
        return scores.join(kept.select(keys).with_columns(kept=pl.lit(True)), on=keys, how="left").with_columns(
            pl.col("kept").fill_null(False))

    sections = (TableSchema("prior_knowledge", "report/prior_knowledge.parquet", (
        "The QA prior-knowledge filter per QA task (when `prior_knowledge_threshold` is set)."), declare(
        ("task", pl.String, "The QA task."),
        ("samples", pl.UInt32, "Its samples (at lengths above 0)."),
        ("dropped", pl.Int64, "Those dropped at every length: answered with no context at or above the threshold."))),)

    def report_sections(self, scores: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
        """Samples and drops of the QA prior-knowledge filter per QA task."""
        if self.prior_knowledge_threshold is None:
            return []
        dropped = scores.filter((pl.col("length") > 0) & ~pl.col("kept")).select("task", "sample_id").unique()
        probed = scores.filter(pl.col("length") == 0).select("task").unique()  # the QA tasks
        total = (scores.filter(pl.col("length") > 0).join(probed, on="task", how="semi")
                 .select("task", "sample_id").unique().group_by("task").len("samples"))
        table = total.join(dropped.group_by("task").len("dropped"), on="task", how="left").with_columns(
            pl.col("dropped").fill_null(0).cast(pl.Int64)).sort("task")
        return [("prior_knowledge", f"QA prior-knowledge filter (no-context score >= {self.prior_knowledge_threshold})",
                 table)]


log = logging.getLogger(__name__)

QA_TASKS = ("single_doc_qa", "multi_doc_qa")
SOURCE_TASKS = ("passage_retrieval", *QA_TASKS, "single_doc_sum", "multi_doc_sum")
TASK_CODE = {t: i for i, t in enumerate(LONGBENCH100_TASKS)}

_QA = ("Answer the question based on the given passages. Only give me the answer and do not output any other "
       "words.\n\nThe following are given passages and these passages are from many different fields.\n\n{context}"
       "\n\nAnswer the question based on the given passages following the instruction: \n{instruction}\n\n"
       "Question: {input}\nOnly give me the answer and do not output any other words. Answer:\n")
_SUM_HEAD = "You are given several passages as follows, but not all of them need to be summarized.\n\n{context}"
#: ``config/dataset2prompt.json`` of uservan/100-LongBench, byte for byte (the space after kv_retrieval's
#: ``{input}`` included); ``{instruction}`` and ``{input}`` are filled as ``utils/data_utils.py`` builds them
PROMPTS = {
    "kv_retrieval": "There are some passages below sourced from many different fields.\n\n{context}\n\nGiven several "
                    "key-value pairs in these passages, you need to find the value of the key. Read the question "
                    "related with these key-value pairs and give the correct answer. {input} ",
    "counting_stars": "There are some passages below sourced from many different fields.\n\n{context}\n\nOnly output "
                      "the results without any explanation. Read the following question and give the correct "
                      "answer: {input}\nThe final answer is: ",
    "passage_retrieval": "Here are some passages from many different fields, along with an summarization. Please "
                         "determine which passage the summarization is from.\n\n{context}\n\nThe following is a "
                         "summarization.\n\n{input}\n\nPlease enter the number of the passage that the summarization "
                         "is from. The answer format must be like \"Passage 1\", \"Passage 2\", etc.\n\nThe answer "
                         "is Passage ",
    "passage_count": "There are some paragraphs below sourced from many different fields. Some of them may be "
                     "duplicates. Please carefully read these paragraphs and determine how many unique paragraphs "
                     "there are after removing duplicates. In other words, how many non-repeating paragraphs are "
                     "there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after "
                     "removing duplicates. The output format should only contain the number, such as 1, 2, 3, and "
                     "so on.\n\nThe final answer is: ",
    "single_doc_qa": _QA,
    "multi_doc_qa": _QA,
    "single_doc_sum": _SUM_HEAD + "\n\nPlease follow these instructions:\n1.{input}\n2.Ignore and do not summarize any "
                      "passages not listed above.\n3.For the selected passages, the summary should include: the main "
                      "arguments or conclusions of each article, the key evidence or supporting data presented and "
                      "any unique or innovative points made in the passages.\n4.The summary should be concise, "
                      "focusing only on the most important information from the passages. Now, please generate the "
                      "summary for the specified passage, following the instructions carefully.\nSummary:\n",
    "multi_doc_sum": _SUM_HEAD + "\n\nPlease follow these instructions:\n1.{input}\n2.Ignore and do not summarize any "
                     "passages not listed above.\n3.All the selected passages should be summarized into a few short "
                     "sentences and do not summarize each selected passages separately. The summary should include: "
                     "the main arguments or conclusions of each article, the key evidence or supporting data "
                     "presented and any unique or innovative points made in the passages.\n4.The summary should be "
                     "concise, focusing only on the most important information from the passages. Now, please "
                     "combine and summarize the main ideas from the selected relevant passages into one cohesive "
                     "summary, following the instructions carefully.\n\nSummary:\n",
}
#: the no-context prompt of the prior-knowledge probe (length-0 rows): ``dataset2prompt.json``'s ``qa_old``
#: (``pred.py`` asks it for every QA sample), its trailing space included
NO_CONTEXT_QA = ("Answer the question as concisely as you can, using a single phrase or sentence if possible. If the "
                 "question cannot be answered, write \"unanswerable\". Do not provide any explanation. Question: "
                 "{input}\nOnly give me the answer and do not output any other words. Answer:\n ")
#: generation lengths: uservan/100-LongBench config/dataset2maxlen.json
MAX_TOKENS = {"kv_retrieval": 64, "counting_stars": 32, "passage_retrieval": 32, "passage_count": 32,
              "single_doc_qa": 256, "multi_doc_qa": 256, "single_doc_sum": 512, "multi_doc_sum": 512}
#: task -> (metric, extractor); the answer rules of 100-LongBench's eval_trec.py / utils/metrics.py:
#: every prediction is cut to its first line, then acc_score (first number: Counting Stars' option number
#: too) or kv_retrieval_score (last UUID)
METRIC = {"kv_retrieval": ("accuracy", "first_line_last_uuid"), "counting_stars": ("accuracy", "first_line_number"),
          "passage_retrieval": ("accuracy", "first_line_number"), "passage_count": ("accuracy", "first_line_number"),
          "single_doc_qa": ("judge_qa", "raw_first_line"), "multi_doc_qa": ("judge_qa", "raw_first_line"),
          "single_doc_sum": ("judge_sum", "raw_first_line"), "multi_doc_sum": ("judge_sum", "raw_first_line")}
PARAGRAPH_LABEL = "Paragraph {i}:\n"
STAR = "The little penguin counted {n} ★"
KV = "The value of {key} is {value}."
#: Counting Stars' question (``utils/data_utils.py`` ``generate_dataset_counting_stars``, test_type
#: "Acquisition"), its "[x, x, x,...]. represent" and "collect?" as written; ``{options}`` is one line per option
STARS_QUESTION = (
    "On this moonlit and misty night, the little penguin is looking up at the sky and concentrating on counting ★. "
    "Please help the little penguin collect the number of ★, for example: [x, x, x,...]. The summation is not "
    "required, and the numbers in [x, x, x,...]. represent the counted number of ★ by the little penguin.\n"
    "Question: Which of the following is the correct number of ★ the little penguin collect?\n{options}"
    "Please provide your answer as a single number (1, 2, 3, 4 ...) without any explanation.")
#: option 1 of every Counting Stars question
STARS_UNANSWERABLE = "unanswerable"


def around_context(template: str, **values: str) -> tuple[str, str]:
    """(head, tail) of ``template`` around ``{context}``, other placeholders filled."""
    head, tail = template.split("{context}")
    for k, v in values.items():
        tail = tail.replace("{" + k + "}", v)
    return head, tail


@dataclass(frozen=True)
class _Item:
    """One source sample: its documents (source-pool indices), question/answers or summary (and its query)."""

    sample_id: str
    docs: tuple[int, ...]
    question: Optional[str]
    answers: Optional[tuple[str, ...]]
    summary: Optional[str]
    query: Optional[str] = None
    shown: Optional[str] = None  # the summary as passage_retrieval's prompt shows it, if not as is


def source_items(sources: DocumentPool, task: str) -> list[_Item]:
    """The samples a source pool offers to ``task`` (rows, or groups for the multi-doc tasks)."""
    f = sources.frame.with_row_index("_i")
    if task in ("multi_doc_qa", "multi_doc_sum"):
        need = "question" if task == "multi_doc_qa" else "summary"
        groups = (f.filter(pl.col("group").is_not_null())
                  .group_by("group", maintain_order=True)
                  .agg(pl.col("_i"), *(pl.col(c).drop_nulls().first() for c in ("question", "answers", "summary",
                                                                                  "query", SHOWN_SUMMARY)))
                  .filter(pl.col(need).is_not_null()))
        return [_Item(g["group"], tuple(g["_i"]), g["question"], tuple(g["answers"]) if g["answers"] else None,
                      g["summary"], g["query"], g[SHOWN_SUMMARY]) for g in groups.iter_rows(named=True)]
    need = "question" if task == "single_doc_qa" else "summary"
    rows = f.filter(pl.col("group").is_null() & pl.col(need).is_not_null())
    return [_Item(r["id"], (r["_i"],), r["question"], tuple(r["answers"]) if r["answers"] else None, r["summary"],
                  r["query"], r[SHOWN_SUMMARY]) for r in rows.iter_rows(named=True)]


def _rng(seed: int, task: str, key: int, length: int) -> np.random.Generator:
    return np.random.default_rng([seed, TASK_CODE[task], key, length])


def _row(task: str, sample_id: str, length: int, ctx: Optional[BuiltContext], head: str, tail: str,
         question: str, answers: list[str], gold: str, gold_passages: list[int]) -> dict:
    metric, extractor = METRIC[task]
    return {"task": task, "sample_id": sample_id, "length": length,
            "context_tokens": ctx.tokens if ctx else 0, "head": head, "context": ctx.text if ctx else "",
            "tail": tail, "question": question, "answers": answers, "gold": gold, "metric": metric,
            "extractor": extractor, "followup": None, "max_tokens": MAX_TOKENS[task], "followup_max_tokens": None,
            "n_passages": ctx.n_passages if ctx else 0, "gold_passages": gold_passages}


def _passages(labels) -> str:
    """The multi-doc summary's passages as ``data_utils.py`` joins them: "Passage 1,Passage 3"."""
    return ",".join(f"Passage {i}" for i in labels)


# --------------------------------------------------------------------------------------------- #
# synthetic tasks (Appendix A.2: KV Retrieval, Counting Stars, Passage Count)
# --------------------------------------------------------------------------------------------- #


def _kv_retrieval(suite: LongBench100Suite, pool: DocumentPool, i: int, length: int, rng) -> dict:
    keys = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(suite.kv_pairs + 1)]
    needles = [KV.format(key=keys[j], value=keys[j + 1]) for j in range(suite.kv_pairs)]
    ctx = build_context(length, pool, rng, needles=needles, needle_at="sentence")
    question = f"Answer: the value of {keys[0]} is"
    head, tail = around_context(PROMPTS["kv_retrieval"], input=question)
    return _row("kv_retrieval", f"kv_retrieval-{i:04d}", length, ctx, head, tail, question, [keys[1]], keys[1],
                list(ctx.needle_labels))


def star_options(counts: list[int], rng: np.random.Generator) -> list[list[int]]:
    """The correct sequence and three distinct distractors: two swaps of two counts and one altered
    count (``data_utils.py``'s ``exchange`` / ``modify``; raylc redraws a distractor equal to another
    option, which the official generator does not)."""
    options = [list(counts)]
    makers = ["swap", "alter", "swap"]
    while len(options) < 4:
        seq = list(counts)
        if makers[len(options) - 1] == "swap":
            a, b = rng.choice(len(seq), size=2, replace=False)
            seq[a], seq[b] = seq[b], seq[a]
        else:
            seq[int(rng.integers(len(seq)))] = int(rng.integers(1, 101))
        if seq not in options:
            options.append(seq)
    return options


def _counting_stars(suite: LongBench100Suite, pool: DocumentPool, i: int, length: int, rng) -> dict:
    stars = [int(x) for x in rng.choice(np.arange(1, 101), size=suite.star_passages, replace=False)]
    ctx = build_context(length, pool, rng, needles=[STAR.format(n=n) for n in stars], needle_at="end")
    counts = [stars[j] for j in np.argsort(ctx.needle_labels)]
    question, number = stars_question(star_options(counts, rng), rng)
    head, tail = around_context(PROMPTS["counting_stars"], input=question)
    return _row("counting_stars", f"counting_stars-{i:04d}", length, ctx, head, tail, question, [number], number,
                sorted(ctx.needle_labels))


def stars_question(options: list[list[int]], rng: np.random.Generator) -> tuple[str, str]:
    """The Counting Stars question and its answer, the correct option's number (``data_utils.py``):
    the four sequences (``options[0]`` correct) shuffled after "unanswerable", numbered "1. " to
    "5. ", each written as a Python list ("[38, 10, 90, 42]")."""
    shown = [STARS_UNANSWERABLE, *(options[int(k)] for k in rng.permutation(len(options)))]
    lines = "".join(f"{n}. {option}\n" for n, option in enumerate(shown, start=1))
    return STARS_QUESTION.format(options=lines), str(shown.index(options[0]) + 1)


def _passage_count(suite: LongBench100Suite, pool: DocumentPool, i: int, length: int, rng) -> dict:
    ctx = build_context(length, pool, rng, max_repeats=suite.max_repeats, min_distractors=1, label=PARAGRAPH_LABEL)
    head, tail = around_context(PROMPTS["passage_count"])
    n = str(ctx.n_unique)
    return _row("passage_count", f"passage_count-{i:04d}", length, ctx, head, tail, "", [n], n, [])


# --------------------------------------------------------------------------------------------- #
# source tasks (Passage Retrieval, QA, summarization)
# --------------------------------------------------------------------------------------------- #


def _source_row(task: str, item: _Item, length: int, ctx: BuiltContext) -> dict:
    labels = list(ctx.required_labels)
    if task == "passage_retrieval":
        shown = item.shown or item.summary
        head, tail = around_context(PROMPTS[task], input=shown)
        gold = str(labels[0])
        return _row(task, item.sample_id, length, ctx, head, tail, shown, [gold], gold, labels)
    if task in QA_TASKS:  # data_utils.py: "Passage 2,5. " (a bare comma) for the multi-doc groups
        shown = ",".join(str(i) for i in sorted(labels))
        instruction = f"Answer the question related with Passage {shown}. "
        head, tail = around_context(PROMPTS[task], instruction=instruction, input=item.question)
        return _row(task, item.sample_id, length, ctx, head, tail, item.question, list(item.answers),
                    item.answers[0], labels)
    if task == "single_doc_sum":
        instruction = f"Write a one-page summary of Passage {labels[0]} into a few short sentences"
    else:
        instruction = ("Combine and summarize the main ideas from the selected relevant passages into one cohesive "
                       f"summary: {_passages(sorted(labels))}")
    # data_utils.py: f'{instruction}: {inp}' if len(inp) > 0 else f'{instruction}.' (inp: QMSum's query)
    question = f"{instruction}: {item.query}" if item.query else f"{instruction}."
    head, tail = around_context(PROMPTS[task], input=question)
    return _row(task, item.sample_id, length, ctx, head, tail, question, [item.summary], item.summary, labels)


def _no_context_row(task: str, item: _Item) -> dict:
    tail = NO_CONTEXT_QA.replace("{input}", item.question)
    return _row(task, item.sample_id, 0, None, "", tail, item.question, list(item.answers), item.answers[0], [])


def _source_task(task: str, suite: LongBench100Suite, seed: int, sources: DocumentPool,
                 pool: DocumentPool) -> tuple[list[dict], dict[int, int]]:
    """Rows of a source task and, per length, how many samples could not be built."""
    items = source_items(sources, task)
    if not items:
        need = "'question' + 'answers'" if task in QA_TASKS else "'summary'"
        shape = "groups (rows sharing 'group')" if task.startswith("multi") else "ungrouped rows"
        raise PoolError(f"{sources.source}: no {shape} with {need} (needed by task {task})")
    order = np.random.default_rng([seed, TASK_CODE[task]]).permutation(len(items))
    size = np.array([int(sources.tokens[list(it.docs)].sum()) for it in items])
    rows, short, used = [], {}, set()
    for length in suite.lengths:
        built = 0
        for k in order[size[order] <= length]:
            if built == suite.samples_per_length:
                break
            item = items[int(k)]
            rng = _rng(seed, task, int(k), length)
            try:
                ctx = build_context(length, pool, rng, required=[sources.texts[d] for d in item.docs],
                                    required_tokens=sources.tokens[list(item.docs)])
            except ContextTooLong:
                continue
            rows.append(_source_row(task, item, length, ctx))
            used.add(int(k))
            built += 1
        short[length] = suite.samples_per_length - built
    if task in QA_TASKS and suite.prior_knowledge_threshold is not None:
        rows += [_no_context_row(task, items[k]) for k in sorted(used)]
    return rows, short


SYNTHETIC: dict[str, Callable[..., dict]] = {"kv_retrieval": _kv_retrieval, "counting_stars": _counting_stars,
                                             "passage_count": _passage_count}


def _synthetic_task(task: str, suite: LongBench100Suite, seed: int, pool: DocumentPool) -> tuple[list[dict], dict]:
    rows, short = [], {}
    for length in suite.lengths:
        built, error = 0, None
        for i in range(suite.samples_per_length):
            try:
                rows.append(SYNTHETIC[task](suite, pool, i, length, _rng(seed, task, i, length)))
                built += 1
            except ContextTooLong as exc:
                error = exc
        if not built:
            raise PoolError(f"task {task} at length {length}: {error}")
        short[length] = suite.samples_per_length - built
    return rows, short


EXTRA_SCHEMA = {c.name: c.dtype for c in LongBench100Suite.columns}
_SCORER = {"accuracy": "`utils/metrics.py` (`acc_score`)", "judge_qa": "`utils/metrics.py` (`qa_model_score`)",
           "judge_sum": "`utils/metrics.py` (`sum_model_score`)"}
_JUDGE_NOTE = "Scored by the `judge` section's model (its budget is the judge's `sampling.max_tokens`)."
LONGBENCH100_INFO = SuiteInfo(
    title="100-LongBench",
    tasks=tuple(Task(
        t, METRIC[t][0], MAX_TOKENS[t],
        f"`utils/data_utils.py` (`generate_dataset_{t}`), `config/dataset2prompt.json`, `eval_trec.py`, "
        + ("`utils/metrics.py` (`kv_retrieval_score`)" if t == "kv_retrieval" else _SCORER[METRIC[t][0]]),
        extractor=METRIC[t][1], note=_JUDGE_NOTE if t in LONGBENCH100_JUDGED else "") for t in LONGBENCH100_TASKS),
    lengths="`suite.lengths` (tokens of the context): " + ", ".join(map(str, LENGTHS_DEFAULT))
            + "; QA tasks also at 0 (the no-context probe) when the prior-knowledge filter is on",
    data="`suite.sources` and `suite.distractors`: document pools (`raylc/suites/context.py`).",
    real_data="LongBench v1's released JSONL (the Hugging Face dataset `THUDM/LongBench`, `data.zip`), as both "
              "pools: 100-LongBench builds its pools from those records (`get_dataset('LongBench', name)`); its other "
              "sources (L-Eval `L4NLP/LEval`, `abisee/cnn_dailymail`, `enelpol/rag-mini-bioasq`) are read only in "
              "raylc's own pool format.",
    official="uservan/100-LongBench",
)


@register_suite(LongBench100Suite, LONGBENCH100_INFO)
def build_longbench100(suite: LongBench100Suite, seed: int) -> pl.DataFrame:
    """The samples table (:mod:`raylc.suites.samples`) of the suite's tasks at every length, plus
    ``n_passages``, ``gold_passages`` (passage numbers of the ground truth / needles) and
    ``raw_prompt`` (``chat_template``).
    Deterministic per ``seed``; shortfalls (sources too long for a length, too few sources) are
    logged and visible in :func:`longbench100_report`."""
    tok = get_tokenizer(suite.tokenizer)
    pool = load_distractors(suite.data_path(suite.distractors), tok)
    sources = load_sources(suite.data_path(suite.sources), tok) if set(suite.tasks) & set(SOURCE_TASKS) else None
    for loaded in (pool, sources):
        if loaded is not None and loaded.skipped:
            log.warning("%s: skipped %s", loaded.source,
                        ", ".join(f"{n} rows ({why})" for why, n in loaded.skipped.items()))
    rows: list[dict] = []
    for task in suite.tasks:
        if task in SYNTHETIC:
            task_rows, short = _synthetic_task(task, suite, seed, pool)
        else:
            task_rows, short = _source_task(task, suite, seed, sources, pool)
            if not any(r["length"] > 0 for r in task_rows):  # an empty task: refused, not a silent gap
                raise PoolError(f"{sources.source}: task {task}: no sample fits any length of suite.lengths "
                                f"(largest {max(suite.lengths)} tokens): every source is too long")
        rows += task_rows
        for length, n in short.items():
            if n:
                log.warning("%s at length %d: %d of %d samples could not be built", task, length, n,
                            suite.samples_per_length)
    frame = pl.DataFrame(rows, schema={**SAMPLE_SCHEMA, **EXTRA_SCHEMA})
    frame = frame.with_columns(raw_prompt=pl.lit(suite.chat_template == "pred_py"))
    return check_samples(frame, f"suite longbench100 ({suite.sources})")


def longbench100_report(samples: pl.DataFrame, suite: LongBench100Suite) -> pl.DataFrame:
    """Per task and target length: samples ``requested`` and ``built``, ``skipped`` (could not be
    built: sources too long or too few) and the achieved ``min_fill`` / ``mean_fill`` (context
    tokens / target)."""
    grid = pl.DataFrame({"task": list(suite.tasks)}).join(pl.DataFrame({"length": suite.lengths}), how="cross")
    got = (samples.filter(pl.col("length") > 0)
           .group_by("task", "length")
           .agg(built=pl.len(), min_fill=(pl.col("context_tokens") / pl.col("length")).min(),
                mean_fill=(pl.col("context_tokens") / pl.col("length")).mean()))
    return (grid.join(got, on=["task", "length"], how="left")
            .with_columns(requested=pl.lit(suite.samples_per_length), built=pl.col("built").fill_null(0).cast(pl.Int64))
            .with_columns(skipped=pl.col("requested") - pl.col("built"))
            .select("task", "length", "requested", "built", "skipped", "min_fill", "mean_fill"))


def prior_knowledge_filter(scores: pl.DataFrame, threshold: Optional[float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """100-LongBench's QA filter (Section 3.1, Appendix A.2; ``eval_trec.py`` ``scorer``): a QA
    sample whose no-context (length-0) score is at least ``threshold`` answers from prior
    knowledge and is dropped at every length, unless the first line of that no-context answer
    says "unanswerable" (any case; such a sample is never dropped). ``scores``: ``task,
    sample_id, length, score`` and, for the "unanswerable" rule, ``completion`` (any other
    columns are kept).

    Returns (the kept rows without the length-0 rows, per QA task ``probed`` / ``dropped``
    sample counts). A null length-0 score (failed judgement) does not drop; a ``threshold`` of
    None or <= 0 drops nothing (``eval_trec.py`` ``scorer``: ``if qa_filter>0``)."""
    probe = scores.filter((pl.col("length") == 0) & pl.col("task").is_in(list(QA_TASKS)))
    over = pl.col("score") >= threshold if threshold is not None and threshold > 0 else pl.lit(False)
    if "completion" in probe.columns:  # an answer that says it cannot answer is never prior knowledge
        said = raw_first_line(pl.col("completion")).str.to_lowercase().str.contains("unanswerable", literal=True)
        over = over & ~said.fill_null(False)
    flagged = probe.group_by("task", "sample_id").agg(drop=over.fill_null(False).any())
    bad = flagged.filter("drop").select("task", "sample_id")
    kept = scores.filter(pl.col("length") != 0).join(bad, on=["task", "sample_id"], how="anti")
    dropped = (flagged.group_by("task").agg(probed=pl.len(), dropped=pl.col("drop").sum().cast(pl.Int64))
               .with_columns(pl.col("probed").cast(pl.Int64)).sort("task"))
    return kept, dropped
