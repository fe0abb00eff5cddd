"""The tables a DOLCE run writes, and those of ``raylc fit`` and ``raylc sensitivity``, declared
once (:class:`raylc.io.schemas.TableSchema`) and checked by the stage functions that make them
(:mod:`raylc.dolce.stages`) and by the commands (:mod:`raylc.dolce.commands`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import polars as pl

from raylc.dolce.categories import CATEGORIES
from raylc.dolce.fit import PROBLEM_SCHEMA, TASK_SCHEMA
from raylc.dolce.probe_check import PROBE_CHECK_SCHEMA
from raylc.dolce.sensitivity import COMPARE_SCHEMA, SENSITIVITY_SCHEMA
from raylc.dolce.shares import SHARE_SCHEMA
from raylc.io.schemas import TableSchema, declare, described, since
from raylc.scoring.observations import OBSERVATION_SCHEMA
from raylc.text.sampling import SPAN_SCHEMA

_SUBSET = {"task": "The task.",
           "subset": "The fitted subset: `<task>`, or `<task>/COW` and `<task>/PIG` when the dip test splits the task "
                     "(Section 3.1).",
           "scenario": "`COW` (Algorithm 1) or `PIG` (Algorithm 2)."}
_CATEGORY = {"I": "closed-book", "II": "redundant retrieval", "III": "retrieval", "IV": "a longer stretch",
             "V": "holistic understanding"}

PROBLEMS = TableSchema("problems", "build/problems.parquet", (
    "The suite's problems, one row per problem, its context split into units."), declare(
    ("task", pl.String, "The task."),
    ("problem_id", pl.String, "The problem, unique over the table."),
    ("L", pl.Int64, "Units in the context."),
    ("units", pl.List(pl.String), "The context's units, in order."),
    ("question", pl.String, "The question (or a summary's instruction)."),
    ("answer", pl.String, "The reference answer (four-choice problems: the letter)."),
    ("answers", pl.List(pl.String), "Every reference answer (documents and layouts suites).", True),
    ("choices", pl.List(pl.String), "The four options of a four-choice problem (documents suite).", True),
    ("template", pl.String,
     "The prompt template: `qa`, `choice`, `summary` or `planted` (documents and layouts suites).", True),
    ("document", pl.String, "The context as one text; the units are slices of it (documents and layouts suites).",
     True),
    ("unit_starts", pl.List(pl.Int64), "Each unit's first character in `document`.", True),
    ("unit_ends", pl.List(pl.Int64), "Each unit's end (exclusive) in `document`.", True),
    ("planted_lam", pl.Int64, "The designed lambda (planted and layouts suites: the report's recovery).", True),
    ("planted_k", pl.Int64, "The designed k (planted and layouts suites).", True)),
    extra="the suite's own ([suites](suites.md))")

SPANS = TableSchema("spans", "sample/spans.parquet", "The observation spans (DOLCE Section 3.1), one row per span.",
                    described(SPAN_SCHEMA, {
                        "task": "The task.", "problem_id": "The problem.", "L": "Units in its context.",
                        "C": "The span's length in units (0: no context; L: the whole context).",
                        "start": "The span's first unit."}))

REQUESTS = TableSchema("requests", "requests/<attempt>/part-<n>.parquet", (
    "The pending requests of the infer stage, a span each (removed when the stage ends)."),
    (*SPANS.columns, *declare(("request_id", pl.String, (
        "The request's id: a hash of the probe's settings and the seed, the problem's units and question, and the "
        "span (the key of row-level resume).")))))

OBSERVATIONS = TableSchema("observations", "score/observations.parquet", (
    "The observation table: one score per span (`raylc fit`'s input)."), described(OBSERVATION_SCHEMA, {
        "task": "The task.", "problem_id": "The problem.", "L": "Units in its context.", "C": "The span's length.",
        "start": "The span's first unit.", "score": "The span's score in [0, 1]; null: the probe said IDK.",
        "metric": "The metric the score is of (the template's: `scoring.metric`, `accuracy`, `rougeL`)."}))

#: when ``answered_right`` and ``n_never_right`` were added to the fit's tables
NEVER_RIGHT_SINCE = "2026-12-02 (problems never answered right)"
_UNCERTAINTY = {
    "confidence": "The posterior mass of the reported category (null with `fit.uncertainty: none`).",
    **{f"p_{c}": f"The posterior probability of category {c} ({_CATEGORY[c]})." for c in CATEGORIES},
    "lam_low": "The 90% interval of lambda, low end.",
    "lam_high": "Its high end (null: open, the data only say lambda > max C).",
}
FIT_PROBLEMS = TableSchema("problems", "fits/problems.parquet", "The fit per problem.", described(PROBLEM_SCHEMA, {
    **_SUBSET, "problem_id": "The problem.",
    "dip_pvalue": "Hartigan's dip test p-value of the problem's scores (null: a binary metric, or 3 scores or "
                  "fewer).",
    "lam": "Fitted lambda: the units of evidence a complete answer needs (0: none, closed-book).",
    "k": "Fitted k: the copies of that evidence in the context.",
    "category": "The focus category I-V (Figure 1) the problem reports.",
    "loglik": "The point fit's objective at (lam, k).", "prior_oracle": "The point fit's P_i(O).",
    **since({"answered_right": "Whether any of its spans was answered right (a score at or above the binarization "
                               "cut). False: nothing shows where its evidence is, and its category says nothing "
                               "about the task."}, ("answered_right",), NEVER_RIGHT_SINCE),
    **since(_UNCERTAINTY, tuple(_UNCERTAINTY), "2026-11-25 (the posterior)")},
    optional=("answered_right", *_UNCERTAINTY)))

_SHARES = {
    **{f"share_{c}": f"The share of the problems in category {c}: the posterior mean (with `uncertainty: none`, the "
                         "share of the reported categories)." for c in CATEGORIES},
    **{f"share_{c}_{end}": f"The 95% interval of share_{c}, {'low' if end == 'lo' else 'high'} end."
       for c in CATEGORIES for end in ("lo", "hi")},
}
_SHARE_ENDS = tuple(name for name in _SHARES if name.endswith(("_lo", "_hi")))
_PROBE_CHECK = {
    "n_closed_book": "Spans with no context (C = 0).",
    "idk_closed_book": "The share of them answered IDK.",
    "n_not_covered": "Spans the fit says miss the evidence (C >= lambda >= 1, C < L, not answered right).",
    "idk_not_covered": "The share of them answered IDK.",
    **since({"n_never_right": "Problems no span of which was answered right (their categories say nothing about "
                              "the task)."}, ("n_never_right",), NEVER_RIGHT_SINCE),
    "not_covered": "What COW's oracle answers without the evidence: `fitted` or `idk` (null for PIG).",
    "not_covered_wrong": "The fitted probability of a wrong answer without the evidence.",
    "not_covered_idk": "The fitted probability of IDK without the evidence.",
}
FIT_TASKS = TableSchema("tasks", "fits/tasks.parquet", "The fit per task subset.", described(TASK_SCHEMA, {
    **_SUBSET, "n_problems": "Problems fitted.",
    **since({**_SHARES, "share_interval": "What the share intervals are over (the posterior's draws, or Wilson's "
                                          "over the problems)."}, (*_SHARE_ENDS, "share_interval"),
            "2026-11-25 (the intervals)"),
    "p_noise_1": "The noise distribution P(x | N): a right answer.",
    "p_noise_0": "P(x | N): a wrong answer.",
    "p_noise_idk": "P(x | N): IDK.",
    "lam_p": "The threshold lambda_p (Section 4: the first tertile of the task's span lengths).",
    "k_p": "The threshold k_p (= lambda_p).",
    "dip_pvalue": "The dip test p-value of the task's continuous-metric scores (null: a binary metric).",
    **since({"em_steps": "EM steps run.",
             "em_ll_change": "The last step's change of the summed objective (nats); null after one step."},
            ("em_steps", "em_ll_change"), "2026-11-24 (the convergence diagnostic)"),
    **since(_PROBE_CHECK, tuple(c for c in _PROBE_CHECK if c != "n_never_right"), "2026-11-28 (the probe check)")},
    optional=(*_SHARE_ENDS, "share_interval", "em_steps", "em_ll_change", *_PROBE_CHECK)))

def _shares_ok(frame: pl.DataFrame) -> Optional[str]:
    """A category table's rows: each category one of I-V, once per task subset."""
    if "category" not in frame.columns:
        return None
    frame = frame.with_row_index("_row", offset=1)
    odd = frame.filter(~pl.col("category").is_in(list(CATEGORIES)))
    if odd.height:
        return f"row {odd['_row'][0]}: category {odd['category'][0]!r} is not one of {', '.join(CATEGORIES)}"
    keys = [c for c in ("task", "subset", "category") if c in frame.columns]
    twice = frame.filter(pl.col("category").is_not_null() & ~pl.struct(keys).is_first_distinct())
    if twice.height:
        return f"row {twice['_row'][0]}: category {twice['category'][0]!r} of its task subset a second time"
    return None


