r"""DOLCE fit of a whole observation table: validation, scenario selection, per-subset EM, and
each subset's category shares (:mod:`raylc.dolce.shares`).

Section 4 of the paper: the COW likelihood (Eq. 1) is optimized for accuracy-scored problems
(unless their task mixes scenarios with ten or fewer problems on a side: :mod:`raylc.dolce.scenario`)
and for the dip-test COW subsets of continuous-metric tasks (binarized at 0.5), the PIG
likelihood (Eq. 5) for the dip-test PIG subsets; EM runs 10 steps in the COW scenario and 5
in the PIG scenario (Algorithms 1 and 2, Appendix C). P(x | z = N) is shared by all problems
of one fitted (task, subset), P_i(z) by the observations of problem i.

:class:`DolceFit` (scikit-learn style: the :class:`~raylc.dolce.options.FitOptions` and a
mapper in ``__init__``, ``fit(observations)`` returning self, learned ``problems_``,
``tasks_``, ``selection_``) validates the table (:class:`ObservationError`), selects scenarios
(:func:`raylc.dolce.scenario.select_scenarios`), cuts it into one frame per (task, subset)
and runs :func:`fit_subset` on each, in-process or through a ``mapper`` such as
:func:`raylc.run.tasks.map_tasks` (one Ray task per subset). The per-subset fit is a
pure function of its frame, so both ways give identical frames. :func:`fit_observations` is
the same as a function.
"""

from __future__ import annotations

from typing import Optional

import polars as pl

from raylc.dolce.categories import CATEGORIES
from raylc.dolce.cells import OBS_COLUMNS, UNCERTAINTY_SCHEMA, CellFit
from raylc.dolce.cow import COWFit
from raylc.dolce.options import FitOptions
from raylc.dolce.pig import PIGFit
from raylc.dolce.probe_check import PROBE_CHECK_SCHEMA, answered_right, probe_check
from raylc.dolce.scenario import (
    BINARY_METRICS,
    SELECTION_SCHEMA,
    binary_metric_expr,
    miss_expr,
    select_scenarios,
    task_dip_pvalues,
)
from raylc.dolce.shares import task_share_columns
from raylc.io.parallel import Mapper, in_process
from raylc.text.sampling import MAX_UNITS

__all__ = [
    "DolceFit",
    "ObservationError",
    "PROBLEM_COLUMNS",
    "PROBLEM_SCHEMA",
    "TASK_COLUMNS",
    "TASK_SCHEMA",
    "cell_estimator",
    "fit_observations",
    "fit_subset",
    "validate_observations",
]

PROBLEM_SCHEMA = {
    "task": pl.String,
    "subset": pl.String,
    "problem_id": pl.String,
    "scenario": pl.String,
    "dip_pvalue": pl.Float64,
    "lam": pl.Int64,
    "k": pl.Int64,
    "category": pl.String,
    "loglik": pl.Float64,
    "prior_oracle": pl.Float64,
    "answered_right": pl.Boolean,
    **UNCERTAINTY_SCHEMA,
}
TASK_SCHEMA = {
    "task": pl.String,
    "subset": pl.String,
    "scenario": pl.String,
    "n_problems": pl.Int64,
    **{f"share_{c}": pl.Float64 for c in CATEGORIES},
    **{f"share_{c}_{end}": pl.Float64 for c in CATEGORIES for end in ("lo", "hi")},
    "share_interval": pl.String,
    "p_noise_1": pl.Float64,
    "p_noise_0": pl.Float64,
    "p_noise_idk": pl.Float64,
    "lam_p": pl.Int64,
    "k_p": pl.Int64,
    "dip_pvalue": pl.Float64,
    "em_steps": pl.Int64,
    "em_ll_change": pl.Float64,
    **PROBE_CHECK_SCHEMA,
}
PROBLEM_COLUMNS = tuple(PROBLEM_SCHEMA)
TASK_COLUMNS = tuple(TASK_SCHEMA)

