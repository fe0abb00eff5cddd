"""LLM-as-judge scoring through the same backends and actor pools as the probe.

The judge is a second backend config (``judge:`` in the job, any ``probe`` backend). The
samples table's judge metrics (100-LongBench Appendix A.2) are scored as uservan/100-LongBench
``utils/metrics.py`` scores them, with its prompts (:mod:`raylc.scoring.judge_prompts`):

* ``judge_qa`` (``qa_model_score``): one call per correct answer, ``Correct answers:`` holding
  that one answer; fluency x correctness / 6;
* ``judge_sum`` (``sum_model_score``): a fluency call on the stripped summary and a precision
  call against each expert summary; fluency x precision / sentence_count (0 when
  sentence_count is 0);

the max over the answers (``eval_trec.py`` ``scorer``). A reply is read from its last ``{...}``
as JSON (a summary reply whose object does not parse: its last ```json block); an unparseable
reply, a missing or non-numeric grade counts 0, as in ``metrics.py``. An empty prediction
scores 0 without a call (``eval_trec.py``: ``if len(prediction) != 0``). Not as the official
code: a call that failed (null completion after the backend's retries) makes the row's score
null instead of 0, and an unparseable summary reply is not asked again (``metrics.py`` tries
twice). Calls go through ``generate`` (a run's :meth:`raylc.run.runner.Run.generate`, with
checkpoints of their own), identical prompts once.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable, Optional

import polars as pl

from raylc.scoring.extract import PY_WHITESPACE
from raylc.scoring.judge_prompts import QA_JUDGE, SUM_FLUENCY, SUM_PRECISION

JUDGE_QA_TEMPLATE = QA_JUDGE
JUDGE_FLUENCY_TEMPLATE = SUM_FLUENCY
JUDGE_PRECISION_TEMPLATE = SUM_PRECISION
#: judge metric -> its calls per (row, reference): call kind -> template
JUDGE_TEMPLATES: dict[str, dict[str, str]] = {
    "judge_qa": {"qa": JUDGE_QA_TEMPLATE},
    "judge_sum": {"fluency": JUDGE_FLUENCY_TEMPLATE, "precision": JUDGE_PRECISION_TEMPLATE},
}
QA_FLUENCY_MAX, QA_CORRECTNESS_MAX = 2, 3


def _render(template: str, values: dict[str, pl.Expr]) -> pl.Expr:
    """``template`` with ``{name}`` placeholders of ``values`` filled per row (other braces kept)."""
    pieces = re.split("{(" + "|".join(values) + ")}", template)
    return pl.concat_str([values[p] if i % 2 else pl.lit(p) for i, p in enumerate(pieces)])


def _references(frame: pl.DataFrame) -> pl.Expr:
    """Each row's references as a list: ``reference`` (a string or a list) if present, else ``answers``."""
    col = "reference" if "reference" in frame.columns else "answers"
    if isinstance(frame.schema[col], pl.List):
        return pl.col(col).cast(pl.List(pl.String))
    return pl.when(pl.col(col).is_null()).then(None).otherwise(pl.concat_list(pl.col(col).cast(pl.String)))


def judge_sample_prompts(frame: pl.DataFrame) -> pl.DataFrame:
    """The judge calls of ``frame``'s rows (``metric`` ``judge_qa`` or ``judge_sum``, ``question``,
    ``answers`` or ``reference``, ``prediction``): one row per (``row``, ``reference``, ``kind``)
    with its ``judge_prompt`` (:data:`JUDGE_TEMPLATES`). A summary's fluency call does not depend
    on the reference: it is made once per row (``reference`` null)."""
    unknown = frame.filter(~pl.col("metric").is_in(list(JUDGE_TEMPLATES)))
    if unknown.height:
        raise ValueError(f"no judge template for metric {unknown['metric'][0]!r}; known: {sorted(JUDGE_TEMPLATES)}")
    rows = (frame.with_row_index("row")
            .select("row", "metric", question=pl.col("question").fill_null(""), reference=_references(frame),
                    prediction=pl.col("prediction").fill_null(""))
            .explode("reference").drop_nulls("reference"))
    stripped = pl.col("prediction").str.strip_chars(PY_WHITESPACE)
    qa = rows.filter(pl.col("metric") == "judge_qa").select(
        "row", "reference", kind=pl.lit("qa"), judge_prompt=_render(JUDGE_QA_TEMPLATE, {
            "question": pl.col("question"), "correct_answers": pl.col("reference"),
            "parsed_output": pl.col("prediction")}))
    summaries = rows.filter(pl.col("metric") == "judge_sum")
    fluency = summaries.unique("row", keep="first", maintain_order=True).select(
        "row", reference=pl.lit(None, pl.String), kind=pl.lit("fluency"),
        judge_prompt=_render(JUDGE_FLUENCY_TEMPLATE, {"text": stripped}))
    precision = summaries.select("row", "reference", kind=pl.lit("precision"), judge_prompt=_render(
        JUDGE_PRECISION_TEMPLATE, {"expert_summary": pl.col("reference"), "summary": stripped}))
    return pl.concat([qa, fluency, precision]).sort("row", maintain_order=True)


_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)
_JSON_BLOCK = re.compile(r"(?:```json)(.+)(?:```)", re.DOTALL)


