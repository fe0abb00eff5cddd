"""Length-controlled runs: ``build -> infer -> score -> report`` for the suites of
100-LongBench, HELMET, LongBench v2 and the thesis's unit tasks.

* build: the suite's samples table (:mod:`raylc.suites.samples`), one row per task, sample
  and target length;
* infer: every sample's prompt through the probe's actor pool, checkpointed per request like
  the DOLCE runs (:mod:`raylc.run.checkpoint`); two-call samples (LongBench v2 chain of
  thought) run a second round whose prompt holds the first round's completion;
* score: answer extraction and the sample's metric (LLM-judge metrics through the ``judge``
  backend); 100-LongBench's QA prior-knowledge filter;
* report: LongScore per task and length (100-LongBench Eq. 1-2), the LongBench v2 splits,
  figures and ``summary.md``.

The stage functions are plain Polars functions; the Ray parts are in :mod:`raylc.run.pipeline`
and :mod:`raylc.run.tasks`.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Callable, Optional

import polars as pl

from raylc.scoring.extract import EXTRACTORS, PY_WHITESPACE
from raylc.scoring.metrics import METRIC_COLUMNS, METRICS

if TYPE_CHECKING:
    from raylc.spec import Job
from raylc.suites.samples import COMPLETION, SAMPLES, check_samples
from raylc.sweep.tables import REQUESTS

REQUEST_COLUMNS = tuple(c.name for c in REQUESTS.columns)
JUDGE_METRICS = ("judge_qa", "judge_sum")


def build_samples(job: Job) -> pl.DataFrame:
    """The suite's samples table (its registered builder), checked against the contract."""
    return SAMPLES.check(check_samples(job.suite.build(job.seed), f"suite {job.suite.kind}"), type(job.suite).columns)


def _ids(frame: pl.DataFrame, job: Job) -> pl.Series:
    """request_id = hash(probe fingerprint, prompt parts, max_tokens, and ``raw`` for a request sent
    without the chat template): the same request always has the same id."""
    fp = job.probe_fingerprint()
    out = []
    for head, context, tail, m, raw in frame.select("head", "context", "tail", "max_tokens", "raw_prompt").iter_rows():
        h = hashlib.blake2b(digest_size=12)
        for part in (fp, head, context, tail, str(m), *(("raw",) if raw else ())):
            h.update(part.encode())
            h.update(b"\x1f")
        out.append(h.hexdigest())
    return pl.Series("request_id", out, dtype=pl.String)


def requests(samples: pl.DataFrame, job: Job, first_round: Optional[pl.DataFrame] = None) -> pl.DataFrame:
    """Request rows (:data:`REQUEST_COLUMNS`). Without ``first_round``: every sample's first
    call. With it (``task, sample_id, length, completion`` of round 1): the second call of the
    two-call samples, the ``followup`` with the completion, stripped (LongBench v2 ``pred.py``
    inserts ``output.strip()``), in place of :data:`raylc.suites.samples.COMPLETION` (no
    context), ``followup_max_tokens``; a first call that returned an empty text has no second
    call (``pred.py`` stops there), and its sample's final completion is empty."""
    if "raw_prompt" not in samples.columns:
        samples = samples.with_columns(raw_prompt=pl.lit(False))
    if first_round is None:
        rows = samples.with_columns(round=pl.lit(1, pl.Int64))
    else:
        rows = (
            samples.filter(pl.col("followup").is_not_null())
            .join(first_round.select("task", "sample_id", "length", "completion"), on=["task", "sample_id", "length"],
                  how="inner")
            .filter(pl.col("completion").is_not_null() & (pl.col("completion") != ""))
            .with_columns(
                round=pl.lit(2, pl.Int64),
                head=pl.lit(""),
                context=pl.lit(""),
                tail=pl.col("followup").str.replace(
                    COMPLETION, pl.col("completion").str.strip_chars(PY_WHITESPACE), literal=True),
                max_tokens=pl.col("followup_max_tokens"),
            )
        )
    rows = rows.select([c for c in REQUEST_COLUMNS if c != "request_id"])
    return REQUESTS.check(rows.with_columns(_ids(rows, job)).select(REQUEST_COLUMNS))