SPAN_KEY = ("task", "problem_id", "C", "start")  #: one row per span: the key of the observation table


class ObservationError(ValueError):
    """An observation table DOLCE cannot fit. The message is one line: the offending column,
    what is wrong, and an example row."""


# ------------------------------------------------------------------------------ validation
def _row_text(row: dict) -> str:
    parts = []
    for c in OBS_COLUMNS:
        if c not in row:
            continue
        v = row[c]
        if isinstance(v, str) and len(v) > 60:
            v = v[:57] + "..."
        parts.append(f"{c}={v!r}")
    return "{" + ", ".join(parts) + "}"


def _fail(obs: pl.DataFrame, column: str, what: str, mask: Optional[pl.Expr] = None, columns: str = "") -> None:
    if mask is None:
        bad = obs.head(1)
        n = None
    else:
        flagged = obs.with_row_index("_row", offset=1).filter(mask)  # rows numbered from 1, as in the file
        n = flagged.height
        if n == 0:
            return
        bad = flagged.head(1)
    row = bad.row(0, named=True) if bad.height else {}
    where = f" {row['_row']}" if "_row" in row else (" 1" if row else "")
    count = f" in {n} row(s)" if n is not None else ""
    example = _row_text(row) if row else "(none)"
    msg = f"{columns or f'column {column!r}'}: {what}{count}; e.g. row{where}: {example}"
    raise ObservationError(msg.replace("\n", " "))


