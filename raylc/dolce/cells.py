"""The shared machinery of the COW and PIG fits: per-(problem, C) cell statistics, the cell
grid with the (lambda, k) candidates, and :class:`CellFit`, the estimator contract of
:class:`raylc.dolce.cow.COWFit` and :class:`raylc.dolce.pig.PIGFit`.

Both likelihoods (Eq. 1 and Eq. 5) depend on an observation only through its problem, its
span length C and its outcome statistics, so both EMs run on per-(problem, C) sums
(:class:`CellStats`, from one polars group_by in :func:`cell_statistics`) padded into (P, Mc)
arrays, with the Section 4 candidates Lambda_i = K_i = {C_ij} U {0, maxC_i + 1, L_i} padded
into (P, M) (maxC_i: largest C_ij < L_i) (:func:`cell_grid`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import polars as pl

from raylc.dolce.categories import CATEGORIES, assign_categories, category_thresholds
from raylc.dolce.numeric import as_int
from raylc.dolce.uncertainty import OPEN, problem_uncertainty
from raylc.scoring.observations import OBSERVATION_SCHEMA

#: Columns of the observation table the fitters consume (:data:`raylc.scoring.OBSERVATION_SCHEMA`).
OBS_COLUMNS = tuple(OBSERVATION_SCHEMA)

#: The per-problem uncertainty columns of :meth:`CellFit.frames` (:mod:`raylc.dolce.uncertainty`).
UNCERTAINTY_SCHEMA = {"confidence": pl.Float64, **{f"p_{c}": pl.Float64 for c in CATEGORIES},
                      "lam_low": pl.Int64, "lam_high": pl.Int64}

#: Numerical-tie tolerance of the EM's argmax over (lambda, k): objectives within
#: LL_TIE_RTOL (1 + |max|) of a problem's maximum tie, and the first pair in (lambda
#: ascending, k ascending) order wins. Two pairs can tie in exact arithmetic through terms
#: computed by different expressions (COW: lambda = 0, pi = 1 against pi = 1/2 when
#: (P_i(O) + a_1) a_IDK = (P_i(O)/2 + a_1)(P_i(O)/2 + a_IDK)), whose rounding then decides
#: the winner; the tolerance (far above rounding, ~1e-16 |max| per term, far below any
#: likelihood difference that carries information) makes the choice independent of how the
#: objective is evaluated.
LL_TIE_RTOL = 1e-10


def first_near_max(score: np.ndarray, allowed: np.ndarray, rtol: float = LL_TIE_RTOL) -> np.ndarray:
    """Row-wise index of the first allowed entry within rtol (1 + |max|) of the row maximum
    (the first allowed entry when every allowed entry is -inf)."""
    s = np.where(allowed, score, -np.inf)
    mx = s.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        thr = np.where(np.isfinite(mx), mx - rtol * (1.0 + np.abs(mx)), -np.inf)
    return np.argmax(allowed & (s >= thr), axis=1)


def segment_positions(owner: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Position of each element inside its group (``owner`` sorted) and the group sizes."""
    sizes = np.bincount(owner, minlength=n_groups)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return np.arange(owner.size) - first[owner], sizes