def parse_judgement(text: Optional[str], kind: str) -> Optional[dict[str, Any]]:
    """The grades of a judge reply (``metrics.py`` ``parse_qa_json`` / ``parse_sum_json``): the last
    non-greedy ``{...}`` parsed as JSON; for the summary calls, when that fails, the last ```json
    block. None when nothing parses."""
    found = _OBJECT.findall(text or "")
    if not found:
        return None
    try:
        grades = json.loads(found[-1])
    except ValueError:
        block = _JSON_BLOCK.findall(text) if kind != "qa" else []
        try:
            grades = json.loads(block[-1]) if block else None
        except ValueError:
            grades = None
    return grades if isinstance(grades, dict) else None


def _grade(grades: Optional[dict[str, Any]], key: str) -> float:
    """A grade as a number; missing, null or non-numeric counts 0 (``metrics.py`` ``set_None_0``)."""
    value = (grades or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _qa_score(grades: Optional[dict[str, Any]]) -> float:
    """``qa_model_score``: fluency x correctness / 6 (0 for an unparseable reply)."""
    return _grade(grades, "fluency") * _grade(grades, "correctness") / (QA_FLUENCY_MAX * QA_CORRECTNESS_MAX)


def _sum_score(fluency: Optional[dict[str, Any]], precision: Optional[dict[str, Any]]) -> float:
    """``sum_model_score``: fluency x precision / sentence_count (0 when sentence_count is 0 or a
    reply does not parse)."""
    if fluency is None or precision is None:
        return 0.0
    count = _grade(precision, "sentence_count")
    return _grade(fluency, "fluency") * (_grade(precision, "precision") / count if count > 0 else 0.0)


def judge_sample_scores(frame: pl.DataFrame, generate: Callable[[pl.Series], pl.DataFrame]) -> pl.Series:
    """Judge-metric scores of ``frame``'s rows (see :func:`judge_sample_prompts`) through
    ``generate(prompts)`` (one generation row per prompt, in order): the max over the row's
    references. A null or empty prediction scores 0 without a judge call; a row with a failed
    call (null completion) is null."""
    empty = (frame["prediction"].is_null() | (frame["prediction"] == "")).to_list()
    calls = judge_sample_prompts(frame)
    calls = calls.filter(~pl.Series(empty).gather(calls["row"]))
    replies: dict[str, Optional[str]] = {}
    if calls.height:
        asked = calls["judge_prompt"].unique(maintain_order=True)
        replies = dict(zip(asked.to_list(), generate(asked)["completion"].to_list()))
    best: list[Optional[float]] = [0.0 if e else None for e in empty]
    failed = [False] * frame.height
    fluency: dict[int, Optional[dict[str, Any]]] = {}
    for row, kind, prompt in calls.select("row", "kind", "judge_prompt").iter_rows():
        if replies[prompt] is None:
            failed[row] = True
        elif kind == "fluency":
            fluency[row] = parse_judgement(replies[prompt], kind)
    for row, kind, prompt in calls.select("row", "kind", "judge_prompt").iter_rows():
        if failed[row] or kind == "fluency":
            continue
        grades = parse_judgement(replies[prompt], kind)
        score = _qa_score(grades) if kind == "qa" else _sum_score(fluency.get(row), grades)
        best[row] = score if best[row] is None else max(best[row], score)
    return pl.Series("judge_score", [None if f else b for f, b in zip(failed, best)], dtype=pl.Float64)


@functools.lru_cache(maxsize=8)
def _pattern(template: str) -> re.Pattern:
    """A regex matching the prompts of ``template``, one group per placeholder."""
    pieces = re.split(r"{(question|correct_answers|parsed_output|text|expert_summary|summary)}", template)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else "(.*?)" for i, p in enumerate(pieces)), re.DOTALL)


_WORDS = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def _sentences(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.!?])\s+", text.strip()) if _words(x)]


def simulated_judgement(prompt: str) -> str | None:
    """The simulated probe's reply to a :data:`JUDGE_TEMPLATES` prompt (None for any other prompt).

    An instrument for testing the judge plumbing, not a grader: QA fluency 2 for a non-empty
    answer, correctness 3 when the correct answer occurs in it, 1 when they share a word, else 0;
    summaries: fluency 1 for a text with a word, a sentence is supported when most of its words
    occur in the expert summary.
    """
    qa = _pattern(JUDGE_QA_TEMPLATE).fullmatch(prompt)
    if qa is not None:
        ref, answer = qa.group(2).strip().lower(), qa.group(3).strip().lower()
        correct = 3 if ref and ref in answer else (1 if _words(ref) & _words(answer) else 0)
        return f'Compared with the correct answers. {{"fluency": {2 if answer else 0}, "correctness": {correct}}}'
    fluent = _pattern(JUDGE_FLUENCY_TEMPLATE).fullmatch(prompt)
    if fluent is not None:
        return f'Read the text. {{"fluency": {1 if _words(fluent.group(1)) else 0}}}'
    summ = _pattern(JUDGE_PRECISION_TEMPLATE).fullmatch(prompt)
    if summ is not None:
        expert = _words(summ.group(1))
        sentences = _sentences(summ.group(2))
        supported = sum(len(_words(x) & expert) > len(_words(x)) / 2 for x in sentences)
        return f'Checked each sentence. {{"precision": {supported}, "sentence_count": {len(sentences)}}}'
    return None