def validate_observations(obs: pl.DataFrame) -> pl.DataFrame:
    """Check an observation table and return it normalized (typed columns, OBS_COLUMNS only).

    Required columns: task, problem_id (non-empty), L (>= 1, one value per problem), C
    (0 <= C <= L), start (>= 0, start + C <= L), score (numeric in [0, 1]; null = IDK; in {0, 1}
    for the binary metrics accuracy / exact_match), metric (non-empty, one per problem). L, C
    and start must be integers (integral floats are accepted). Every task needs at least one
    partial observation 0 < C < L (the category thresholds lambda_p, k_p of Section 4 come from
    these lengths). A task whose every score is null (IDK) is accepted. One row per span: a
    key (task, problem_id, C, start) given twice is refused (it would count twice in the
    likelihood). Any violation raises :class:`ObservationError` naming the column(s) and
    showing the first offending row (rows numbered from 1).
    """
    if not isinstance(obs, pl.DataFrame):
        raise ObservationError(f"column 'task': observations must be a polars DataFrame, got {type(obs).__name__}")
    for c in OBS_COLUMNS:
        if c not in obs.columns:
            have = ", ".join(obs.columns) or "none"
            _fail(obs, c, f"missing from the observation table (columns present: {have})")
    if obs.height == 0:
        _fail(obs, "task", "the observation table has no rows")
    obs = obs.select(OBS_COLUMNS)

    for c in ("task", "problem_id", "metric"):
        if obs.schema[c] not in (pl.String, pl.Categorical, pl.Enum) and not obs.schema[c].is_integer():
            _fail(obs, c, f"must be a string column, got {obs.schema[c]}")
        obs = obs.with_columns(pl.col(c).cast(pl.String))
        _fail(obs, c, "null or empty value", pl.col(c).is_null() | (pl.col(c).str.strip_chars() == ""))

    for c in ("L", "C", "start"):
        dt = obs.schema[c]
        if dt.is_integer():
            pass
        elif dt.is_float():
            _fail(obs, c, "must hold integers, got a non-integral value",
                  pl.col(c).is_nan() | pl.col(c).is_infinite() | (pl.col(c) != pl.col(c).floor()))
        else:
            _fail(obs, c, f"must be an integer column, got {dt}")
        _fail(obs, c, "null value", pl.col(c).is_null())
        _fail(obs, c, f"more than {MAX_UNITS:,} units", pl.col(c) > MAX_UNITS)  # a typo; Int64 overflows past it
        obs = obs.with_columns(pl.col(c).cast(pl.Int64))
    _fail(obs, "L", "context length L must be >= 1 (negative or zero L)", pl.col("L") < 1)
    _fail(obs, "C", "observation length C must be >= 0", pl.col("C") < 0)
    _fail(obs, "C", "observation length C exceeds the context length L (C > L)", pl.col("C") > pl.col("L"))
    _fail(obs, "start", "span start must be >= 0", pl.col("start") < 0)
    _fail(obs, "start", "span ends past the context (start + C > L)", pl.col("start") + pl.col("C") > pl.col("L"))
    _fail(obs, "L", "problem has several context lengths L",
          pl.col("L").n_unique().over("task", "problem_id") > 1)

    if obs.schema["score"] == pl.String and obs["score"].null_count() == obs.height:
        obs = obs.with_columns(pl.col("score").cast(pl.Null))  # an empty CSV column is read as text
    if not (obs.schema["score"].is_numeric() or obs.schema["score"] == pl.Null):
        _fail(obs, "score", f"must be numeric (null = IDK), got {obs.schema['score']}")
    obs = obs.with_columns(pl.col("score").cast(pl.Float64))
    s = pl.col("score")
    _fail(obs, "score", "score outside [0, 1] (use null for IDK)", s.is_nan() | (s < 0) | (s > 1))
    binary = binary_metric_expr()
    _fail(obs, "score", f"a binary metric ({', '.join(sorted(BINARY_METRICS))}) needs scores in {{0, 1, null}}",
          binary & s.is_not_null() & ~s.is_in([0.0, 1.0]))
    _fail(obs, "metric", "problem is scored with several metrics",
          pl.col("metric").n_unique().over("task", "problem_id") > 1)
    span = pl.struct(*SPAN_KEY)
    if obs.select(span.hash(0).n_unique()).item() < obs.height:  # cheap test first (a hash per row)
        _fail(obs, "start", "the same span appears in more than one row (each row counts as one observation in "
              "the likelihood: keep one row per span)", span.is_duplicated() & ~span.is_first_distinct(),
              columns=f"columns {', '.join(SPAN_KEY)}")
    has_partial = ((pl.col("C") > 0) & (pl.col("C") < pl.col("L"))).any().over("task")
    _fail(obs, "C", "task has no partial observation length 0 < C < L (needed for lambda_p, k_p)", ~has_partial)
    return obs


# ------------------------------------------------------------------------------ fitting
def cell_estimator(scenario: str, options: FitOptions) -> CellFit:
    """The unfitted per-(task, subset) estimator of ``scenario`` ("COW" / "PIG") with the
    settings of ``options``: COWFit(em_steps_cow, threshold) or PIGFit(em_steps_pig,
    pig_likelihood, pig_hit_rate)."""
    run = {"tol": options.em_tol, "max_steps": options.em_max_steps,
           "uncertainty_steps": options.uncertainty_steps if options.uncertainty == "posterior" else 0}
    if scenario == "COW":
        return COWFit(n_steps=options.em_steps_cow, threshold=options.threshold, not_covered=options.not_covered, **run)
    if scenario == "PIG":
        return PIGFit(n_steps=options.em_steps_pig, likelihood=options.pig_likelihood, hit_rate=options.pig_hit_rate,
                      **run)
    raise ValueError(f"scenario must be 'COW' or 'PIG', got {scenario!r}")


