r"""Sensitivity of DOLCE fits to modeling decisions (Section 6, Appendix K).

Two fits of the same problems - a reference (ref) and a test setup - are compared per
(task, subset) with the metrics of Section 6:

* relative change delta(lambda) = |lambda_ref - lambda_test| / max(lambda_ref, lambda_test)
  per problem (0 when both are 0), likewise delta(k); the median over the problems is
  reported, as the paper reports medians (Section 6, Appendix K.3);
* Spearman's rank correlation rho(lambda), rho(k) over the problems
  (``scipy.stats.spearmanr``); NaN when either side is constant (e.g. k = 1 for every
  problem) or fewer than two problems match, as in the paper's Table 8 (Appendix K.2);
* the KL divergence of the background-noise distribution P(x | z = N) over the three
  outcomes x in {1, 0, IDK}: KL(ref || test) = sum_x P_ref(x|N) log(P_ref(x|N) /
  P_test(x|N)) in nats. The paper does not state a direction; the reference is the first
  argument here (terms with P_ref = 0 are 0; P_test = 0 < P_ref gives +inf).

:func:`run_sensitivity` runs two built-in experiments as a grid of (task x setting) cells,
each a plain function of one frame (:func:`sensitivity_cell`) so a mapper such as
:func:`raylc.run.tasks.map_tasks` can run the cells as Ray tasks:

* the sampling strategies of Appendix K.1 (:data:`SAMPLING_EXPERIMENTS`): the input must
  come from full enumeration (every start, stride 1); each setting keeps the rows the
  strategy would have observed (:func:`subsample`, the spans of
  :func:`raylc.text.sampling.sample_spans`) and refits them: ``"take_every"`` (N: starts
  0, N, 2N, ...), ``"take_ip_rate"`` (f: stride floor(f C)), ``"sample_rate"`` (r: each start
  with probability r), ``"sample_ip_rate"`` (r: probability min(1, r / C)),
  ``"min_length"`` / ``"max_length"`` (only C >= / <= the setting; the paper's "only >= 10"
  and "only <= 10"). C = 0 and C = L observations are always kept;
* ``"threshold"`` (Appendix K.4): the COW subsets of continuous-metric tasks are refit with
  binarization thresholds in ``thresholds`` and compared with the reference threshold
  (``FitOptions.threshold``, 0.5 by default).

The reference and every refit use the same :class:`~raylc.dolce.options.FitOptions` (scenario
selection, EM steps, PIG options; the threshold experiment varies only its threshold; no
posterior, since only point estimates are compared), and refits reuse the reference's scenario
selection (the paper compares setups on "the same COW and PIG splits", Section 6), so both fits
cover the same problems and subsets.
"""

from __future__ import annotations

import warnings
from typing import Optional, Sequence

import numpy as np
import polars as pl
from pydantic import ValidationError

from raylc.dolce.fit import fit_observations, validate_observations
from raylc.dolce.options import FitOptions
from raylc.dolce.scenario import binary_metric_expr
from raylc.io.parallel import Mapper, in_process
from raylc.text.sampling import Sampling, sample_spans

__all__ = [
    "COMPARE_SCHEMA",
    "SENSITIVITY_SCHEMA",
    "compare_fits",
    "kl_divergence",
    "relative_change",
    "run_sensitivity",
    "sensitivity_cell",
    "spearman_rho",
    "take_every",
]