CATEGORIES_TABLE = TableSchema("categories", "report/categories.parquet", (
    "The category shares per task subset, as every output prints them."), described(
    {"task": pl.String, "subset": pl.String, "scenario": pl.String, **SHARE_SCHEMA}, since({
        **_SUBSET, "category": "The category, I-V.", "n": "Problems reported in it.",
        "n_problems": "Problems in the subset.",
        "share": "The share: the posterior mean (with `uncertainty: none`, the share of the reported categories).",
        "share_lo": "Its 95% interval, low end.", "share_hi": "High end.",
        "interval": "What the interval is over."}, ("n_problems", "interval"), "2026-11-27 (one share everywhere)"),
    optional=("n_problems", "interval")), values=_shares_ok)

PROBE = TableSchema("probe", "report/probe.parquet", (
    "The probe check: does the probe say IDK where DOLCE's oracle would ([DOLCE](../dolce.md))?"), described(
    {"task": pl.String, "subset": pl.String, "scenario": pl.String, **PROBE_CHECK_SCHEMA},
    {**_SUBSET, **_PROBE_CHECK}, optional=("n_never_right",)))

RECOVERY = TableSchema("recovery", "report/recovery.parquet", (
    "Planted and layouts suites: how often the designed category was recovered."), declare(
    ("task", pl.String, "The task, and `(all)` for every problem."),
    ("n_problems", pl.UInt32, "Problems."),
    ("recovered", pl.UInt32, "Problems whose reported category is the designed one."),
    ("recovery", pl.Float64, "recovered / n_problems."),
    ("mean_confidence", pl.Float64, "The mean confidence (close to the recovery when calibrated).")))

