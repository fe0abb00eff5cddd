"""EM-based MLE of (lambda, k) in the COW scenario (DOLCE Sections 3.2-3.4, Algorithm 1).

The mixture likelihood (Eq. 1) depends on an observation only through (problem i, span
length C_ij, outcome x_ij in {1, 0, IDK}), so the EM runs on counts per (problem, C) cell.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.dolce.cells import OBS_COLUMNS, cell_grid, check_task_table, fit_frames, task_thresholds
from raylc.dolce.cover import cow_cover_prob

__all__ = ["COWFit", "fit_cow_task", "OUTCOMES", "OBS_COLUMNS"]

#: Outcome order used for counts and for ``COWFit.noise_``.
OUTCOMES = ("1", "0", "IDK")


def _cell_term(cnt: np.ndarray, log_p: np.ndarray) -> np.ndarray:
    """sum_x n_x log p_x over the last axis (x = 1, 0, IDK), skipping n_x = 0 (0 log 0 = 0).

    One fixed expression for every cell, below or above lambda, so that two candidates with
    the same per-outcome probabilities get bit-identical sums (ties stay exact ties)."""
    n1, n0, ni = cnt[..., 0], cnt[..., 1], cnt[..., 2]
    return (
        np.where(n1 > 0, n1 * log_p[..., 0], 0.0)
        + np.where(n0 > 0, n0 * log_p[..., 1], 0.0)
        + np.where(ni > 0, ni * log_p[..., 2], 0.0)
    )


class COWFit:
    """Per-problem (lambda_i, k_i) of one task by EM over the COW mixture (Algorithm 1).

    Model (Section 3.2): x_ij comes from the noise component N (Eq. 2, one distribution
    P(x|N) shared by the task) with prior P_i(N), or from the hybrid oracle O (Eq. 4) with
    prior P_i(O): for C_ij < lambda the non-parametric P_nonpar,i(x|O; lambda) (shared by the
    problem's observations with C < lambda, Section 4), for C_ij >= lambda the parametric
    Eq. 3: P(1|O) = pi(lambda, k; L_i, C_ij), P(0|O) = 0, P(IDK|O) = 1 - pi (Appendix A.1).

    Candidates (Section 4): Lambda_i = K_i = {C_ij}_j U {0, maxC_i + 1, L_i}, maxC_i the
    largest partial length C_ij < L_i (0 if the problem has none); pairs with k < 1 or
    k lambda > L_i are excluded. For lambda = 0 all k >= 1 tie (pi = 1).

    Each of the ``n_steps`` = T iterations runs, in Algorithm 1's order:
      (a) M-step noise: P(x|N) = sum_ij q_ij(N) 1[x_ij = x] / sum_ij q_ij(N);
      (b) for every problem and candidate lambda, P_nonpar,i(x|O; lambda) =
          sum_j q_ij(O) 1[x_ij = x, C_ij < lambda] / sum_j q_ij(O) 1[C_ij < lambda]; then
          (lambda_i*, k_i*) = argmax over valid pairs of
          sum_j log[P_ij(x_ij|O; lambda, k) P_i(O) + P(x_ij|N) P_i(N)] by brute force, with
          P_i(z) from the previous iteration (0.5 at t = 1); ties go to the first pair in
          (lambda ascending, k ascending) order;
      (c) M-step priors: P_i(z) = sum_j q_ij(z) / |J_i| (Algorithm 1's extra 1[x_ij = x] in
          this line is a typo: the prior is the mean responsibility);
      (d) E-step: q_ij(N) = P(x_ij|N) P_i(N) / [P(x_ij|N) P_i(N) + P_ij(x_ij|O) P_i(O)] and
          q_ij(O) = 1 - q_ij(N) (the two duplicated q(z = IDK) lines of Algorithm 1 are a
          typo and dropped).
    Algorithm 1 assigns P_ij(x|O) = 1 to outcomes x != x_ij (exponent 0); only the observed
    outcome ever enters the likelihood and the q's, which is what is computed here.
    Initialisation: q_ij(z|x) = 0.5, P_i(z) = 0.5.

    Guards (no epsilon floors are used): 0/0 in P_nonpar (no oracle responsibility below
    lambda) gives P_nonpar = 0, leaving those observations to the noise component; 0/0 in the
    noise M-step (no noise responsibility at all) gives the uniform 1/3; a zero E-step
    denominator gives q_ij(N) = P_i(N) (posterior = prior). A zero mixture probability gives
    log 0 = -inf for that candidate. In exact arithmetic the last two cannot occur.

    Vectorization: pi is precomputed once for every (problem, lambda, k, cell with
    C >= lambda) on padded arrays with masks; P_nonpar comes from cumulative sums over cells
    sorted by C; all pairs are scored at once. Every candidate's objective sums one fixed
    per-cell expression over the same cells in the same order, so mathematically tied
    candidates (e.g. lambda = maxC_i + 1 and L_i) tie exactly and the first one wins, as in a
    per-observation loop. Cost O(P |Lambda|^2 |cells|) time and memory per step.

    ``fit(problem, L, C, n1, n0, nidk)`` takes aligned 1-D arrays, one row per (problem, C)
    cell (duplicate cells are summed; cells with zero counts are no observations): the
    problem code, its length L (constant per problem), C, and the counts of outcomes 1, 0,
    IDK (float weights allowed). Learned attributes, indexed like ``problems_`` (sorted unique
    codes): ``lam_``, ``k_`` (int64), ``loglik_`` (objective of step (b) at the final pair),
    ``prior_oracle_`` (P_i(O) from the last step (c)), ``lam_q_`` (maxC_i, int64) and
    ``noise_`` = (P(1|N), P(0|N), P(IDK|N)) from the last step (a).
    """

    def __init__(self, n_steps: int = 10):
        self.n_steps = n_steps

    # ------------------------------------------------------------------ preparation
    def _prepare(self, problem, L, C, n1, n0, nidk) -> dict:
        for name, a in (("n1", n1), ("n0", n0), ("nidk", nidk)):
            if np.ndim(a) != 1 or np.shape(a)[0] != np.shape(problem)[0]:
                raise ValueError(f"{name} must be a 1-D array aligned with problem (length {np.shape(problem)[0]})")
        cnt = np.stack([np.asarray(a, dtype=np.float64) for a in (n1, n0, nidk)], axis=1)
        if not np.all(np.isfinite(cnt)) or np.any(cnt < 0):
            raise ValueError("counts n1, n0, nidk must be finite and non-negative")
        g = cell_grid(problem, L, C, cnt)
        P, M, Lp, Cpad, cellmask, cand, valid = g["P"], g["M"], g["Lp"], g["Cpad"], g["cellmask"], g["cand"], g["valid"]
        problems, maxC, cntpad = g["problems"], g["maxC"], g["stats"]

        below = cellmask[:, None, :] & (Cpad[:, None, :] < cand[:, :, None])  # (P, M, Mc)
        above = cellmask[:, None, :] & ~below
        n_below = below.sum(axis=2)  # cells sorted by C: the cells below lambda are a prefix

        # pi(lambda, k; L_i, C) for every valid pair and cell with C >= lambda (Eq. 3), once
        need = valid[:, :, :, None] & above[:, :, None, :]
        shape = need.shape
        need_idx = np.flatnonzero(need)
        p_e, l_e, k_e, c_e = np.unravel_index(need_idx, shape)
        pi = np.full(shape, 0.5)  # entries outside ``need`` are never used
        pi_e = cow_cover_prob(cand[p_e, l_e], cand[p_e, k_e], Lp[p_e], Cpad[p_e, c_e]) if need_idx.size else np.zeros(0)
        pi.reshape(-1)[need_idx] = pi_e
        return dict(
            problems=problems, P=P, M=M, Lp=Lp, maxC=maxC, Cpad=Cpad, cntpad=cntpad, cellmask=cellmask,
            cand=cand, valid=valid, below=below, n_below=n_below, pi=pi,
            need_idx=need_idx, p_e=p_e, pi_e=pi_e, cnt_e=cntpad[p_e, c_e],
            totals=cntpad.sum(axis=(1, 2)),
        )

    # ------------------------------------------------------------------ EM
    def fit(self, problem, L, C, n1, n0, nidk) -> "COWFit":
        T = int(self.n_steps)
        if T < 1:
            raise ValueError("n_steps must be >= 1")
        d = self._prepare(problem, L, C, n1, n0, nidk)
        P, M = d["P"], d["M"]
        cnt, pi, valid = d["cntpad"], d["pi"], d["valid"]
        ar = np.arange(P)
        valid_flat = valid.reshape(P, M * M)
        first_valid = np.argmax(valid_flat, axis=1)

        qN = np.full(cnt.shape, 0.5)
        prior_N = np.full(P, 0.5)
        prior_O = np.full(P, 0.5)
        for _ in range(T):
            # (a) M-step: noise distribution P(x|N), shared by the task
            wN = cnt * qN
            den = wN.sum()
            noise = wN.sum(axis=(0, 1)) / den if den > 0 else np.full(3, 1.0 / 3.0)

            # (b) P_nonpar,i(x|O; lambda) by cumulative sums over cells sorted by C
            wO = cnt * (1.0 - qN)
            cum = np.concatenate([np.zeros((P, 1, 3)), np.cumsum(wO, axis=1)], axis=1)
            num = np.take_along_axis(cum, d["n_below"][:, :, None], axis=1)  # (P, M, 3)
            nden = num.sum(axis=2, keepdims=True)
            nonpar = np.where(nden > 0, num / np.where(nden > 0, nden, 1.0), 0.0)

            # per-cell sums over x of n_x log[P_ij(x|O; lambda, k) P_i(O) + P(x|N) P_i(N)]
            a_noise = noise[None, :] * prior_N[:, None]  # (P, 3)
            with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf; 0 * log 0 is masked
                # C < lambda: P_nonpar, shared by the cells below lambda
                log_below = np.log(nonpar * prior_O[:, None, None] + a_noise[:, None, :])  # (P, M, 3)
                terms = np.repeat(
                    _cell_term(cnt[:, None, :, :], log_below[:, :, None, :])[:, :, None, :], M, axis=2
                )  # (P, M, M, Mc)
                # C >= lambda: Eq. 3, only where pi was precomputed
                pe, pi_e = d["p_e"], d["pi_e"]
                log_par = np.stack(
                    [
                        np.log(pi_e * prior_O[pe] + a_noise[pe, 0]),
                        np.log(a_noise[pe, 1]),  # P(0|O) = 0
                        np.log((1.0 - pi_e) * prior_O[pe] + a_noise[pe, 2]),
                    ],
                    axis=1,
                )
                terms.reshape(-1)[d["need_idx"]] = _cell_term(d["cnt_e"], log_par)
            # every candidate sums its cells in the same order, so exact ties stay exact
            ll = terms.sum(axis=3)  # (P, M, M)
            ll = np.where(valid, ll, -np.inf).reshape(P, M * M)
            best = np.argmax(ll, axis=1)
            best = np.where(np.isneginf(ll[ar, best]), first_valid, best)
            loglik = ll[ar, best]
            l_star, k_star = best // M, best % M

            # P_ij(x_ij|O; lambda*, k*) per cell and outcome (Eq. 4)
            lam_star = d["cand"][ar, l_star]
            below_star = d["cellmask"] & (d["Cpad"] < lam_star[:, None])
            pi_star = pi[ar, l_star, k_star]  # (P, Mc)
            par = np.stack([pi_star, np.zeros_like(pi_star), 1.0 - pi_star], axis=2)
            p_oracle = np.where(below_star[:, :, None], nonpar[ar, l_star][:, None, :], par)

            # (c) M-step: priors P_i(z) = mean responsibility over the problem's observations
            prior_N = (cnt * qN).sum(axis=(1, 2)) / d["totals"]
            prior_O = (cnt * (1.0 - qN)).sum(axis=(1, 2)) / d["totals"]

            # (d) E-step
            a = noise[None, None, :] * prior_N[:, None, None]
            b = p_oracle * prior_O[:, None, None]
            den = a + b
            qN = np.where(den > 0, a / np.where(den > 0, den, 1.0), prior_N[:, None, None])

        self.problems_ = d["problems"]
        self.lam_ = d["cand"][ar, l_star].astype(np.int64)
        self.k_ = d["cand"][ar, k_star].astype(np.int64)
        self.loglik_ = loglik.astype(np.float64)
        self.prior_oracle_ = prior_O
        self.lam_q_ = d["maxC"].astype(np.int64)
        self.noise_ = np.asarray(noise, dtype=np.float64)
        return self


def fit_cow_task(obs: pl.DataFrame, n_steps: int = 10, threshold: float = 0.5) -> tuple[pl.DataFrame, dict]:
    """Fit the COW model (Algorithm 1) to the observation table of one task.

    ``obs`` has columns task, problem_id, L, C, start, score, metric; the outcome is IDK if
    score is null, 1 if score >= ``threshold`` (Section 4 binarizes at 0.5), else 0. Counts per
    (problem_id, L, C) come from one polars group_by; :class:`COWFit` runs ``n_steps`` EM
    steps. Categories (Figure 1) use lambda_p = k_p from :func:`category_thresholds` over the
    task's distinct C with 0 < C < L, and lambda_q = each problem's largest partial C.

    Returns (problems, info): problems has columns task, problem_id, scenario ("COW"), lam, k,
    category, loglik, prior_oracle, sorted by problem_id; info is {"p_noise_1", "p_noise_0",
    "p_noise_idk", "lam_p", "k_p"}.
    """
    check_task_table(obs)
    if not np.isfinite(threshold):
        raise ValueError("threshold must be finite")
    score = pl.col("score").cast(pl.Float64)
    cells = (
        obs.group_by("problem_id", "L", "C")
        .agg(n1=(score >= threshold).sum(), n0=(score < threshold).sum(), nidk=score.is_null().sum())
        .sort("problem_id", "C")
    )
    L = cells["L"].to_numpy()
    C = cells["C"].to_numpy()
    lam_p, k_p = task_thresholds(L, C)

    model = COWFit(n_steps=n_steps).fit(
        cells["problem_id"].cast(pl.String).to_numpy(), L, C,
        cells["n1"].to_numpy(), cells["n0"].to_numpy(), cells["nidk"].to_numpy(),
    )
    return fit_frames(model, obs["task"][0], "COW", lam_p, k_p)