def fit_subset(frame: pl.DataFrame, options: FitOptions = FitOptions()) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Fit one (task, subset): a plain function of one frame, so it can run as a Ray task.

    ``frame`` holds the observations (OBS_COLUMNS) of a single (task, subset) plus the
    selection columns subset, scenario, dip_pvalue and task_dip_pvalue
    (:func:`raylc.dolce.scenario.select_scenarios`), all constant except dip_pvalue. The
    subset's :func:`cell_estimator` is fitted: COW binarizes the scores
    (:func:`raylc.dolce.scenario.binarize_scores`, ``options.threshold`` for continuous
    metrics) and runs ``em_steps_cow`` EM steps (Algorithm 1); PIG runs on the raw scores with
    ``em_steps_pig`` steps (Algorithm 2) and the :class:`~raylc.dolce.pig.PIGFit` options
    ``pig_likelihood`` / ``pig_hit_rate``. Returns (problems, one-row task summary) with the
    columns :data:`PROBLEM_COLUMNS` and :data:`TASK_COLUMNS`.
    """
    head = frame.row(0, named=True)
    task, subset, scenario = head["task"], head["subset"], head["scenario"]
    estimator = cell_estimator(scenario, options).fit(frame.select(OBS_COLUMNS))
    fitted, info = estimator.frames()
    miss = miss_expr(frame, options.threshold)
    pvals = frame.group_by("problem_id").agg(pl.col("dip_pvalue").first()).join(
        answered_right(frame, miss), on="problem_id")
    problems = (
        fitted.with_columns(
            pl.col("task").cast(pl.String), pl.col("problem_id").cast(pl.String),
            subset=pl.lit(subset, pl.String), scenario=pl.lit(scenario, pl.String),
        )
        .join(pvals, on="problem_id", how="left")
        .select(PROBLEM_COLUMNS)
        .cast(PROBLEM_SCHEMA)
        .sort("problem_id")
    )
    row = {
        "task": task, "subset": subset, "scenario": scenario, "n_problems": problems.height,
        **task_share_columns(problems, info.get("share_draws")),
        **{key: info[key] for key in ("p_noise_1", "p_noise_0", "p_noise_idk", "lam_p", "k_p", "em_steps",
                                      "em_ll_change")},
        "dip_pvalue": head["task_dip_pvalue"],
        **probe_check(frame, problems, miss, getattr(estimator, "not_covered", None),
                      getattr(estimator, "not_covered_", None)),
    }
    return problems, pl.DataFrame([row], schema=TASK_SCHEMA)


class DolceFit:
    """DOLCE fit of an observation table with any number of tasks (Sections 3-4).

    Hyperparameters: ``options`` (:class:`~raylc.dolce.options.FitOptions`: scenario
    selection, COW threshold, EM steps, PIG options) and ``mapper`` (``mapper(fn, frames,
    *args)``, e.g. :func:`raylc.run.tasks.map_tasks`; None: in process). :meth:`fit` sets:

    * ``selection_``: the scenario of every problem (:data:`SELECTION_SCHEMA`: task, problem_id,
      subset, scenario, dip_pvalue, task_dip_pvalue; sorted by task, problem_id);
    * ``problems_``: one row per problem (:data:`PROBLEM_SCHEMA`: task, subset, problem_id,
      scenario, dip_pvalue, lam, k, category, loglik, prior_oracle, and with
      ``options.uncertainty`` = "posterior" (else null) confidence, p_I .. p_V, lam_low,
      lam_high (:mod:`raylc.dolce.uncertainty`); sorted by task, subset, problem_id);
    * ``tasks_``: one row per (task, subset) (:data:`TASK_SCHEMA`: task, subset, scenario,
      n_problems, share_I .. share_V (posterior-mean shares; with ``uncertainty`` "none" the
      shares of the reported categories) with 95% intervals share_I_lo,
      share_I_hi, .. and share_interval, what they are over (:mod:`raylc.dolce.shares`), p_noise_1,
      p_noise_0, p_noise_idk (P(x | z = N)), lam_p,
      k_p, dip_pvalue, the task-level p-value, null for binary-metric tasks, and the EM's
      convergence diagnostic: em_steps run and em_ll_change, the last step's change of the
      summed objective; NaN after one step).
    """

    def __init__(self, options: FitOptions = FitOptions(), mapper: Optional[Mapper] = None):
        self.options = options
        self.mapper = mapper

    def fit(self, observations: pl.DataFrame, selection: Optional[pl.DataFrame] = None) -> "DolceFit":
        """1. :func:`validate_observations` (raises :class:`ObservationError`);
        2. scenario selection per problem (:func:`raylc.dolce.scenario.select_scenarios`:
           ``options.scenario`` = "auto" runs the dip tests of Section 3.1 / Appendix H,
           "cow" / "pig" forces one scenario), unless ``selection`` (a frame as returned by
           :func:`select_scenarios`, or the problems frame of an earlier fit: task,
           problem_id, subset, scenario, dip_pvalue and optionally task_dip_pvalue) fixes it,
           as the paper does when comparing setups on "the same COW and PIG splits" (Section
           6); problems missing from ``selection`` raise :class:`ObservationError`;
        3. one :func:`fit_subset` per (task, subset), mapped by ``mapper``.
        Returns self."""
        options = FitOptions.check(self.options)
        obs = validate_observations(observations)
        if selection is None:
            sel = select_scenarios(obs, options.scenario)
        else:
            sel = _normalize_selection(selection, obs)
        frames = _subset_frames(obs, sel)
        results = (self.mapper or in_process)(fit_subset, frames, options)
        keys = obs.select("task", "problem_id").unique()
        self.selection_ = sel.join(keys, on=["task", "problem_id"], how="semi").sort("task", "problem_id")
        self.problems_ = pl.concat([p for p, _ in results]).sort("task", "subset", "problem_id")
        self.tasks_ = pl.concat([t for _, t in results]).sort("task", "subset")
        return self


def fit_observations(
    obs: pl.DataFrame,
    options: FitOptions = FitOptions(),
    mapper: Optional[Mapper] = None,
    *,
    selection: Optional[pl.DataFrame] = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``DolceFit(options, mapper).fit(obs, selection)`` as (problems_, tasks_)
    (:class:`DolceFit`)."""
    fitted = DolceFit(options, mapper).fit(obs, selection)
    return fitted.problems_, fitted.tasks_