def cell_grid(problem, L, C, stats: np.ndarray) -> dict:
    """Validate and pad per-observation-row statistics into the (problem, C) cell grid.

    ``problem``, ``L``, ``C``: aligned 1-D arrays (L constant per problem); ``stats``: (N, m)
    non-negative sums (counts or soft counts) whose row sum is the row's weight. Duplicate
    (problem, C) rows are summed and empty cells dropped. Returns ``problems`` (sorted unique
    codes), ``P``, ``Lp``, ``maxC``, ``Mc``, ``Cpad``, ``stats`` (P, Mc, m), ``cellmask``,
    ``M``, ``cand`` (P, M, ascending), ``candmask`` and ``valid`` (P, M, M): the (lambda, k)
    pairs with k >= 1 and k lambda <= L_i.
    """
    problem = np.asarray(problem)
    if problem.ndim != 1:
        raise ValueError("problem must be a 1-D array")
    n = problem.shape[0]
    if n == 0:
        raise ValueError("no observations given (empty input)")
    for name, a in (("L", L), ("C", C)):
        if np.ndim(a) != 1 or np.shape(a)[0] != n:
            raise ValueError(f"{name} must be a 1-D array aligned with problem (length {n})")
    if stats.ndim != 2 or stats.shape[0] != n:
        raise ValueError(f"statistics must be aligned with problem (length {n})")
    L_a, C_a = as_int(L, "L"), as_int(C, "C")
    if np.any(L_a < 1):
        raise ValueError("L must be >= 1")
    if np.any(C_a < 0):
        raise ValueError("C must be non-negative")
    if np.any(C_a > L_a):
        raise ValueError("C must not exceed L (observation span longer than the context)")

    problems, pid = np.unique(problem, return_inverse=True)
    pid = pid.reshape(-1)
    P = problems.size
    order = np.lexsort((C_a, pid))
    pid, L_a, C_a, Y = pid[order], L_a[order], C_a[order], stats[order]
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    L_lo, L_hi = np.minimum.reduceat(L_a, starts), np.maximum.reduceat(L_a, starts)
    if np.any(L_lo != L_hi):
        bad = problems[np.flatnonzero(L_lo != L_hi)[0]]
        raise ValueError(f"problem {bad!r} has several context lengths L")
    Lp = L_lo
    totals = np.add.reduceat(Y.sum(axis=1), starts)
    if np.any(totals <= 0):
        bad = problems[np.flatnonzero(totals <= 0)[0]]
        raise ValueError(f"problem {bad!r} has no observations (all counts are 0)")

    cell_start = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (C_a[1:] != C_a[:-1])])
    cell_Y = np.add.reduceat(Y, cell_start, axis=0)
    cell_pid, cell_C = pid[cell_start], C_a[cell_start]
    keep = cell_Y.sum(axis=1) > 0
    cell_Y, cell_pid, cell_C = cell_Y[keep], cell_pid[keep], cell_C[keep]

    pos, n_cells = segment_positions(cell_pid, P)
    Mc = int(n_cells.max())
    Cpad = np.zeros((P, Mc), dtype=np.int64)
    Ypad = np.zeros((P, Mc, Y.shape[1]))
    cellmask = np.zeros((P, Mc), dtype=bool)
    Cpad[cell_pid, pos] = cell_C
    Ypad[cell_pid, pos] = cell_Y
    cellmask[cell_pid, pos] = True

    partial = cell_C < Lp[cell_pid]
    maxC = np.zeros(P, dtype=np.int64)
    np.maximum.at(maxC, cell_pid[partial], cell_C[partial])

    ar = np.arange(P)
    vals = np.concatenate([cell_C, np.zeros(P, dtype=np.int64), maxC + 1, Lp])
    owner = np.concatenate([cell_pid, ar, ar, ar])
    o = np.lexsort((vals, owner))
    vals, owner = vals[o], owner[o]
    first = np.r_[True, (owner[1:] != owner[:-1]) | (vals[1:] != vals[:-1])]
    vals, owner = vals[first], owner[first]
    cpos, n_cand = segment_positions(owner, P)
    M = int(n_cand.max())
    cand = np.zeros((P, M), dtype=np.int64)
    candmask = np.zeros((P, M), dtype=bool)
    cand[owner, cpos] = vals
    candmask[owner, cpos] = True
    lam_b, k_b = cand[:, :, None], cand[:, None, :]
    valid = candmask[:, :, None] & candmask[:, None, :] & (k_b >= 1) & (k_b * lam_b <= Lp[:, None, None])
    return dict(problems=problems, P=P, Lp=Lp, maxC=maxC, Mc=Mc, Cpad=Cpad, stats=Ypad, cellmask=cellmask,
                M=M, cand=cand, candmask=candmask, valid=valid)


