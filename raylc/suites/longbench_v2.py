"""LongBench v2 (Bai et al.): loader for the released data, the Appendix C prompts, and the
Table 2 / Table 4 report.

Data: the released ``data.json`` (a JSON list) or JSON Lines, one record per question with
``_id, domain, sub_domain, difficulty (easy/hard), length (short/medium/long), question,
choice_A..choice_D, answer (A-D), context``.

Prompts (Appendix C.3), byte for byte the official ``prompts/0shot.txt``, ``0shot_cot.txt``
and ``0shot_cot_ans.txt`` of THUDM/LongBench: zero-shot asks to "answer the question below"
and ends with 'Format your response as follows: "The correct answer is (insert answer
here)".'; chain of thought asks to "answer the questions below" and is two calls, the first
ending with "Let’s think step by step:" (a typographic apostrophe, as the files have it);
the second (``followup``) replaces the document by "The text is too long and omitted here.",
repeats the question and choices, the cue and the model's reasoning (stripped, as ``pred.py``
inserts ``output.strip()``), and asks for the final answer. Generation budgets
are C.2's: 128 new tokens zero-shot, 1024 for the reasoning call and 128 for the answer
call; C.2's temperature 0.1 is the probe's ``sampling.temperature``. Contexts are not
length-controlled: ``length`` is the context's token count and the backend truncates from
the middle to the model window (Section 4 "Setup"). First, as ``pred.py`` ``query_llm`` does, a
prompt over ``max_length`` tokens (``config/model2maxlen.json``: 120000 for every open model,
200000 for Claude) keeps its first and last ``max_length // 2`` tokens, decoded as one
(:func:`raylc.text.truncation.truncate_prompt_middle`, counted with ``suite.tokenizer``; give it
the model's, ``hf:<model>``, for the official cut).

Scoring: the ``longbench_v2`` extractor reads "The correct answer is (X)" (``pred.py``
``extract_answer``); no letter is an invalid output, which the compensated score credits with
0.25 (Table 4; ``result.py`` with ``compensated = True``). The report gives both, each
``round(100 * sum / n, 1)`` per split as ``result.py`` prints them. ``pred.py`` writes
no result for a question whose call returned an empty text (``if output == '': continue``),
so such questions leave the denominators: ``empty_outputs: skip`` (the default) does the
same; ``empty_outputs: invalid`` counts them as invalid outputs instead (raylc's earlier rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Optional

import polars as pl
from pydantic import Field

from raylc.io.schemas import TableSchema, declare
from raylc.io.store import StoreError, json_records, locate
from raylc.suites.registry import SuiteInfo, SweepSuite, Task, register_suite
from raylc.suites.samples import COMPLETION, SAMPLE_SCHEMA, check_samples
from raylc.text.tokenize import get_tokenizer
from raylc.text.truncation import counted_cut


class LongBenchV2Suite(SweepSuite):
    """A LongBench v2 run on data in its released JSON/JSONL format (``data``), zero-shot or
    two-call chain of thought (Appendix C); prompts over ``max_length`` tokens are cut as
    ``pred.py`` cuts them, then contexts to the probe's window by ``probe.truncation`` (default
    ``middle``, the paper's); invalid outputs count 0.25 in the compensated score."""

    kind: Literal["longbench_v2"] = Field(description="`longbench_v2`: LongBench v2 on its released data.")
    data: str = Field(min_length=1, description=(
        "The released `data.json` (a JSON list) or JSON Lines, local or s3://."))
    mode: Literal["zero_shot", "cot"] = Field(default="zero_shot", description=(
        "`zero_shot`, or `cot`: two calls, the reasoning then the answer (Appendix C)."))
    tokenizer: Optional[str] = Field(default=None, description=(
        "Tokenizer of `max_length` and of the context's length: null, the offline default; `hf:<name-or-path>`."))
    max_length: Optional[int] = Field(default=120000, ge=2, description=(
        "Cut a prompt of more than this many tokens to its first and last `max_length // 2` tokens, decoded as one, "
        "as `pred.py` `query_llm` does (`config/model2maxlen.json`: 120000 for every open model, 200000 for "
        "Claude); null: no cut here, the backend cuts the context to its window by `probe.truncation`."))
    empty_outputs: Literal["skip", "invalid"] = Field(default="skip", description=(
        "An empty output (first or answer call): `skip` it as the official `pred.py` does, or count it "
        "`invalid`."))

    axis: ClassVar[str] = "length_class"  # short / medium / long: its contexts are not length-controlled
    columns = declare(
        ("domain", pl.String, "The record's `domain`."),
        ("sub_domain", pl.String, "The record's `sub_domain`."),
        ("difficulty", pl.String, "`easy` or `hard`."),
        ("length_class", pl.String, "The record's `length`: `short`, `medium` or `long` (the report's axis)."))

    def tokenizer_spec(self) -> Optional[str]:
        return self.tokenizer

    sections = (TableSchema("longbench_v2", "report/longbench_v2.parquet", (
        "Table 2 and Table 4 of the paper: accuracy per split, as `result.py` prints it."), declare(
        ("split", pl.String, "`overall`, `easy`, `hard`, `short`, `medium` or `long`."),
        ("n", pl.Int64, "Questions in the split (those counted)."),
        ("accuracy", pl.Float64, "Percent correct, invalid outputs wrong, `round(x, 1)`."),
        ("invalid", pl.Float64, "Percent invalid outputs (no letter extracted)."),
        ("compensated", pl.Float64, "Percent correct with each invalid output counted 0.25 (Table 4)."))),)

    def kept(self, scores: pl.DataFrame) -> pl.DataFrame:
        """With ``empty_outputs: skip`` a question whose final completion is empty does not count."""
        kept = super().kept(scores)
        if self.empty_outputs == "skip" and "completion" in kept.columns:
            kept = kept.with_columns(kept=pl.col("kept") & (pl.col("completion") != "").fill_null(True))
        return kept

    def report_sections(self, scores: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
        counted = scores.filter("kept") if "kept" in scores.columns else scores
        skipped = scores.height - counted.height
        note = f"; {skipped} empty output(s) skipped, as pred.py does" if skipped else ""
        table = longbench_v2_report(counted)
        rounded = [pl.col(c).map_elements(lambda v: round(v, 1), return_dtype=pl.Float64)  # result.py: round(x, 1)
                   for c in ("accuracy", "invalid", "compensated")]
        return [("longbench_v2", f"LongBench v2 (accuracy %, compensated: invalid outputs count 0.25{note})",
                 table.with_columns(rounded))]


__all__ = ["LongBenchV2DataError", "build_longbench_v2", "load_longbench_v2", "longbench_v2_report", "prompt"]


class LongBenchV2DataError(ValueError):
    """Malformed LongBench v2 data; the one-line message names the file, record and field."""


FIELDS = ("_id", "domain", "sub_domain", "difficulty", "length", "question", "choice_A", "choice_B", "choice_C",
          "choice_D", "answer", "context")
DIFFICULTIES = ("easy", "hard")
LENGTH_CLASSES = ("short", "medium", "long")
CHOICES = ("A", "B", "C", "D")
SPLITS = ("overall", *DIFFICULTIES, *LENGTH_CLASSES)

_ANSWER_FORMAT = 'Format your response as follows: "The correct answer is (insert answer here)".'
COT_FOLLOWUP = "\n\nBased on the above, what is the single, most likely answer choice? " + _ANSWER_FORMAT
_HEAD = "Please read the following text and answer the question below.\n\n<text>\n"  # prompts/0shot.txt
_COT_HEAD = "Please read the following text and answer the questions below.\n\n<text>\n"  # prompts/0shot_cot.txt
_COT_CUE = "Let\u2019s think step by step:"
_OMITTED = ("Please read the following text and answer the questions below.\n\nThe text is too long and omitted "
            "here.\n\n")
MAX_TOKENS = {"zero_shot": 128, "cot": 1024}
COT_ANSWER_MAX_TOKENS = 128


def _read_bytes(uri: str) -> bytes:
    store, name = locate(uri)
    if not store.exists(name):
        raise LongBenchV2DataError(f"{uri}: no such file")
    try:
        with store.fs.open_input_file(store.path(name)) as fh:
            return fh.read()
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc
        raise StoreError(f"{uri}: cannot read ({first})") from None


def _records(uri: str, data: bytes) -> list[tuple[str, Any]]:
    """(where, record) pairs: ``record i`` of a JSON list or ``line n`` of JSON Lines
    (:func:`raylc.io.store.json_records`, the one JSON parser)."""
    try:
        return json_records(uri, data)
    except StoreError as exc:
        raise LongBenchV2DataError(str(exc)) from None


def located(uri: str, where: str, rec: Any, fields: Sequence[str], error: type[ValueError]) -> str:
    """``where`` with the record's ``_id`` for messages; ``error`` (one line naming ``uri``) when
    ``rec`` is not a JSON object or lacks one of ``fields`` (LongBench v1 and v2 records)."""
    if not isinstance(rec, dict):
        raise error(f"{uri}: {where}: expected a JSON object, got {type(rec).__name__}")
    where = f"{where} (_id={rec['_id']!r})" if isinstance(rec.get("_id"), str) else where
    missing = next((f for f in fields if f not in rec), None)
    if missing is not None:
        raise error(f"{uri}: {where}: missing field {missing!r}")
    return where


def _check(uri: str, where: str, rec: Any) -> dict[str, str]:
    where = located(uri, where, rec, FIELDS, LongBenchV2DataError)
    for field in FIELDS:
        if not isinstance(rec[field], str):
            raise LongBenchV2DataError(
                f"{uri}: {where}: field {field!r} must be a string, got {type(rec[field]).__name__}")
    for field, allowed in (("difficulty", DIFFICULTIES), ("length", LENGTH_CLASSES), ("answer", CHOICES)):
        if rec[field] not in allowed:
            raise LongBenchV2DataError(
                f"{uri}: {where}: field {field!r} must be one of {', '.join(allowed)} (got {rec[field]!r})")
    if not rec["_id"]:
        raise LongBenchV2DataError(f"{uri}: {where}: field '_id' is empty")
    return {f: rec[f] for f in FIELDS}


def load_longbench_v2(uri: str) -> pl.DataFrame:
    """The records of a LongBench v2 file (JSON list or JSON Lines; local or s3://), one row per
    question with the :data:`FIELDS` columns (all strings). Raises
    :class:`LongBenchV2DataError` naming the file, record and field of the first problem
    (invalid JSON, missing or non-string field, bad difficulty/length/answer, duplicate _id)."""
    rows = []
    seen: dict[str, str] = {}
    for where, rec in _records(uri, _read_bytes(uri)):
        row = _check(uri, where, rec)
        if row["_id"] in seen:
            raise LongBenchV2DataError(f"{uri}: {where}: duplicate _id {row['_id']!r} (first at {seen[row['_id']]})")
        seen[row["_id"]] = where
        rows.append(row)
    if not rows:
        raise LongBenchV2DataError(f"{uri}: no records")
    return pl.DataFrame(rows, schema={f: pl.String for f in FIELDS})


def _question(record: dict[str, str]) -> str:
    choices = "".join(f"\n({c}) {record[f'choice_{c}'].strip()}" for c in CHOICES)
    return f"What is the correct answer to this question: {record['question'].strip()}\nChoices:{choices}"


def prompt(record: dict[str, str], mode: str) -> tuple[str, str, str]:
    """(head, context, tail) of the Appendix C prompt; ``mode`` is ``zero_shot`` or ``cot``."""
    head, cue = (_HEAD, _ANSWER_FORMAT) if mode == "zero_shot" else (_COT_HEAD, _COT_CUE)
    return head, record["context"].strip(), f"\n</text>\n\n{_question(record)}\n\n{cue}"


def cot_followup(record: dict[str, str]) -> str:
    """The answer call of the chain-of-thought setting (Appendix C.3): the document omitted, the
    reasoning of the first call in place of :data:`raylc.suites.samples.COMPLETION`."""
    return f"{_OMITTED}{_question(record)}\n\n{_COT_CUE} {COMPLETION}{COT_FOLLOWUP}"


LONGBENCH_V2_INFO = SuiteInfo(
    title="LongBench v2",
    tasks=(Task("longbench_v2", "longbench_v2",
                f"{MAX_TOKENS['zero_shot']} (zero_shot); {MAX_TOKENS['cot']} + {COT_ANSWER_MAX_TOKENS} (cot)",
                "THUDM/LongBench `pred.py`, `result.py`, `prompts/0shot.txt`, `0shot_cot.txt`, `0shot_cot_ans.txt`",
                extractor="longbench_v2",
                note="Accuracy of the letter in \"The correct answer is (X)\"; an invalid output counts 0.25 in the "
                     "compensated score. A prompt over `suite.max_length` tokens (120000) is cut as `pred.py` "
                     "cuts it, then contexts to the probe's window by `probe.truncation` (default `middle`)."),),
    lengths="the records' own contexts (reported by their `length` class: short, medium, long)",
    data="`suite.data`: one record per question.",
    real_data="`data.json` of the Hugging Face dataset `THUDM/LongBench-v2`, as published.",
    official="THUDM/LongBench (LongBench v2)",
)


@register_suite(LongBenchV2Suite, LONGBENCH_V2_INFO)
def build_longbench_v2(suite: LongBenchV2Suite, seed: int) -> pl.DataFrame:
    """The samples table of ``suite.data`` in ``suite.mode``: task ``longbench_v2``, sample_id the
    record's ``_id``, metric and extractor ``longbench_v2``, extra columns ``domain,
    sub_domain, difficulty, length_class``. ``length``: the context's token count
    (``suite.tokenizer``); ``context_tokens``: the same after the ``max_length`` cut. Nothing is
    random: ``seed`` is accepted for the common builder signature and does not change the table."""
    del seed
    data = load_longbench_v2(suite.data_path(suite.data))
    tok = get_tokenizer(suite.tokenizer)
    cot = suite.mode == "cot"
    rows = []
    for rec in data.iter_rows(named=True):
        head, context, tail = prompt(rec, suite.mode)
        head, context, tail, n, kept = counted_cut(head, context, tail, tok, suite.max_length, together=True)
        rows.append({
            "task": "longbench_v2", "sample_id": rec["_id"], "length": n, "context_tokens": kept, "head": head,
            "context": context, "tail": tail, "question": rec["question"], "answers": [rec["answer"]],
            "gold": f"The correct answer is ({rec['answer']})", "metric": "longbench_v2", "extractor": "longbench_v2",
            "followup": cot_followup(rec) if cot else None, "max_tokens": MAX_TOKENS[suite.mode],
            "followup_max_tokens": COT_ANSWER_MAX_TOKENS if cot else None, "domain": rec["domain"],
            "sub_domain": rec["sub_domain"], "difficulty": rec["difficulty"], "length_class": rec["length"],
        })
    extra = {c.name: c.dtype for c in LongBenchV2Suite.columns}
    return check_samples(pl.DataFrame(rows, schema={**SAMPLE_SCHEMA, **extra}), suite.data)


def longbench_v2_report(scores: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """Table 2 and Table 4 of the paper from one row per sample.

    ``scores`` has ``difficulty``, ``length_class``, ``prediction`` (the extracted letter,
    null for an invalid output) and ``answer`` (the gold letter; else the first item of an
    ``answers`` list). Returns one row per (``by`` groups,) split in :data:`SPLITS` (overall,
    easy, hard, short, medium, long) with ``n``, ``accuracy`` (% correct, invalid outputs
    wrong: Table 2), ``invalid`` (% invalid outputs) and ``compensated`` (% with each invalid
    output counted as 0.25 correct: Table 4)."""
    need = [c for c in ("difficulty", "length_class", "prediction") if c not in scores.columns]
    if "answer" not in scores.columns and "answers" not in scores.columns:
        need.append("answer")
    if need:
        raise ValueError(f"longbench_v2_report: scores lack column {need[0]!r}")
    answer = pl.col("answer") if "answer" in scores.columns else pl.col("answers").list.first()
    base = scores.select(
        *by, "difficulty", "length_class",
        correct=(pl.col("prediction") == answer).fill_null(False).cast(pl.Float64),
        invalid=pl.col("prediction").is_null().cast(pl.Float64),
    )
    parts = [base.with_columns(split=pl.lit("overall")),
             base.with_columns(split=pl.col("difficulty")),
             base.with_columns(split=pl.col("length_class"))]
    stats = pl.concat(parts).group_by(*by, "split").agg(  # result.py: 100 * (sum of acc) / n
        n=pl.len(),
        accuracy=100 * pl.col("correct").sum() / pl.len(),
        invalid=100 * pl.col("invalid").sum() / pl.len(),
        compensated=100 * (pl.col("correct") + 0.25 * pl.col("invalid")).sum() / pl.len(),
    )
    grid = pl.DataFrame({"split": list(SPLITS), "_order": range(len(SPLITS))})
    if by:
        grid = base.select(*by).unique().join(grid, how="cross")
    return (
        grid.join(stats, on=[*by, "split"], how="left")
        .sort(*by, "_order")
        .select(*by, "split", pl.col("n").fill_null(0).cast(pl.Int64), "accuracy", "invalid", "compensated")
    )
