"""LongBench v1 (Bai et al., 2024) as a protocol: its released data, prompts, generation
lengths, truncation and metrics, each restated from THUDM/LongBench (``LongBench/`` at commit
2e00731f8d0bff23dc4325161044d0ed8af94c1e).

Data: the released JSON Lines (one file per dataset or several concatenated), one record per
sample with ``input, context, answers, length, dataset, language, all_classes, _id``
(``length``: words, or characters for Chinese; ``all_classes``: the labels of trec and lsht,
else null).

Prompts (:data:`DATASET_PROMPTS`) are ``config/dataset2prompt.json`` byte for byte (its
"asconcisely" and trailing spaces included), filled like ``pred.py`` (``str.format`` with the
record's fields), split at ``{context}`` into ``head + context + tail``. Generation lengths
(:data:`DATASET_MAXLEN`) are ``config/dataset2maxlen.json``. ``pred.py`` cuts the *whole
prompt* to ``max_length`` tokens (``config/model2maxlen.json``) by keeping its first and last
``max_length // 2`` tokens; ``suite.max_length`` does that here in ``suite.tokenizer`` (the
model's: ``hf:<name>``), else the backend cuts the context to its window by ``probe.truncation``
(default ``middle``).

Scoring (``eval.py``): the metric of :data:`DATASET_METRIC` (``dataset2metric``), the max over
``answers``, on the first line (``lstrip('\\n').split('\\n')[0]``) for trec, triviaqa, samsum
and lsht; a dataset's score is ``round(100 * total / n, 2)`` with the samples summed in file
order (:func:`longbench_report`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

import polars as pl
from pydantic import Field, field_validator

from raylc.io.schemas import TableSchema, declare
from raylc.io.store import StoreError, json_records
from raylc.suites.longbench_v2 import LongBenchV2DataError, _read_bytes, located
from raylc.suites.registry import SuiteInfo, SweepSuite, Task, register_suite
from raylc.suites.samples import SAMPLE_SCHEMA, check_samples
from raylc.text.tokenize import get_tokenizer
from raylc.text.truncation import counted_cut

#: ``LongBench/config/dataset2prompt.json``, byte for byte (``{context}`` and ``{input}`` are
#: filled with the record's fields)
DATASET_PROMPTS: dict[str, str] = {
    'narrativeqa': 'You are given a story, which can be either a novel or a movie script, and a question. Answer the '
                   'question asconcisely as you can, using a single phrase if possible. Do not provide any '
                   'explanation.\n\nStory: {context}\n\nNow, answer the question based on the story asconcisely as you '
                   'can, using a single phrase if possible. Do not provide any explanation.\n\nQuestion: '
                   '{input}\n\nAnswer:',
    'qasper': 'You are given a scientific article and a question. Answer the question as concisely as you can, using a '
              'single phrase or sentence if possible. If the question cannot be answered based on the information in '
              'the article, write "unanswerable". If the question is a yes/no question, answer "yes", "no", or '
              '"unanswerable". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on '
              'the above article as concisely as you can, using a single phrase or sentence if possible. If the '
              'question cannot be answered based on the information in the article, write "unanswerable". If the '
              'question is a yes/no question, answer "yes", "no", or "unanswerable". Do not provide any '
              'explanation.\n\nQuestion: {input}\n\nAnswer:',
    'multifieldqa_en': 'Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question '
                       'based on the above text, only give me the answer and do not output any other '
                       'words.\n\nQuestion: {input}\nAnswer:',
    'multifieldqa_zh': '阅读以下文字并用中文简短回答：\n\n{context}\n\n'
                       '现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。\n\n问题：{input}\n回答：',
    'hotpotqa': 'Answer the question based on the given passages. Only give me the answer and do not output any other '
                'words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given '
                'passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:',
    '2wikimqa': 'Answer the question based on the given passages. Only give me the answer and do not output any other '
                'words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given '
                'passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:',
    'musique': 'Answer the question based on the given passages. Only give me the answer and do not output any other '
               'words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given '
               'passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:',
    'dureader': '请基于给定的文章回答下述问题。\n\n文章：{context}\n\n'
                '请基于上述文章回答下面的问题。\n\n问题：{input}\n回答：',
    'gov_report': 'You are given a report by a government agency. Write a one-page summary of the '
                  'report.\n\nReport:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:',
    'qmsum': 'You are given a meeting transcript and a query containing a question or instruction. Answer the query in '
             'one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting '
             'transcript in one or more sentences.\n\nQuery: {input}\nAnswer:',
    'multi_news': 'You are given several news passages. Write a one-page summary of all news. '
                  '\n\nNews:\n{context}\n\nNow, write a one-page summary of all the news.\n\nSummary:',
    'vcsum': '下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结：',
    'trec': 'Please determine the type of the question below. Here are some examples of '
            'questions.\n\n{context}\n{input}',
    'triviaqa': 'Answer the question based on the given passage. Only give me the answer and do not output any other '
                'words. The following are some examples.\n\n{context}\n\n{input}',
    'samsum': 'Summarize the dialogue into a few short sentences. The following are some '
              'examples.\n\n{context}\n\n{input}',
    'lsht': '请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}',
    'passage_count': 'There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please '
                     'carefully read these paragraphs and determine how many unique paragraphs there are after '
                     'removing duplicates. In other words, how many non-repeating paragraphs are there in '
                     'total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after removing '
                     'duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe '
                     'final answer is: ',
    'passage_retrieval_en': 'Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which '
                            'paragraph the abstract is from.\n\n{context}\n\nThe following is an '
                            'abstract.\n\n{input}\n\nPlease enter the number of the paragraph that the abstract is '
                            'from. The answer format must be like "Paragraph 1", "Paragraph 2", etc.\n\n'
                            'The answer is: ',
    'passage_retrieval_zh': '以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n'
                            '{context}\n\n下面是一个摘要\n\n{input}\n\n'
                            '请输入摘要所属段落的编号。答案格式必须是"段落1"，"段落2"等格式\n\n答案是：',
    'lcc': 'Please complete the code given below. \n{context}Next line of code:\n',
    'repobench-p': 'Please complete the code given below. \n{context}{input}Next line of code:\n',
}

#: ``LongBench/config/dataset2maxlen.json``: new tokens per dataset
DATASET_MAXLEN: dict[str, int] = {
    "narrativeqa": 128, "qasper": 128, "multifieldqa_en": 64, "multifieldqa_zh": 64, "hotpotqa": 32, "2wikimqa": 32,
    "musique": 32, "dureader": 128, "gov_report": 512, "qmsum": 512, "multi_news": 512, "vcsum": 512, "trec": 64,
    "triviaqa": 32, "samsum": 128, "lsht": 64, "passage_count": 32, "passage_retrieval_en": 32,
    "passage_retrieval_zh": 32, "lcc": 64, "repobench-p": 64,
}

#: ``LongBench/eval.py`` ``dataset2metric``, as :data:`raylc.scoring.metrics.METRICS` keys
#: (``qa_f1_score`` is ``f1``, ``code_sim_score`` is ``edit_sim``)
DATASET_METRIC: dict[str, str] = {
    "narrativeqa": "f1", "qasper": "f1", "multifieldqa_en": "f1", "multifieldqa_zh": "qa_f1_zh", "hotpotqa": "f1",
    "2wikimqa": "f1", "musique": "f1", "dureader": "rouge_zh", "gov_report": "rouge_longbench",
    "qmsum": "rouge_longbench", "multi_news": "rouge_longbench", "vcsum": "rouge_zh", "trec": "classification",
    "triviaqa": "f1", "samsum": "rouge_longbench", "lsht": "classification", "passage_retrieval_en": "retrieval",
    "passage_count": "count", "passage_retrieval_zh": "retrieval_zh", "lcc": "edit_sim", "repobench-p": "edit_sim",
}

#: ``eval.py`` ``scorer``: these datasets are scored on the first line of the output
FIRST_LINE_DATASETS = ("trec", "triviaqa", "samsum", "lsht")
#: ``pred.py``: no chat template on these ("chat models are better off without build prompts")
NO_CHAT_DATASETS = ("trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p")
DATASETS = tuple(DATASET_PROMPTS)
FIELDS = ("input", "context", "answers", "length", "dataset", "language", "all_classes", "_id")
#: DOLCE Table 4's unit spec (Table 3 letters) of the LongBench datasets it runs (multifieldqa
#: as MultiFieldQA, passage_retrieval_en as PassageRetrieval); the five Chinese datasets, which
#: DOLCE does not run, are raylc's choice by analogy: multifieldqa_zh as multifieldqa_en,
#: dureader and passage_retrieval_zh in blocks, vcsum in lines, lsht's shots every two lines as trec
DOLCE_UNITS: dict[str, str] = {
    "narrativeqa": "b", "qasper": "ls", "multifieldqa_en": "ls", "hotpotqa": "b", "2wikimqa": "b", "musique": "b",
    "gov_report": "s", "qmsum": "lt", "multi_news": "ls", "trec": "c", "triviaqa": "q", "samsum": "u",
    "passage_count": "b", "passage_retrieval_en": "b", "lcc": "l", "repobench-p": "b",
    "multifieldqa_zh": "ls", "dureader": "b", "vcsum": "l", "lsht": "c", "passage_retrieval_zh": "b",
}
#: the released fields the documents suite reads as ``task, id, question`` (:mod:`raylc.suites.documents`)
DOCUMENT_FIELDS = {"dataset": "task", "_id": "id", "input": "question"}
#: LongBench-E's length buckets (``eval.py`` ``scorer_e``) of the record's ``length``
LENGTH_CLASSES = ("0-4k", "4-8k", "8k+")


class LongBenchSuite(SweepSuite):
    """A LongBench v1 run on data in its released JSONL format (``data``: one file or a list):
    each dataset's prompt and generation length, ``eval.py``'s metric, first-line rule and
    rounding. ``datasets`` keeps only those; ``max_length`` cuts every prompt as ``pred.py``
    does (its ``model2maxlen``, in ``tokenizer``'s tokens), else the backend cuts the context
    to its window by ``probe.truncation`` (default ``middle``). ``chat_template``: ``pred_py`` (default) sends
    :data:`NO_CHAT_DATASETS` without the probe's chat template and the rest with it, as
    ``pred.py`` does; ``probe`` applies the probe's setting to every dataset. ``code_matcher``:
    fuzzywuzzy's matcher behind ``code_sim_score`` (lcc, repobench-p): ``difflib``, what
    ``requirements.txt`` installs, or ``levenshtein``, with python-Levenshtein installed
    (:func:`raylc.scoring.metrics.edit_sim`)."""

    kind: Literal["longbench"] = Field(description="`longbench`: LongBench v1 on its released data.")
    data: list[str] = Field(min_length=1, description=(
        "The released JSONL files (one per dataset, or several concatenated), local or s3://; one path or a "
        "list."))
    datasets: Optional[list[Literal[DATASETS]]] = Field(  # type: ignore[valid-type]
        default=None, min_length=1, description="Keep only these datasets; null: every dataset in the files.")
    tokenizer: Optional[str] = Field(default=None, description=(
        "Tokenizer of `max_length` and of the length counts: null, the offline default; `hf:<model>`, the model's."))
    max_length: Optional[int] = Field(default=None, ge=2, description=(
        "Cut every prompt to its first and last `max_length // 2` tokens as `pred.py` does (its `model2maxlen`); "
        "null: the backend cuts the context to its window by `probe.truncation` (default `middle`; an openai "
        "probe without `max_model_len` sends it whole)."))
    chat_template: Literal["pred_py", "probe"] = Field(default="pred_py", description=(
        "`pred_py`: trec, triviaqa, samsum, lsht, lcc and repobench-p without the chat template, the rest with it; "
        "`probe`: the probe's setting for every dataset."))
    code_matcher: Literal["difflib", "levenshtein"] = Field(default="difflib", description=(
        "fuzzywuzzy's matcher behind `code_sim_score` (lcc, repobench-p): `difflib`, what `requirements.txt` "
        "installs, or `levenshtein`, with python-Levenshtein installed."))

    axis: ClassVar[str] = "length_class"  # LongBench-E's buckets: contexts are not length-controlled
    columns = declare(
        ("all_classes", pl.List(pl.String), "The record's `all_classes` (trec, lsht: the labels; else null)."),
        ("language", pl.String, "The record's `language` (`en`, `zh`)."),
        ("words", pl.Int64, "The record's `length`: words, or characters for Chinese."),
        ("record", pl.Int64, "The record's position over all files, from 0 (`eval.py` sums in file order)."),
        ("length_class", pl.String, "LongBench-E's bucket of `words`: `0-4k`, `4-8k` or `8k+`."))
    sections = (TableSchema("longbench", "report/longbench.parquet", (
        "`eval.py`'s table: the score per dataset and LongBench-E's per length bucket."), declare(
        ("task", pl.String, "The dataset."),
        ("n", pl.Int64, "Its samples."),
        ("score", pl.Float64, "`round(100 * total / n, 2)`, the total summed in file order."),
        *((b, pl.Float64, f"The mean score (%) of its records in LongBench-E's `{b}` bucket (null: none).")
          for b in LENGTH_CLASSES))),)

    @field_validator("data", mode="before")
    @classmethod
    def _one_or_more(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def tokenizer_spec(self) -> Optional[str]:
        return self.tokenizer

    def kept(self, scores: pl.DataFrame) -> pl.DataFrame:
        """Every sample counts (``eval.py`` divides by the number of predictions)."""
        return scores.with_columns(kept=pl.lit(True))

    def report_sections(self, scores: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
        return [("longbench", "LongBench (score per dataset, as eval.py: round(100 * mean, 2))",
                 longbench_report(scores.filter("kept") if "kept" in scores.columns else scores))]


__all__ = ["DATASET_MAXLEN", "DATASET_METRIC", "DATASET_PROMPTS", "NO_CHAT_DATASETS", "LongBenchDataError",
           "LongBenchSuite", "build_longbench", "load_longbench", "longbench_report", "prompt"]


class LongBenchDataError(ValueError):
    """Malformed LongBench data; the one-line message names the file, record and field."""


def _check(uri: str, where: str, rec: Any) -> dict[str, Any]:
    where = located(uri, where, rec, FIELDS, LongBenchDataError)
    for field in ("input", "context", "dataset", "_id"):
        if not isinstance(rec[field], str):
            raise LongBenchDataError(f"{uri}: {where}: field {field!r} must be a string, got "
                                     f"{type(rec[field]).__name__}")
    if not rec["_id"]:
        raise LongBenchDataError(f"{uri}: {where}: field '_id' is empty")
    if rec["dataset"] not in DATASET_PROMPTS:
        raise LongBenchDataError(f"{uri}: {where}: unknown dataset {rec['dataset']!r} (known: {', '.join(DATASETS)})")
    for field, nullable in (("answers", False), ("all_classes", True)):
        value = rec[field]
        if value is None and nullable:
            continue
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise LongBenchDataError(f"{uri}: {where}: field {field!r} must be a list of strings")
    if not rec["answers"]:
        raise LongBenchDataError(f"{uri}: {where}: field 'answers' is empty")
    if not isinstance(rec["length"], int) or isinstance(rec["length"], bool) or rec["length"] < 0:
        raise LongBenchDataError(f"{uri}: {where}: field 'length' must be a non-negative integer")
    return {f: rec[f] for f in FIELDS}


LOADED_SCHEMA = {"input": pl.String, "context": pl.String, "answers": pl.List(pl.String), "length": pl.Int64,
                 "dataset": pl.String, "language": pl.String, "all_classes": pl.List(pl.String), "_id": pl.String,
                 "record": pl.Int64}


def load_longbench(uris: list[str] | str) -> pl.DataFrame:
    """The records of LongBench JSONL files (local or s3://) in file order, one row per sample
    with the :data:`FIELDS` columns and ``record`` (its position over all files, from 0).
    Raises :class:`LongBenchDataError` naming the file, line and field of the first problem
    (invalid JSON, missing or mistyped field, unknown dataset, duplicate ``(dataset, _id)``)."""
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    for uri in [uris] if isinstance(uris, str) else uris:
        try:
            records = json_records(uri, _read_bytes(uri))
        except (StoreError, LongBenchV2DataError) as exc:
            raise LongBenchDataError(str(exc)) from None
        for where, rec in records:
            row = _check(uri, where, rec)
            key = (row["dataset"], row["_id"])
            if key in seen:
                raise LongBenchDataError(f"{uri}: {where}: duplicate _id {row['_id']!r} in dataset {row['dataset']!r} "
                                         f"(first at {seen[key]})")
            seen[key] = f"{uri}: {where}"
            rows.append({**row, "record": len(rows)})
        if not records:
            raise LongBenchDataError(f"{uri}: no records")
    return pl.DataFrame(rows, schema=LOADED_SCHEMA)


def prompt(record: dict[str, Any]) -> tuple[str, str, str]:
    """(head, context, tail) of ``pred.py``'s ``prompt_format.format(**json_obj)``: the dataset's
    prompt split at ``{context}``, each side filled with the record's fields (the context is
    inserted as is, never parsed as a format string)."""
    template = DATASET_PROMPTS[record["dataset"]]
    head, _, tail = template.partition("{context}")
    fields = {k: v for k, v in record.items() if k != "context"}
    return head.format(**fields), record["context"], tail.format(**fields)


def length_class(words: pl.Expr) -> pl.Expr:
    """LongBench-E's bucket of a record's ``length`` (``scorer_e``: < 4000, < 8000, else)."""
    return pl.when(words < 4000).then(pl.lit("0-4k")).when(words < 8000).then(pl.lit("4-8k")).otherwise(pl.lit("8k+"))


def _metric(dataset: str, code_matcher: str) -> str:
    """:data:`DATASET_METRIC`'s metric, ``edit_sim_levenshtein`` for code with that matcher."""
    metric = DATASET_METRIC[dataset]
    return f"{metric}_levenshtein" if metric == "edit_sim" and code_matcher == "levenshtein" else metric


#: ``eval.py``'s metric functions by :data:`DATASET_METRIC`'s names
_SCORERS = {"f1": "qa_f1_score", "qa_f1_zh": "qa_f1_zh_score", "rouge_longbench": "rouge_score",
            "rouge_zh": "rouge_zh_score", "classification": "classification_score", "retrieval": "retrieval_score",
            "retrieval_zh": "retrieval_zh_score", "count": "count_score", "edit_sim": "code_sim_score"}


def _dataset_task(dataset: str) -> Task:
    metric = DATASET_METRIC[dataset]
    notes = ["No chat template unless `suite.chat_template: probe`." if dataset in NO_CHAT_DATASETS else "",
             "`edit_sim_levenshtein` with `suite.code_matcher: levenshtein`." if metric == "edit_sim" else ""]
    return Task(dataset, metric, DATASET_MAXLEN[dataset],
                f"`LongBench/pred.py`, `LongBench/eval.py`, `LongBench/metrics.py` (`{_SCORERS[metric]}`)",
                extractor="raw_first_line" if dataset in FIRST_LINE_DATASETS else "none",
                note=" ".join(n for n in notes if n))


LONGBENCH_INFO = SuiteInfo(
    title="LongBench v1",
    tasks=tuple(_dataset_task(d) for d in DATASETS),
    lengths="the records' own contexts (reported by LongBench-E's buckets of their `length`: 0-4k, 4-8k, 8k+)",
    data="`suite.data`: the released JSONL, one record per sample.",
    real_data="`data.zip` of the Hugging Face dataset `THUDM/LongBench` (one JSONL per dataset; LongBench-E's "
              "files end in `_e`), as published.",
    official="THUDM/LongBench (`LongBench/`)",
)


@register_suite(LongBenchSuite, LONGBENCH_INFO)
def build_longbench(suite: LongBenchSuite, seed: int) -> pl.DataFrame:
    """The samples table of ``suite.data``: task = the record's ``dataset``, sample_id its ``_id``,
    :data:`DATASET_METRIC`'s metric, extractor ``raw_first_line`` for :data:`FIRST_LINE_DATASETS`
    (else ``none``), ``max_tokens`` from :data:`DATASET_MAXLEN`, ``raw_prompt`` (see
    ``LongBenchSuite.chat_template``). ``length`` = the context's
    token count (``suite.tokenizer``), ``context_tokens`` what is left of it after
    ``suite.max_length``'s cut. Extra columns: ``all_classes``, ``language``, ``words`` (the
    record's ``length``), ``length_class`` and ``record`` (file order, which ``eval.py`` sums
    in). Nothing is random: ``seed`` is accepted for the common builder signature."""
    del seed
    data = load_longbench([suite.data_path(u) for u in suite.data])
    if suite.datasets is not None:
        missing = sorted(set(suite.datasets) - set(data["dataset"].to_list()))
        if missing:
            raise LongBenchDataError(
                f"{', '.join(suite.data)}: dataset {missing[0]!r} of suite.datasets has no records")
        data = data.filter(pl.col("dataset").is_in(suite.datasets))
    tok = get_tokenizer(suite.tokenizer)
    rows = []
    for rec in data.iter_rows(named=True):
        head, context, tail = prompt(rec)
        head, context, tail, n, kept = counted_cut(head, context, tail, tok, suite.max_length)
        dataset = rec["dataset"]
        rows.append({
            "task": dataset, "sample_id": rec["_id"], "length": n, "context_tokens": kept,
            "head": head, "context": context, "tail": tail, "question": rec["input"], "answers": rec["answers"],
            "gold": rec["answers"][0], "metric": _metric(dataset, suite.code_matcher),
            "extractor": "raw_first_line" if dataset in FIRST_LINE_DATASETS else "none", "followup": None,
            "max_tokens": DATASET_MAXLEN[dataset], "followup_max_tokens": None, "all_classes": rec["all_classes"],
            "raw_prompt": suite.chat_template == "pred_py" and dataset in NO_CHAT_DATASETS,
            "language": rec["language"], "words": rec["length"], "record": rec["record"],
        })
    extra = {"raw_prompt": pl.Boolean(),
             **{c.name: c.dtype for c in LongBenchSuite.columns if c.name != "length_class"}}  # that one is added next
    samples = pl.DataFrame(rows, schema={**SAMPLE_SCHEMA, **extra})
    return check_samples(samples.with_columns(length_class=length_class(pl.col("words"))), ", ".join(suite.data))


def longbench_report(scores: pl.DataFrame) -> pl.DataFrame:
    """``eval.py``'s table from one row per sample (``task``, ``score`` in [0, 1], ``record``):
    per dataset ``n`` and ``score`` = ``round(100 * total / n, 2)``, the total summed in file
    order from 0.0 as ``scorer`` does, and LongBench-E's ``0-4k``, ``4-8k``, ``8k+`` (the mean
    per ``length_class``, null for an empty bucket), in :data:`DATASETS` order."""
    need = [c for c in ("task", "score", "record", "length_class") if c not in scores.columns]
    if need:
        raise ValueError(f"longbench_report: scores lack column {need[0]!r}")
    out = []
    for task in [d for d in DATASETS if d in set(scores["task"].to_list())]:
        rows = scores.filter(pl.col("task") == task).sort("record")
        values = rows["score"].fill_null(0.0).to_list()
        total = 0.0
        for v in values:  # eval.py: total_score += score, in file order
            total += v
        buckets = {}
        for bucket in LENGTH_CLASSES:
            part = rows.filter(pl.col("length_class") == bucket)["score"].fill_null(0.0)
            buckets[bucket] = round(100 * float(part.to_numpy().mean()), 2) if part.len() else None
        out.append({"task": task, "n": len(values), "score": round(100 * total / len(values), 2), **buckets})
    schema = {"task": pl.String, "n": pl.Int64, "score": pl.Float64, **{b: pl.Float64 for b in LENGTH_CLASSES}}
    return pl.DataFrame(out, schema=schema)