def final_completions(samples: pl.DataFrame, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    """The samples with the ``completion`` and ``error`` scoring uses: the second call's for
    two-call samples, else the first's (``first`` / ``second``: request rows joined with
    their stored generations), and ``truncated_tokens``: the context tokens the backend cut
    from the first call (the one holding the context) to fit the probe's window."""
    keys = ["task", "sample_id", "length"]
    cut = pl.col("truncated_tokens").cast(pl.Int64) if "truncated_tokens" in first.columns else pl.lit(None, pl.Int64)
    one = first.select(*keys, c1="completion", e1="error", truncated_tokens=cut)
    two = second.select(*keys, c2="completion", e2="error") if second.height else pl.DataFrame(
        schema={**{k: samples.schema[k] for k in keys}, "c2": pl.String, "e2": pl.String})
    two_call = pl.col("followup").is_not_null()
    return (
        samples.join(one, on=keys, how="left").join(two, on=keys, how="left")
        .with_columns(
            completion=pl.when(two_call & (pl.col("c1") == "")).then(pl.lit(""))
            .when(two_call).then(pl.col("c2")).otherwise(pl.col("c1")),
            error=pl.when(two_call & (pl.col("c1") == "") & pl.col("e1").is_null()).then(None)
            .when(two_call & pl.col("e1").is_null() & pl.col("c2").is_null() & pl.col("e2").is_null())
            .then(pl.lit("second call missing"))
            .when(two_call & pl.col("e1").is_null()).then(pl.col("e2"))
            .otherwise(pl.col("e1")),
        )
        .drop("c1", "e1", "c2", "e2")
    )


def _extract(completions: pl.Series, extractor: str) -> pl.Series:
    try:
        fn = EXTRACTORS[extractor]
    except KeyError:
        raise ValueError(f"unknown extractor {extractor!r}; known: {sorted(EXTRACTORS)}") from None
    return pl.Series("prediction", fn(completions), dtype=pl.String)


def score_samples(
    answered: pl.DataFrame, judge: Optional[Callable[[pl.DataFrame], pl.Series]] = None
) -> pl.DataFrame:
    """Per sample: ``prediction`` (the extracted answer), ``score`` in [0, 1] and ``valid``
    (an answer could be extracted), by the sample's extractor and metric.

    ``longbench_v2``: accuracy of the extracted letter; an invalid output scores 0 here and
    0.25 in the compensated score of the report. Judge metrics make one call ``judge(frame)``
    with every judged row's ``metric, question, answers, prediction`` and expect a score per row.
    """
    parts, judged = [], []
    for (metric, extractor), group in answered.partition_by("metric", "extractor", as_dict=True,
                                                             maintain_order=True).items():
        pred = _extract(group["completion"], extractor)
        group = group.with_columns(pred, valid=pred.is_not_null())
        if metric == "longbench_v2":
            score = (pl.col("prediction") == pl.col("answers").list.first()).fill_null(False).cast(pl.Float64)
            group = group.with_columns(score=score)
        elif metric in JUDGE_METRICS:
            if judge is None:
                raise ValueError(f"metric {metric} needs a judge: add a judge: section to the job")
            judged.append(group)
            continue
        elif metric in METRICS:
            extra = {c: group[c] for c in METRIC_COLUMNS.get(metric, ())}
            group = group.with_columns(
                score=METRICS[metric](group["prediction"], group["answers"], **extra).fill_null(0.0))
        else:
            raise ValueError(f"unknown metric {metric!r}; known: {sorted(METRICS) + ['longbench_v2', *JUDGE_METRICS]}")
        parts.append(group)
    if judged:  # every judged row in one call: the run's prompt-token cap sees all its judge calls at once
        group = pl.concat(judged, how="vertical_relaxed")
        parts.append(group.with_columns(score=judge(group).cast(pl.Float64)))  # type: ignore[misc]
    drop = ["head", "context", "tail", "gold", "followup", "max_tokens", "followup_max_tokens"]
    if not parts:
        return answered.drop(drop).with_columns(prediction=pl.lit(None, pl.String), valid=pl.lit(None, pl.Boolean),
                                                score=pl.lit(None, pl.Float64))
    return pl.concat(parts, how="vertical_relaxed").drop(drop).sort("task", "length", "sample_id")


def with_visibility(scores: pl.DataFrame) -> pl.DataFrame:
    """``scores`` plus ``truncated`` (the backend cut the context: the model never saw all of it)
    and ``visible_tokens`` (``context_tokens`` less the cut tokens, the length the model saw;
    the cut is counted in the probe's tokenizer, the context in the suite's)."""
    cut = pl.col("truncated_tokens").fill_null(0) if "truncated_tokens" in scores.columns else pl.lit(0, pl.Int64)
    return scores.with_columns(truncated=cut > 0,
                               visible_tokens=(pl.col("context_tokens") - cut).clip(lower_bound=0).cast(pl.Int64))


def scores_for_longscore(scores: pl.DataFrame, model: str, axis: str = "length") -> pl.DataFrame:
    """``model, task, length, sample_id, score`` rows, ``length`` taken from ``axis``
    (length-0 prior-knowledge rows dropped)."""
    return scores.filter((pl.col("length") > 0) & pl.col("score").is_not_null()).select(
        pl.lit(model).alias("model"), "task", pl.col(axis).alias("length"), "sample_id", "score")