REPORT_PROBLEMS = TableSchema("problems", "report/problems.parquet", (
    "Planted and layouts suites: the fit per problem next to its design."), (
    *(c for c in FIT_PROBLEMS.columns if c.name in ("task", "subset", "problem_id", "scenario", "lam", "k",
                                                    "category", "confidence", "lam_low", "lam_high")),
    *(replace(c, optional=False) for c in PROBLEMS.columns if c.name in ("planted_lam", "planted_k")),
    *declare(("planted_category", pl.String, "The category of the designed (lambda, k) under the fit's thresholds."),
             ("recovered", pl.Boolean, "The reported category is the designed one."))))

#: what a DOLCE run writes, in stage order (its checkpoint shards: :data:`raylc.run.checkpoint.SHARDS`)
RUN_TABLES = (PROBLEMS, SPANS, REQUESTS, OBSERVATIONS, FIT_PROBLEMS, FIT_TASKS, CATEGORIES_TABLE, PROBE, RECOVERY,
              REPORT_PROBLEMS)
REPORT_TABLES = (CATEGORIES_TABLE, PROBE, RECOVERY, REPORT_PROBLEMS)

_COMPARE = {
    **_SUBSET, "n_problems": "Problems in both fits.",
    "delta_lam": "The median relative change of lambda.", "delta_k": "The median relative change of k.",
    "rho_lam": "Spearman's rho of lambda.", "rho_k": "Spearman's rho of k.",
    "kl_noise": "The KL divergence of the noise distributions.",
    "category_agreement": "The share of problems in the same category."}
COMPARE = TableSchema("compare", "compare.parquet", "With `--compare DIR`: this fit against the one in DIR "
                                                    "(Section 6's metrics).", described(COMPARE_SCHEMA, _COMPARE))

#: what ``raylc fit OBSERVATIONS --out DIR`` writes under DIR
FIT_COMMAND_TABLES = (FIT_PROBLEMS.relocated("problems.parquet"), FIT_TASKS.relocated("tasks.parquet"), COMPARE)
#: what ``raylc sensitivity OBSERVATIONS --out DIR`` writes under DIR
SENSITIVITY = TableSchema("sensitivity", "sensitivity.parquet", (
    "Each experiment's refits against the reference fit (Section 6, Appendix K)."), described(SENSITIVITY_SCHEMA, {
        "experiment": "The experiment: a sampling strategy (Appendix K.1) or `threshold` (K.4).",
        "setting": "Its setting (a stride, a rate, a threshold).", **_COMPARE,
        "n_obs_ref": "Observations of the reference fit.", "n_obs_test": "Observations of the refit."}))