COMPARE_SCHEMA = {
    "task": pl.String,
    "subset": pl.String,
    "scenario": pl.String,
    "n_problems": pl.Int64,
    "delta_lam": pl.Float64,
    "delta_k": pl.Float64,
    "rho_lam": pl.Float64,
    "rho_k": pl.Float64,
    "kl_noise": pl.Float64,
    "category_agreement": pl.Float64,
}
SENSITIVITY_SCHEMA = {
    "experiment": pl.String,
    "setting": pl.Float64,
    **COMPARE_SCHEMA,
    "n_obs_ref": pl.Int64,
    "n_obs_test": pl.Int64,
}
NOISE_COLUMNS = ("p_noise_1", "p_noise_0", "p_noise_idk")
DEFAULT_EVERY = (2, 5, 10)
DEFAULT_THRESHOLDS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Appendix K.1's sampling strategies as one-parameter experiments: name -> (the Sampling
#: fields its setting sets, default settings).
SAMPLING_EXPERIMENTS = {
    "take_every": (lambda v: {"strategy": "take_every", "every": int(v)}, DEFAULT_EVERY),
    "take_ip_rate": (lambda v: {"strategy": "take_ip_rate", "stride_fraction": v}, (0.05, 0.1, 0.2)),
    "sample_rate": (lambda v: {"strategy": "sample_rate", "rate": v}, (0.1, 0.2, 0.5)),
    "sample_ip_rate": (lambda v: {"strategy": "sample_ip_rate", "rate": v}, (1.0, 2.0, 5.0)),
    "min_length": (lambda v: {"strategy": "enumerate", "min_length": int(v)}, (10.0,)),
    "max_length": (lambda v: {"strategy": "enumerate", "max_length": int(v)}, (10.0,)),
}
EXPERIMENTS = (*SAMPLING_EXPERIMENTS, "threshold")
WHOLE_SETTINGS = ("take_every", "min_length", "max_length")  #: experiments whose settings are whole numbers of units