def check_task_table(obs: pl.DataFrame) -> None:
    """Guard for the per-task fitters: one task, the observation columns, valid values (ValueError)."""
    if not isinstance(obs, pl.DataFrame):
        raise ValueError(f"obs must be a polars DataFrame, got {type(obs).__name__}")
    missing = [c for c in OBS_COLUMNS if c not in obs.columns]
    if missing:
        raise ValueError(f"observation table is missing column(s): {', '.join(missing)}")
    if obs.height == 0:
        raise ValueError("observation table is empty")
    for c in ("L", "C", "start"):
        if not obs.schema[c].is_integer():
            raise ValueError(f"column {c!r} must be an integer column, got {obs.schema[c]}")
    if not obs.schema["score"].is_numeric():
        raise ValueError(f"column 'score' must be numeric (null = IDK), got {obs.schema['score']}")
    score = pl.col("score").cast(pl.Float64)
    task = pl.col("task")
    s = obs.select(
        # 0 iff one task (every value equals the first; no nulls, or all null): n_unique only if not
        other_tasks=(task != task.first()).sum() + task.null_count() % pl.len(),
        nulls=pl.sum_horizontal(pl.col("task", "problem_id", "L", "C").null_count()),
        min_L=pl.col("L").min(),
        min_C=pl.col("C").min(),
        min_start=pl.col("start").min(),
        c_gt_l=(pl.col("C") > pl.col("L")).sum(),
        outside=(pl.col("start") + pl.col("C") > pl.col("L")).sum(),
        bad_score=(score.is_nan() | (score < 0) | (score > 1)).sum(),
    ).row(0, named=True)
    if s["other_tasks"] and (n_tasks := obs["task"].n_unique()) != 1:
        raise ValueError(f"observation table must hold exactly one task, found {n_tasks}")
    if s["nulls"]:
        raise ValueError("columns task, problem_id, L, C must not contain nulls")
    if s["min_L"] < 1:
        raise ValueError("L must be >= 1")
    if s["min_C"] < 0 or (s["min_start"] is not None and s["min_start"] < 0):
        raise ValueError("C and start must be non-negative")
    if s["c_gt_l"]:
        raise ValueError(f"{s['c_gt_l']} observation(s) have C > L")
    if s["outside"]:
        raise ValueError(f"{s['outside']} observation span(s) end past the context (start + C > L)")
    if s["bad_score"]:
        raise ValueError(f"{s['bad_score']} score(s) outside [0, 1] (use null for IDK)")


@dataclass(frozen=True)
class CellStats:
    """Sufficient statistics of one task's observations, one row per (problem, C) cell: the
    input of :meth:`CellFit.fit_stats`, the same for COW and PIG.

    ``problem``, ``L``, ``C``: aligned 1-D arrays (problem ids or codes; L constant per
    problem). ``y1`` and ``y0``: sums of y(1) = s and y(0) = 1 - s over the row's non-IDK
    observations (COW: binary s, i.e. the counts of outcomes 1 and 0); ``nidk``: the row's IDK
    count; float weights are allowed. ``n``: the row's number of observations (None:
    y1 + y0 + nidk; otherwise checked against it). Rows of the same (problem, C) are summed;
    all-zero rows are no observations. ``score_counts`` = (problem, C, s, count) per
    distinct score (s NaN = IDK) is used only by PIGFit's ``likelihood="score"`` /
    ``"binned"`` options.
    """

    problem: Any
    L: Any
    C: Any
    y1: Any
    y0: Any
    nidk: Any
    n: Any = None
    score_counts: Optional[tuple] = None

    @classmethod
    def from_scores(cls, problem, L, C, s) -> "CellStats":
        """One row per observation: score s in [0, 1], NaN = IDK (``score_counts`` included)."""
        s_a = np.asarray(s, dtype=np.float64)
        if s_a.ndim != 1:
            raise ValueError("s must be a 1-D array")
        ok = np.isnan(s_a) | ((s_a >= 0.0) & (s_a <= 1.0))
        if not ok.all():
            raise ValueError("scores s must lie in [0, 1] (NaN = IDK)")
        idk = np.isnan(s_a)
        ones = np.ones(s_a.size)
        return cls(problem, L, C, np.where(idk, 0.0, s_a), np.where(idk, 0.0, 1.0 - s_a), idk.astype(float),
                   n=ones, score_counts=(problem, C, s_a, ones))

    def outcomes(self) -> np.ndarray:
        """The checked (N, 3) statistics y1, y0, nidk (ValueError: misaligned, negative,
        non-finite, or n != y1 + y0 + nidk)."""
        N = np.shape(self.problem)[0] if np.ndim(self.problem) else 0
        named = {"y1": self.y1, "y0": self.y0, "nidk": self.nidk, **({} if self.n is None else {"n": self.n})}
        for name, a in named.items():
            if np.ndim(a) != 1 or np.shape(a)[0] != N:
                raise ValueError(f"{name} must be a 1-D array aligned with problem (length {N})")
        Y = np.stack([np.asarray(a, dtype=np.float64) for a in (self.y1, self.y0, self.nidk)], axis=1)
        n = Y.sum(axis=1) if self.n is None else np.asarray(self.n, dtype=np.float64)
        if not (np.all(np.isfinite(Y)) and np.all(np.isfinite(n))) or np.any(Y < 0) or np.any(n < 0):
            raise ValueError("statistics y1, y0, nidk, n must be finite and non-negative")
        if np.any(np.abs(Y.sum(axis=1) - n) > 1e-9 * np.maximum(1.0, n)):
            raise ValueError("inconsistent statistics: n must equal y1 + y0 + nidk")
        return Y