def _normalize_selection(selection: pl.DataFrame, obs: pl.DataFrame) -> pl.DataFrame:
    """A fixed scenario selection; task_dip_pvalue, when absent, is recomputed from ``obs``."""
    need = ("task", "problem_id", "subset", "scenario")
    missing = [c for c in need if c not in selection.columns]
    if missing:
        raise ValueError(f"selection is missing column(s): {', '.join(missing)}")
    sel = selection.with_columns(
        *(pl.col(c).cast(pl.String) for c in need),
        dip_pvalue=(pl.col("dip_pvalue") if "dip_pvalue" in selection.columns else pl.lit(None)).cast(pl.Float64),
    )
    if "task_dip_pvalue" in sel.columns:
        sel = sel.with_columns(pl.col("task_dip_pvalue").cast(pl.Float64))
    else:
        sel = sel.join(task_dip_pvalues(obs), on="task", how="left")
    bad = sel.filter(~pl.col("scenario").is_in(["COW", "PIG"]))
    if bad.height:
        raise ValueError(f"selection scenario must be 'COW' or 'PIG', got {bad['scenario'][0]!r}")
    return sel.select(list(SELECTION_SCHEMA)).unique(["task", "problem_id"], keep="first")


def _subset_frames(obs: pl.DataFrame, sel: pl.DataFrame) -> list[pl.DataFrame]:
    joined = obs.join(sel, on=["task", "problem_id"], how="left")
    _fail(joined, "problem_id", "problem has no scenario in the given selection", pl.col("scenario").is_null())
    joined = joined.sort("task", "subset", "problem_id", "C", "start")
    return [frame for _, frame in joined.group_by("task", "subset", maintain_order=True)]
