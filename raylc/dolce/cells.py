"""The (problem, C) cell grid and the (lambda, k) candidates shared by the COW and PIG fits.

Both likelihoods (Eq. 1 and Eq. 5) depend on an observation only through its problem, its
span length C and its outcome statistics, so both EMs run on per-(problem, C) sums padded
into (P, Mc) arrays, with the Section 4 candidates Lambda_i = K_i =
{C_ij} U {0, maxC_i + 1, L_i} padded into (P, M) (maxC_i: largest C_ij < L_i).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.dolce.categories import assign_categories, category_thresholds

#: Columns of the observation table the fitters consume.
OBS_COLUMNS = ("task", "problem_id", "L", "C", "start", "score", "metric")

#: Numerical-tie tolerance of the EM's argmax over (lambda, k): objectives within
#: LL_TIE_RTOL (1 + |max|) of a problem's maximum tie, and the first pair in (lambda
#: ascending, k ascending) order wins. Two pairs can tie in exact arithmetic through terms
#: computed by different expressions (COW: lambda = 0, pi = 1 against pi = 1/2 when
#: (P_i(O) + a_1) a_IDK = (P_i(O)/2 + a_1)(P_i(O)/2 + a_IDK)), whose rounding then decides
#: the winner; the tolerance (far above rounding, ~1e-16 |max| per term, far below any
#: likelihood difference that carries information) makes the choice independent of how the
#: objective is evaluated.
LL_TIE_RTOL = 1e-10


def int_vector(x, name: str) -> np.ndarray:
    """``x`` as int64, accepting integral floats; ValueError naming ``name`` otherwise."""
    a = np.asarray(x)
    if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.floor(a)):
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    return a.astype(np.int64)


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
    L_a, C_a = int_vector(L, "L"), int_vector(C, "C")
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


def fit_frames(model, task: str, scenario: str, lam_p: int, k_p: int) -> tuple[pl.DataFrame, dict]:
    """A fitted COWFit/PIGFit as (problems frame, info dict) with Figure 1 categories."""
    categories = assign_categories(model.lam_, model.k_, lam_p, k_p, model.lam_q_)
    P = model.problems_.size
    problems = pl.DataFrame(
        {
            "task": pl.Series("task", [task] * P, dtype=pl.String),
            "problem_id": pl.Series("problem_id", model.problems_.astype(str), dtype=pl.String),
            "scenario": pl.Series("scenario", [scenario] * P, dtype=pl.String),
            "lam": pl.Series("lam", model.lam_, dtype=pl.Int64),
            "k": pl.Series("k", model.k_, dtype=pl.Int64),
            "category": pl.Series("category", categories.astype(str), dtype=pl.String),
            "loglik": pl.Series("loglik", model.loglik_, dtype=pl.Float64),
            "prior_oracle": pl.Series("prior_oracle", model.prior_oracle_, dtype=pl.Float64),
        }
    ).sort("problem_id")
    info = {
        "p_noise_1": float(model.noise_[0]),
        "p_noise_0": float(model.noise_[1]),
        "p_noise_idk": float(model.noise_[2]),
        "lam_p": int(lam_p),
        "k_p": int(k_p),
    }
    return problems, info


def task_thresholds(L: np.ndarray, C: np.ndarray) -> tuple[int, int]:
    """lambda_p, k_p (Section 4) from a task's partial observation lengths 0 < C < L."""
    ladder = np.unique(C[(C > 0) & (C < L)])
    if ladder.size == 0:
        raise ValueError("task has no partial observation length 0 < C < L; cannot set lambda_p, k_p")
    return category_thresholds(ladder)