def cell_statistics(obs: pl.DataFrame, cut: Optional[pl.Expr] = None, *, by_score: bool = False) -> CellStats:
    """:class:`CellStats` of one task's observation table (score null = IDK), by one polars
    group_by per (problem_id, L, C), sorted by problem_id, C.

    With a ``cut`` (COW) the outcome of a score s is 1 if s >= cut, else 0, and y1, y0 are
    counts; without (PIG) y1 = sum s and y0 = sum (1 - s). ``by_score`` groups per
    (problem_id, L, C, score) instead (sorted by score last) and adds ``score_counts``.
    """
    score = pl.col("score").cast(pl.Float64)
    if cut is not None:
        cells = (  # integer counts, exact in any order: a lazy query, which polars optimizes
            obs.lazy()
            .group_by("problem_id", "L", "C")
            .agg(n=pl.len(), y1=(score >= cut).sum(), y0=(score < cut).sum(), nidk=score.is_null().sum())
            .sort("problem_id", "C")
            .collect()
        )
    elif by_score:
        cells = (
            obs.with_columns(score=score)
            .group_by("problem_id", "L", "C", "score")
            .agg(n=pl.len())
            .with_columns(
                y1=pl.col("score").fill_null(0.0) * pl.col("n"),
                y0=(1.0 - pl.col("score")).fill_null(0.0) * pl.col("n"),
                nidk=pl.when(pl.col("score").is_null()).then(pl.col("n")).otherwise(0),
            )
            .sort("problem_id", "C", "score")
        )
    else:
        cells = (  # eager: its float sums come out the same on every run (the lazy engine's need not)
            obs.group_by("problem_id", "L", "C")
            .agg(n=pl.len(), y1=score.sum(), y0=(1.0 - score).sum(), nidk=score.is_null().sum())
            .sort("problem_id", "C")
        )
    problem = cells["problem_id"].cast(pl.String).to_numpy()
    C = cells["C"].to_numpy()
    n = cells["n"].to_numpy().astype(np.float64)
    score_counts = None
    if by_score:
        score_counts = (problem, C, cells["score"].fill_null(float("nan")).to_numpy().astype(np.float64), n)
    return CellStats(
        problem, cells["L"].to_numpy(), C, cells["y1"].to_numpy().astype(np.float64),
        cells["y0"].to_numpy().astype(np.float64), cells["nidk"].to_numpy().astype(np.float64), n=n,
        score_counts=score_counts,
    )


