"""LLM-as-judge scoring through the same backends and actor pools as the probe.

The judge is a second backend config (``judge:`` in the job, any ``probe`` backend). The
samples table's judge metrics (100-LongBench Appendix A.2) have their prompts
(:data:`JUDGE_TEMPLATES`, rubrics after HELMET's model-based evaluation): ``judge_qa`` =
fluency (0-2) x correctness (0-3) / 6 and ``judge_sum`` = fluency (0/1) x precision
(supported sentences / sentences), one judge call per row (:func:`judge_sample_scores`)
through ``generate`` (in-process or :func:`raylc.run.ray_exec.generate_on_ray`); an
unparseable or failed judgement is null.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import polars as pl

# --------------------------------------------------------------------------------------------- #
# 100-LongBench judge metrics (Appendix A.2): judge_qa = fluency x correctness,
# judge_sum = fluency x precision; rubrics after HELMET's model-based evaluation (Tables 10-13)
# --------------------------------------------------------------------------------------------- #

JUDGE_QA_TEMPLATE = (
    "Please act as an impartial judge and evaluate the quality of the provided answer to the provided "
    "question. You are not given the context the question is about, but you are given the correct answers, "
    "which achieve full scores on every criterion; assess the provided answer against them.\n\n"
    "Grading rubric:\n\n"
    "Fluency:\n"
    "- Score 0 (incoherent): incoherent sentences or gibberish.\n"
    "- Score 1 (coherent but repetitive): coherent, fluent, grammatically correct, but repetitive.\n"
    "- Score 2 (coherent and non-repetitive): coherent, non-repetitive, fluent, grammatically correct.\n\n"
    "Correctness:\n"
    "- Score 0 (incorrect): does not agree with any of the correct answers.\n"
    "- Score 1 (partly correct): partly agrees with one of the correct answers (for example, the question asks "
    "for a date and a person and only the date is right).\n"
    "- Score 2 (correct but not fully relevant): fully agrees with one of the correct answers but adds unrelated "
    "information. Extra details that are relevant to the question are not unrelated.\n"
    "- Score 3 (correct and relevant): fully agrees with one of the correct answers and says nothing unrelated; "
    "a longer answer whose every part is relevant (\"They are headed for the North Pole\" for the correct answer "
    "\"the North Pole\") still scores 3.\n\n"
    "Read the question, the correct answers and the answer. Reason step by step about the answer first, then "
    'give your scores in this JSON format: {"fluency": 2, "correctness": 3}.\n\n'
    "Question: {question}\nCorrect answers: {reference}\nAnswer: {prediction}\n"
)

JUDGE_SUM_TEMPLATE = (
    "Please act as an impartial judge and evaluate the quality of the provided summary against an expert "
    "summary of the same text.\n\n"
    "Grading rubric:\n\n"
    "Fluency:\n"
    "- Score 0 (incoherent, repetitive or incomplete): incoherent or repeated sentences (even if not word for "
    "word), an incomplete summary (for example only \"Summary:\"), or gibberish.\n"
    "- Score 1 (fluent): coherent, non-repetitive, fluent and grammatically correct. A truncated last sentence "
    "alone does not make a fluent summary score 0.\n\n"
    "Precision:\n"
    "- Decide for each sentence of the provided summary whether it is supported by the expert summary. A "
    "sentence is supported when its major facts agree with the expert summary, even if minor details (dates, "
    "names) are not mentioned there; it is not supported when its major facts are missing from or contradicted "
    "by the expert summary.\n"
    "- precision: the number of supported sentences; sentence_count: the number of sentences in the provided "
    "summary.\n\n"
    "Read the expert summary and the provided summary. Reason step by step first, then give your scores in this "
    'JSON format: {"fluency": 1, "precision": 3, "sentence_count": 4}.\n\n'
    "Expert summary: {reference}\n\nProvided summary: {prediction}\n"
)

#: Judge prompts of the samples table's judge metrics (:data:`raylc.suites.samples.SAMPLE_METRICS`).
JUDGE_TEMPLATES = {"judge_qa": JUDGE_QA_TEMPLATE, "judge_sum": JUDGE_SUM_TEMPLATE}
QA_FLUENCY_MAX, QA_CORRECTNESS_MAX = 2, 3


def _render(template: str, values: dict[str, pl.Expr]) -> pl.Expr:
    """``template`` with ``{name}`` placeholders of ``values`` filled per row (other braces kept)."""
    pieces = re.split("{(" + "|".join(values) + ")}", template)
    return pl.concat_str([values[p] if i % 2 else pl.lit(p) for i, p in enumerate(pieces)])


def _reference_expr(frame: pl.DataFrame) -> pl.Expr:
    """The references as the judge sees them: one summary, or the answer list as ``["a", "b"]``."""
    if "reference" in frame.columns:
        col, dtype = pl.col("reference"), frame.schema["reference"]
    else:
        col, dtype = pl.col("answers"), frame.schema["answers"]
    if isinstance(dtype, pl.List):
        joined = pl.concat_str([pl.lit('["'), col.list.join('", "'), pl.lit('"]')])
        return pl.when(pl.col("metric") == "judge_sum").then(col.list.first()).otherwise(joined).fill_null("")
    return col.cast(pl.String).fill_null("")


def judge_sample_prompts(frame: pl.DataFrame) -> pl.Series:
    """Judge prompts for rows with ``metric`` (``judge_qa`` or ``judge_sum``), ``question``,
    ``answers`` (list; or a ``reference`` column) and ``prediction`` (:data:`JUDGE_TEMPLATES`)."""
    unknown = frame.filter(~pl.col("metric").is_in(list(JUDGE_TEMPLATES)))
    if unknown.height:
        raise ValueError(f"no judge template for metric {unknown['metric'][0]!r}; known: {sorted(JUDGE_TEMPLATES)}")
    values = {"question": pl.col("question").fill_null(""), "reference": _reference_expr(frame),
              "prediction": pl.col("prediction").fill_null("")}
    prompt = pl.when(pl.col("metric") == "judge_qa").then(_render(JUDGE_QA_TEMPLATE, values)).otherwise(
        _render(JUDGE_SUM_TEMPLATE, values))
    return frame.select(prompt.alias("judge_prompt"))["judge_prompt"]


def _last_int(texts: pl.Expr, key: str) -> pl.Expr:
    found = texts.str.extract_all(rf"[\"']{key}[\"']\s*:\s*\d+").list.last()
    return found.str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)


def parse_judgements(texts: pl.Series, metrics: pl.Series | str) -> pl.Series:
    """Scores in [0, 1] from judge replies (the last ``"key": N`` of each key):
    ``judge_qa`` = fluency (0-2) x correctness (0-3) / 6; ``judge_sum`` = fluency (0/1) x
    precision / sentence_count (0 when the summary has no sentence). Null when a grade is missing
    or out of range (precision > sentence_count)."""
    frame = pl.DataFrame({"t": texts.cast(pl.String)})
    frame = frame.with_columns(m=pl.Series(metrics, dtype=pl.String) if not isinstance(metrics, str)
                               else pl.lit(metrics, pl.String))
    t = pl.col("t")
    fl, co = _last_int(t, "fluency"), _last_int(t, "correctness")
    pr, sc = _last_int(t, "precision"), _last_int(t, "sentence_count")
    qa = pl.when(fl.is_between(0, QA_FLUENCY_MAX) & co.is_between(0, QA_CORRECTNESS_MAX)).then(
        fl * co / (QA_FLUENCY_MAX * QA_CORRECTNESS_MAX))
    sm = pl.when(fl.is_between(0, 1) & (sc == 0) & (pr == 0)).then(pl.lit(0.0)).when(
        fl.is_between(0, 1) & (sc > 0) & pr.is_between(0, sc)).then(fl * pr / sc)
    score = pl.when(pl.col("m") == "judge_qa").then(qa).when(pl.col("m") == "judge_sum").then(sm)
    return frame.select(score.cast(pl.Float64).alias("judge_score"))["judge_score"]


def judge_sample_scores(frame: pl.DataFrame, generate: Callable[[pl.Series], pl.DataFrame]) -> pl.Series:
    """Judge-metric scores of ``frame``'s rows (see :func:`judge_sample_prompts`) through
    ``generate(prompts)`` (one generation row per prompt, in order). A null or blank prediction
    scores 0 without a judge call; an unparseable or failed judgement is null."""
    blank = frame["prediction"].is_null() | (frame["prediction"].str.strip_chars().str.len_chars() == 0)
    asked = frame.filter(~blank)
    out = pl.Series("judge_score", [0.0] * frame.height, dtype=pl.Float64)
    if asked.height:
        texts = generate(judge_sample_prompts(asked))["completion"]
        idx = pl.Series(np.flatnonzero(~blank.to_numpy()))
        out = out.scatter(idx, parse_judgements(texts, asked["metric"]))
    return out


_QA_FIELDS = re.compile(r"\nCorrect answers: (.*)\nAnswer: (.*)\n\Z", re.DOTALL)
_SUM_FIELDS = re.compile(r"\nExpert summary: (.*)\n\nProvided summary: (.*)\n\Z", re.DOTALL)
_WORDS = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def simulated_judgement(prompt: str) -> str | None:
    """The simulated probe's reply to a :data:`JUDGE_TEMPLATES` prompt (None for any other prompt).

    An instrument for testing the judge plumbing, not a grader: QA fluency 2 for a non-empty
    answer, correctness 3 when a correct answer occurs in it, 1 when they share a word, else 0;
    summaries: fluency 1, a sentence is supported when most of its words occur in the expert summary.
    """
    qa = _QA_FIELDS.search(prompt)
    if qa is not None and prompt.startswith(JUDGE_QA_TEMPLATE[:60]):
        refs = [r for r in re.findall(r'"((?:[^"\\]|\\.)*)"', qa.group(1))] or [qa.group(1)]
        answer = qa.group(2).strip().lower()
        correct = 3 if any(r.lower() in answer for r in refs if r) else (
            1 if any(_words(r) & _words(answer) for r in refs) else 0)
        return f'Compared with the correct answers. {{"fluency": {2 if answer else 0}, "correctness": {correct}}}'
    summ = _SUM_FIELDS.search(prompt)
    if summ is not None and prompt.startswith(JUDGE_SUM_TEMPLATE[:60]):
        expert = _words(summ.group(1))
        sentences = [x for x in re.split(r"(?<=[.!?])\s+", summ.group(2).strip()) if _words(x)]
        supported = sum(len(_words(x) & expert) > len(_words(x)) / 2 for x in sentences)
        return f'Checked each sentence. {{"fluency": 1, "precision": {supported}, "sentence_count": {len(sentences)}}}'
    return None