# ------------------------------------------------------------------------------ metrics
def relative_change(ref, test) -> np.ndarray:
    """delta = |ref - test| / max(ref, test) elementwise, 0 where both are 0 (Section 6).

    Defined for non-negative values (lambda, k >= 0)."""
    a = np.asarray(ref, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    den = np.maximum(a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, np.abs(a - b) / np.where(den > 0, den, 1.0), 0.0)


def spearman_rho(ref, test) -> float:
    """Spearman's rank correlation (``scipy.stats.spearmanr``); NaN when fewer than two
    pairs or when either side is constant (undefined, Appendix K.2). scipy.stats is imported
    here: it costs about 0.7 s, which a run that never compares fits does not need."""
    from scipy.stats import spearmanr

    a = np.asarray(ref, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.size < 2 or np.unique(a).size < 2 or np.unique(b).size < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(a, b).statistic)


def kl_divergence(p_ref, p_test) -> float:
    """KL(P_ref || P_test) = sum_x P_ref(x) log(P_ref(x) / P_test(x)) in nats, for discrete
    distributions over the same outcomes (here x in {1, 0, IDK}); 0 log 0 = 0, +inf when
    P_test(x) = 0 < P_ref(x). Both inputs are normalized to sum 1 first."""
    p = np.asarray(p_ref, dtype=np.float64)
    q = np.asarray(p_test, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError("p_ref and p_test must be 1-D arrays of the same length")
    if np.any(p < 0) or np.any(q < 0) or p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("distributions must be non-negative with a positive total")
    p, q = p / p.sum(), q / q.sum()
    pos = p > 0
    if np.any(q[pos] == 0):
        return float("inf")
    return float(max(np.sum(p[pos] * np.log(p[pos] / q[pos])), 0.0))


def compare_fits(
    ref_problems: pl.DataFrame, ref_tasks: pl.DataFrame, test_problems: pl.DataFrame, test_tasks: pl.DataFrame
) -> pl.DataFrame:
    """Section 6 metrics between a reference and a test fit, one row per (task, subset).

    Inputs are the (problems, tasks) frames of :func:`raylc.dolce.fit.fit_observations`.
    Problems are matched on (task, subset, problem_id); only (task, subset) pairs present in
    both fits are reported (fit both with the same scenario selection). Columns: task, subset,
    scenario (the reference's), n_problems (matched), delta_lam and delta_k (medians of the
    per-problem relative changes), rho_lam and rho_k (Spearman; NaN if a side is constant),
    kl_noise (KL(P_ref(x|N) || P_test(x|N))), category_agreement (share of matched problems
    with the same category I-V).
    """
    keys = ["task", "subset", "problem_id"]
    cols = [*keys, "scenario", "lam", "k", "category"]
    ref = ref_problems.select(cols)
    test = test_problems.select(*keys, pl.col("lam").alias("lam_test"), pl.col("k").alias("k_test"),
                                pl.col("category").alias("category_test"))
    joined = ref.join(test, on=keys, how="inner").sort(keys)
    noise = ref_tasks.select("task", "subset", *NOISE_COLUMNS).join(
        test_tasks.select("task", "subset", *(pl.col(c).alias(c + "_test") for c in NOISE_COLUMNS)),
        on=["task", "subset"], how="inner",
    )
    rows = []
    for (task, subset), g in joined.group_by("task", "subset", maintain_order=True):
        nz = noise.filter((pl.col("task") == task) & (pl.col("subset") == subset))
        if nz.height:
            r = nz.row(0, named=True)
            kl = kl_divergence([r[c] for c in NOISE_COLUMNS], [r[c + "_test"] for c in NOISE_COLUMNS])
        else:
            kl = None
        lam_r, lam_t = g["lam"].to_numpy(), g["lam_test"].to_numpy()
        k_r, k_t = g["k"].to_numpy(), g["k_test"].to_numpy()
        rows.append({
            "task": task, "subset": subset, "scenario": g["scenario"][0], "n_problems": g.height,
            "delta_lam": float(np.median(relative_change(lam_r, lam_t))),
            "delta_k": float(np.median(relative_change(k_r, k_t))),
            "rho_lam": spearman_rho(lam_r, lam_t), "rho_k": spearman_rho(k_r, k_t),
            "kl_noise": kl,
            "category_agreement": float((g["category"] == g["category_test"]).mean()),
        })
    return pl.DataFrame(rows, schema=COMPARE_SCHEMA).sort("task", "subset")


# ------------------------------------------------------------------------------ experiments
def sampling_for(experiment: str, setting: float) -> Sampling:
    """The :class:`raylc.text.sampling.Sampling` of one sampling experiment's setting (ValueError if invalid)."""
    fields, _ = SAMPLING_EXPERIMENTS[experiment]
    try:
        return Sampling(**fields(setting))
    except ValidationError as exc:
        raise ValueError(f"{experiment} = {setting:g}: {exc.errors()[0]['msg']}") from None


def with_threshold(options: FitOptions, threshold: float) -> FitOptions:
    """``options`` with another COW binarization threshold (ValueError if invalid)."""
    try:
        return FitOptions.model_validate({**options.model_dump(), "threshold": threshold})
    except ValidationError as exc:
        raise ValueError(f"threshold = {threshold:g}: {exc.errors()[0]['msg']}") from None


def subsample(obs: pl.DataFrame, sampling: Sampling, seed: int = 0) -> pl.DataFrame:
    """The rows of a full-enumeration observation table that ``sampling`` would have observed
    (Appendix K.1): the spans :func:`raylc.text.sampling.sample_spans` draws (with ``seed``) over
    the table's problems, its own partial lengths and C = L, semi-joined on (task,
    problem_id, L, C, start)."""
    lengths = sorted(set(obs.filter(pl.col("C") < pl.col("L"))["C"].to_list()))
    spans = sample_spans(obs.select("task", "problem_id", "L").unique(),
                         sampling.model_copy(update={"lengths": [*lengths, "L"]}), seed)
    return obs.join(spans, on=list(spans.columns), how="semi")


def take_every(obs: pl.DataFrame, n: int) -> pl.DataFrame:
    """Take-every-N subsample of a full-enumeration observation table (Appendix K.1): the
    rows with start % N == 0, plus every C = 0 or C = L row (their only start is 0); N >= 1
    (ValueError otherwise, from :func:`sampling_for`)."""
    return subsample(obs, sampling_for("take_every", int(n)))


def check_full_enumeration(obs: pl.DataFrame) -> None:
    """ValueError unless every observed (problem, 0 < C < L) has all L - C + 1 starts, as a
    take-every-N comparison needs (otherwise the subsample is not what its N says)."""
    partial = obs.filter((pl.col("C") > 0) & (pl.col("C") < pl.col("L")))
    short = (
        partial.group_by("task", "problem_id", "L", "C").agg(starts=pl.col("start").n_unique())
        .filter(pl.col("starts") < pl.col("L") - pl.col("C") + 1)
        .sort("task", "problem_id", "C")
    )
    if short.height:
        r = short.row(0, named=True)
        raise ValueError(
            f"sampling experiments need a full enumeration (every start of every span length): {short.height} "
            f"(problem, C) cell(s) are incomplete, e.g. task {r['task']!r}, problem_id {r['problem_id']!r}, "
            f"C = {r['C']}: {r['starts']} of {r['L'] - r['C'] + 1} starts (sampling strategy 'enumerate' observes all: "
            f"run the job with --set sampling.strategy=enumerate; the threshold experiment needs none)"
        )


def sensitivity_cell(
    frame: pl.DataFrame,
    ref_problems: pl.DataFrame,
    ref_tasks: pl.DataFrame,
    options: FitOptions = FitOptions(),
    seed: int = 0,
) -> pl.DataFrame:
    """One (task x setting) cell of :func:`run_sensitivity`, a plain function of one frame.

    ``frame`` is one task's validated observations plus constant columns ``experiment`` (one
    of :data:`EXPERIMENTS`) and ``setting``. The test fit uses ``options`` (those of the
    reference) and reuses the scenario selection of ``ref_problems`` (the reference fit of all
    tasks, with ``ref_tasks``): a sampling experiment refits the :func:`subsample` (random
    strategies drawn with ``seed``) of all subsets; threshold refits the task's COW subsets of
    continuous-metric problems with the setting as ``options.threshold``. Returns
    :func:`compare_fits` rows with experiment, setting, n_obs_ref and n_obs_test (observations
    behind the reference and test fits of the compared subsets).
    """
    head = frame.row(0, named=True)
    experiment, setting, task = head["experiment"], float(head["setting"]), head["task"]
    obs = frame.drop("experiment", "setting")
    sel = ref_problems.filter(pl.col("task") == task).select("task", "problem_id", "subset", "scenario", "dip_pvalue")
    if experiment in SAMPLING_EXPERIMENTS:
        test_obs, test_options = subsample(obs, sampling_for(experiment, setting), seed), options
    elif experiment == "threshold":
        cont = obs.group_by("problem_id").agg(pl.col("metric").first()).filter(
            ~binary_metric_expr()
        )
        sel = sel.filter((pl.col("scenario") == "COW") & pl.col("problem_id").is_in(cont["problem_id"].implode()))
        obs = obs.filter(pl.col("problem_id").is_in(sel["problem_id"].implode()))
        test_obs, test_options = obs, with_threshold(options, setting)
    else:
        raise ValueError(f"unknown experiment {experiment!r}; use one of {', '.join(EXPERIMENTS)}")
    if sel.height == 0:
        return pl.DataFrame(schema=SENSITIVITY_SCHEMA)
    ref_p = ref_problems.filter(pl.col("problem_id").is_in(sel["problem_id"].implode()) & (pl.col("task") == task))
    test_p, test_t = fit_observations(test_obs, test_options, selection=sel)
    cmp = compare_fits(ref_p, ref_tasks, test_p, test_t)
    n_obs = obs.join(sel.select("problem_id", "subset"), on="problem_id").group_by("subset").agg(n_obs_ref=pl.len())
    n_test = test_obs.join(sel.select("problem_id", "subset"), on="problem_id").group_by("subset").agg(
        n_obs_test=pl.len()
    )
    return (
        cmp.join(n_obs, on="subset", how="left").join(n_test, on="subset", how="left")
        .with_columns(experiment=pl.lit(experiment, pl.String), setting=pl.lit(setting, pl.Float64))
        .select(list(SENSITIVITY_SCHEMA))
        .cast(SENSITIVITY_SCHEMA)
    )


def run_sensitivity(
    obs: pl.DataFrame,
    experiments: Sequence[str] = ("take_every", "threshold"),
    mapper: Optional[Mapper] = None,
    *,
    every: Sequence[int] = DEFAULT_EVERY,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    settings: Optional[dict[str, Sequence[float]]] = None,
    options: FitOptions = FitOptions(),
    seed: int = 0,
) -> pl.DataFrame:
    """Sensitivity grid over (task x setting) (Section 6, Appendix K.1 and K.4).

    The reference is :func:`raylc.dolce.fit.fit_observations` on the full ``obs`` with
    ``options`` (scenario selection, threshold, EM steps, PIG options), itself mapped per
    subset by ``mapper``; every test fit uses the same ``options`` (the threshold experiment
    replaces its threshold by the setting). Both are point estimates: the grid compares λ, k and
    categories, so the posterior is not computed (:meth:`FitOptions.point_estimates`). Then every
    (task, experiment, setting) cell runs
    :func:`sensitivity_cell` through ``mapper(fn, frames, *args)`` (default in-process), for
    every setting of every experiment: ``settings[name]``,
    else ``every`` (take_every), ``thresholds`` (threshold) or the defaults of
    :data:`SAMPLING_EXPERIMENTS`. Sampling experiments need ``obs`` from full enumeration;
    threshold cells exist only for tasks with continuous-metric COW problems. Returns one row
    per (experiment, setting, task, subset) with the :func:`compare_fits` metrics, n_obs_ref
    and n_obs_test, sorted.
    """
    experiments = tuple(experiments)
    unknown = [e for e in dict.fromkeys((*experiments, *(settings or {}))) if e not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"unknown experiment(s) {unknown}; use {', '.join(EXPERIMENTS)}")
    values = {name: default for name, (_, default) in SAMPLING_EXPERIMENTS.items()}
    values.update({"take_every": tuple(every), "threshold": tuple(thresholds), **(settings or {})})
    values = {name: [float(v) for v in values[name]] for name in experiments}
    options = FitOptions.check(options).point_estimates()
    for name in experiments:  # invalid settings fail here, not in a Ray task
        for v in values[name]:
            if name in SAMPLING_EXPERIMENTS:
                sampling_for(name, v)
            else:
                with_threshold(options, v)
    obs = validate_observations(obs)
    if any(name in SAMPLING_EXPERIMENTS for name in experiments):
        check_full_enumeration(obs)
    mapper = mapper or in_process
    ref_p, ref_t = fit_observations(obs, options, mapper)
    cont_cow = ref_p.join(
        obs.group_by("task", "problem_id").agg(pl.col("metric").first()), on=["task", "problem_id"]
    ).filter((pl.col("scenario") == "COW") & ~binary_metric_expr())
    cont_tasks = set(cont_cow["task"].to_list())
    frames = []
    for (task,), task_obs in obs.group_by("task", maintain_order=True):
        cells = [(name, v) for name in experiments for v in values[name]
                 if name != "threshold" or task in cont_tasks]
        for experiment, setting in cells:
            frames.append(task_obs.with_columns(
                experiment=pl.lit(experiment, pl.String), setting=pl.lit(setting, pl.Float64)
            ))
    if not frames:
        return pl.DataFrame(schema=SENSITIVITY_SCHEMA)
    parts = mapper(sensitivity_cell, frames, ref_p, ref_t, options, int(seed))
    return pl.concat(parts).sort("experiment", "setting", "task", "subset")