class CellFit:
    """The estimator contract of :class:`~raylc.dolce.cow.COWFit` and
    :class:`~raylc.dolce.pig.PIGFit` (scikit-learn style: hyperparameters in ``__init__``,
    learned attributes ending in ``_``).

    * :meth:`fit` (one task's observation table, columns :data:`OBS_COLUMNS`) checks it
      (:func:`check_task_table`), forms its :class:`CellStats` (:meth:`cell_stats`: COW binarizes
      the scores first), sets the task-level attributes ``task_`` and ``lam_p_``, ``k_p_``
      (Section 4, :func:`task_thresholds`), runs :meth:`fit_stats` and sets ``category_``
      (Figure 1, per problem); returns self.
    * :meth:`fit_stats` (:class:`CellStats`) runs the EM alone; returns self. Learned
      attributes, indexed like ``problems_`` (sorted unique problem ids): ``lam_``, ``k_``
      (int64), ``loglik_`` (the objective at the final pair), ``prior_oracle_`` (P_i(O)),
      ``lam_q_`` (maxC_i, int64), ``L_`` (L_i, int64); ``noise_`` = (P(1|N), P(0|N), P(IDK|N)); per cell (sorted by
      problem, C) ``cells_problem_`` (index into ``problems_``) and ``cells_C_``; ``n_iter_``
      (steps run) and ``ll_change_`` (the last step's change of the summed step-(b) objective).
    * ``tol`` > 0 (hyperparameter) runs the EM until that change is at most ``tol``, at most
      ``max_steps`` steps, instead of the fixed ``n_steps``.
    * ``uncertainty_steps`` > 0 (hyperparameter) adds ``uncertainty_`` in :meth:`fit`: the
      posterior over the candidate pairs after that many EM steps, shared out over the EM
      starts of ``_posterior_starts`` (:meth:`_posterior_fits`;
      :func:`raylc.dolce.uncertainty.problem_uncertainty`: confidence, category
      probabilities, a 90% lambda interval); 0 (the class default) skips it.
    * :meth:`frames` gives the fit as (problems frame, task info dict).
    """

    #: "COW" or "PIG" (the ``scenario`` column of :meth:`frames`).
    scenario = ""
    #: q_ij(N) = P_i(N) at the EM's initialisation (0.5: Algorithms 1 and 2).
    _em_start: float = 0.5
    #: The EM starts (values of ``_em_start``) whose fixed points the posterior integrates over.
    _posterior_starts: tuple = (0.5,)
    #: Step (b)'s argmax of the posterior's EM runs: the pair of largest prior x marginal
    #: likelihood (:mod:`raylc.dolce.uncertainty`) instead of the largest objective, so that the
    #: nuisance parameters they settle at are fitted to the pair the posterior favours.
    _marginal_argmax: bool = False

    def __init__(self, n_steps: int, tol: float = 0.0, max_steps: int = 1000, uncertainty_steps: int = 0):
        """The hyperparameters every fit shares (T, and the stopping and posterior options above);
        a subclass adds its own and passes these on."""
        self.n_steps = n_steps
        self.tol = tol
        self.max_steps = max_steps
        self.uncertainty_steps = uncertainty_steps

    def _check_params(self) -> None:
        if int(self.n_steps) < 1:
            raise ValueError("n_steps must be >= 1")
        if not (np.isfinite(self.tol) and self.tol >= 0) or int(self.max_steps) < 1:
            raise ValueError("tol must be finite and >= 0, max_steps >= 1")
        if int(self.uncertainty_steps) < 0:
            raise ValueError("uncertainty_steps must be >= 0 (0: no uncertainty)")

    def _steps(self) -> int:
        """Steps to run at most: ``n_steps`` (T), or ``max_steps`` when ``tol`` > 0."""
        return int(self.max_steps) if self.tol > 0 else int(self.n_steps)

    def _step_done(self, step: int, loglik: np.ndarray) -> bool:
        """Record step ``step``'s summed objective (finite terms) and its change from the step
        before (``n_iter_``, ``ll_change_``: NaN after one step); True when ``tol`` > 0 and the
        change is at most ``tol`` (the EM has converged)."""
        total = float(np.sum(loglik[np.isfinite(loglik)]))
        self.ll_change_ = total - self._ll_prev if step > 0 else float("nan")
        self._ll_prev, self.n_iter_ = total, step + 1
        return self.tol > 0 and step > 0 and abs(self.ll_change_) <= self.tol

    def cell_stats(self, obs: pl.DataFrame) -> CellStats:
        """The :class:`CellStats` this estimator fits from a checked observation table."""
        return cell_statistics(obs)


    def fit(self, obs: pl.DataFrame) -> "CellFit":
        """Fit one task's observation table (columns task, problem_id, L, C, start, score,
        metric; score null = IDK)."""
        self._check_params()
        check_task_table(obs)
        stats = self.cell_stats(obs)
        lam_p, k_p = task_thresholds(stats.L, stats.C)
        self.fit_stats(stats)
        self.task_ = str(obs["task"][0])
        self.lam_p_, self.k_p_ = lam_p, k_p
        self.uncertainty_ = None
        if self.uncertainty_steps:
            runs = self._posterior_fits(stats)
            u = problem_uncertainty([p for f in runs for p in self.posterior_pairs(obs, f)], self.problems_.size,
                                    lam_p, k_p, self.lam_q_)
            # one rule: the posterior's most probable category and its most probable pair; the
            # objective and P_i(O) stay the point fit's (its last step, at that pair)
            pair = u["pair"]
            self.lam_, self.k_ = self.pairs_["lam"][pair], self.pairs_["k"][pair]
            self.loglik_ = self.pairs_["loglik"][pair]
            self.uncertainty_ = u
        self.category_ = assign_categories(self.lam_, self.k_, lam_p, k_p, self.lam_q_)
        return self

    def posterior_pairs(self, obs: pl.DataFrame, run: "CellFit") -> list[dict]:
        """A posterior EM run's scored pairs as the posterior reads them, one set per way of
        scoring them (``[run.pairs_]`` unless an estimator adds one); the posterior mixes them,
        like the runs, by their evidence."""
        return [run.pairs_]

    def _posterior_fits(self, stats: CellStats) -> list["CellFit"]:
        """The fits whose last step's pair objectives give the posterior, one per EM start of
        ``_posterior_starts``: each run with ``_marginal_argmax`` for ``uncertainty_steps`` /
        (number of starts) steps, or to the tolerance when ``tol`` > 0 (this fit itself if it
        was such a run)."""
        steps = max(1, int(self.uncertainty_steps) // len(self._posterior_starts))
        fits = []
        for start in self._posterior_starts:
            if (start == self._em_start and self._marginal_argmax and (self.tol > 0 or self.n_iter_ >= steps)
                    and stats is getattr(self, "_fitted_stats", None)):
                fits.append(self)
                continue
            run = copy.copy(self)
            run._em_start, run._marginal_argmax = start, True
            if run.tol <= 0:
                run.n_steps = steps
            fits.append(run.fit_stats(stats))
        return fits

    def fit_stats(self, stats: CellStats) -> "CellFit":
        """Run the EM on per-(problem, C) statistics."""
        self._check_params()
        self._em(stats, cell_grid(stats.problem, stats.L, stats.C, stats.outcomes()))
        self._fitted_stats = stats
        return self

    def _em(self, stats: CellStats, grid: dict) -> None:
        raise NotImplementedError

    def _set_fit(self, grid: dict, lam, k, loglik, prior_oracle, noise) -> None:
        """The learned attributes every CellFit shares."""
        self.problems_ = grid["problems"]
        self.lam_ = np.asarray(lam).astype(np.int64)
        self.k_ = np.asarray(k).astype(np.int64)
        self.loglik_ = np.asarray(loglik).astype(np.float64)
        self.prior_oracle_ = prior_oracle
        self.lam_q_ = grid["maxC"].astype(np.int64)
        self.L_ = grid["Lp"].astype(np.int64)
        self.noise_ = np.asarray(noise, dtype=np.float64)
        cp, cc = np.nonzero(grid["cellmask"])
        self.cells_problem_ = cp.astype(np.int64)
        self.cells_C_ = grid["Cpad"][cp, cc]

    def _uncertainty_columns(self, P: int) -> dict[str, pl.Series]:
        """confidence, p_I .. p_V, lam_low, lam_high (null: open at the top); all null
        without uncertainty."""
        u = getattr(self, "uncertainty_", None)
        if u is None:
            return {c: pl.Series(c, [None] * P, dtype=t) for c, t in UNCERTAINTY_SCHEMA.items()}
        cols = {"confidence": pl.Series("confidence", u["confidence"], dtype=pl.Float64)}
        cols |= {f"p_{c}": pl.Series(f"p_{c}", u["proba"][:, i], dtype=pl.Float64) for i, c in enumerate(CATEGORIES)}
        cols["lam_low"] = pl.Series("lam_low", u["lam_low"], dtype=pl.Int64)
        cols["lam_high"] = pl.Series("lam_high", u["lam_high"], dtype=pl.Int64).replace(OPEN, None)
        return cols

    def _set_pairs(self, problem, lam, k, loglik, **below) -> None:
        """The last step's objective of every scored (lambda, k) pair (``pairs_``: problem index,
        lambda, k, loglik; sorted by problem), the input of the per-problem uncertainty; COW posterior runs add
        ``below_ll`` (the plug-in part of loglik below lambda), ``below_n`` (V, 3: the counts
        of 1, 0, IDK below lambda) and ``below_prior`` (3,: the task's Dirichlet below lambda, if
        fitted) for the marginal of :mod:`raylc.dolce.uncertainty`."""
        self.pairs_ = dict(problem=np.asarray(problem, dtype=np.int64), lam=np.asarray(lam, dtype=np.int64),
                           k=np.asarray(k, dtype=np.int64), loglik=np.asarray(loglik, dtype=np.float64),
                           **{c: np.asarray(v, dtype=np.float64) for c, v in below.items() if v is not None})

    def frames(self) -> tuple[pl.DataFrame, dict]:
        """The fit of :meth:`fit` as (problems, info): problems has columns task, problem_id,
        scenario, lam, k, category, loglik, prior_oracle, sorted by problem_id; info is
        {"p_noise_1", "p_noise_0", "p_noise_idk", "lam_p", "k_p", "em_steps", "em_ll_change",
        "share_draws"}: the steps run, the last step's change of the summed objective (the
        convergence diagnostic) and the posterior's per-sweep category counts (None without it;
        :mod:`raylc.dolce.shares`)."""
        P = self.problems_.size
        problems = pl.DataFrame(
            {
                "task": pl.Series("task", [self.task_] * P, dtype=pl.String),
                "problem_id": pl.Series("problem_id", self.problems_.astype(str), dtype=pl.String),
                "scenario": pl.Series("scenario", [self.scenario] * P, dtype=pl.String),
                "lam": pl.Series("lam", self.lam_, dtype=pl.Int64),
                "k": pl.Series("k", self.k_, dtype=pl.Int64),
                "category": pl.Series("category", self.category_.astype(str), dtype=pl.String),
                "loglik": pl.Series("loglik", self.loglik_, dtype=pl.Float64),
                "prior_oracle": pl.Series("prior_oracle", self.prior_oracle_, dtype=pl.Float64),
                **self._uncertainty_columns(P),
            }
        ).sort("problem_id")
        info = {
            "p_noise_1": float(self.noise_[0]),
            "p_noise_0": float(self.noise_[1]),
            "p_noise_idk": float(self.noise_[2]),
            "lam_p": int(self.lam_p_),
            "k_p": int(self.k_p_),
            "em_steps": int(self.n_iter_),
            "em_ll_change": None if np.isnan(self.ll_change_) else float(self.ll_change_),  # null: one step
            # the posterior's per-sweep category counts (None without it): the shares' interval
            "share_draws": None if getattr(self, "uncertainty_", None) is None else self.uncertainty_["share_draws"],
        }
        return problems, info


def task_thresholds(L: np.ndarray, C: np.ndarray) -> tuple[int, int]:
    """lambda_p, k_p (Section 4) from a task's partial observation lengths 0 < C < L."""
    L, C = np.asarray(L), np.asarray(C)
    ladder = np.unique(C[(C > 0) & (C < L)])
    if ladder.size == 0:
        raise ValueError("task has no partial observation length 0 < C < L; cannot set lambda_p, k_p")
    return category_thresholds(ladder)
