"""Test-only references for DOLCE PIG: brute-force rho~, a literal Algorithm 2, a simulator.

Nothing here is used by the package; these are slow, obviously-correct transcriptions.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import polars as pl
from dolce_reference import TIE_RTOL

IDK = None
Y_VALUES = (1, 0, IDK)  # the order of PIGFit.noise_


# --------------------------------------------------------------------------- rho~ by enumeration
def _block_partitions(positions: tuple[int, ...], k: int):
    """All partitions of ``positions`` into unlabelled blocks of size k."""
    if not positions:
        yield ()
        return
    first, rest = positions[0], positions[1:]
    for mates in itertools.combinations(rest, k - 1):
        remaining = tuple(p for p in rest if p not in mates)
        for tail in _block_partitions(remaining, k):
            yield ((first, *mates),) + tail


@lru_cache(maxsize=None)
def brute_cover_pmf_table(lam: int, k: int, L: int) -> dict:
    """{(C, m): Fraction} by enumerating every configuration and every observation window.

    A configuration is a set of k lam member units among the L units and a partition of them
    into lam groups of k (groups are exchangeable, so each unlabelled configuration stands for
    the same number lam! of labelled ones: all are equally likely). For every span length C
    and every start (uniform over the L - C + 1 starts), m = number of groups with at least one
    member inside the span. Returns exact probabilities for all C in 0..L, m in 0..lam.
    """
    if k < 1 or k * lam > L:
        return {(C, m): Fraction(0) for C in range(L + 1) for m in range(lam + 1)}
    counts: dict = {}
    n_conf = 0
    for units in itertools.combinations(range(L), k * lam):
        for blocks in _block_partitions(units, k):
            n_conf += 1
            group_of = [-1] * L
            for g, block in enumerate(blocks):
                for p in block:
                    group_of[p] = g
            for C in range(L + 1):
                for start in range(L - C + 1):
                    m = len({g for g in group_of[start : start + C] if g >= 0})
                    counts[(C, m)] = counts.get((C, m), 0) + Fraction(1, L - C + 1)
    return {(C, m): counts.get((C, m), Fraction(0)) / n_conf for C in range(L + 1) for m in range(lam + 1)}


def _comb(n: int, r: int) -> int:
    return math.comb(n, r) if 0 <= r <= n else 0


@lru_cache(maxsize=None)
def exact_cover_pmf(m: int, lam: int, k: int, L: int, C: int) -> Fraction:
    """The corrected closed form of Appendix B.1 in exact integer arithmetic.

    rho~ = binom(lam, m) / binom(L, C) sum_{i=0}^{m} (-1)^i binom(m, i) binom(L - k(lam - m) - ik, C)
    """
    if k < 1 or k * lam > L or not 0 <= C <= L or not 0 <= m <= lam:
        return Fraction(0)
    if lam == 0:
        return Fraction(1)
    total = sum((-1) ** i * math.comb(m, i) * _comb(L - k * (lam - m) - i * k, C) for i in range(m + 1))
    return Fraction(math.comb(lam, m) * total, math.comb(L, C))


@lru_cache(maxsize=None)
def exact_cover_pmf_vector(lam: int, k: int, L: int, C: int) -> np.ndarray:
    """rho~(m) for m = 0..lam, the closed form of :func:`exact_cover_pmf` (for the simulator),
    float64. With b_j = binom(L - kj, C), its sum over i is the m-th finite difference
    (-1)^m Delta^m b at j = lam - m, taken here from one difference table of exact integers."""
    if k < 1 or k * lam > L or not 0 <= C <= L:
        return np.zeros(lam + 1)
    row = [_comb(L - k * j, C) for j in range(lam + 1)]  # Delta^0 b_j, j = 0..lam
    sums = [row[lam]]
    for m in range(1, lam + 1):
        row = [row[j + 1] - row[j] for j in range(len(row) - 1)]  # Delta^m b_j, j = 0..lam - m
        sums.append((-1) ** m * row[lam - m])
    total = math.comb(L, C)
    return np.array([float(Fraction(math.comb(lam, m) * sums[m], total)) for m in range(lam + 1)])


def paper_printed_cover_pmf(m: int, lam: int, k: int, L: int, C: int) -> Fraction:
    """Appendix B.1's final printed expression verbatim (no (-1)^i): NOT a pmf (for the test)."""
    d = Fraction(L - C, k) - (lam - m)
    top = math.floor(min(Fraction(m), d))
    total = sum(_comb(L - k * (lam - m) - i * k, C) * math.comb(m, i) for i in range(top + 1))
    return Fraction(math.comb(lam, m) * total, math.comb(L, C))


def exact_density(s: float, lam: int, k: int, L: int, C: int) -> float:
    """rho of Appendix B.2 from the exact rho~ (same conventions as raylc.dolce.pig.pig_density)."""
    if k < 1 or k * lam > L or not 0 <= C <= L or not 0.0 <= s <= 1.0:
        return 0.0
    if lam == 0:
        return 1.0
    t = s * lam
    a = min(math.floor(t), lam)
    frac = t - a
    pa = float(exact_cover_pmf(a, lam, k, L, C))
    pb = float(exact_cover_pmf(a + 1, lam, k, L, C)) if frac > 0 else 0.0
    return (lam + 1) * ((1.0 - frac) * pa + frac * pb)


def score_bin(s: float) -> int:
    """The 0.1-wide score bin of Section 3.1: min(floor(10 s + 1e-9), 9) ([.9, 1] closed)."""
    return min(math.floor(10.0 * s + 1e-9), 9)


def exact_bin_density(b: int, lam: int, k: int, L: int, C: int) -> float:
    """P(m / lam in bin b | O) / 0.1 from the exact rho~ (bin of m / lam in integer arithmetic);
    1 for lambda = 0 (valid k), 0 for invalid parameters."""
    if k < 1 or k * lam > L or not 0 <= C <= L:
        return 0.0
    if lam == 0:
        return 1.0
    return 10.0 * float(sum(exact_cover_pmf(m, lam, k, L, C) for m in range(lam + 1) if min(10 * m // lam, 9) == b))


def exact_mode(lam: int, k: int, L: int, C: int) -> int:
    """Smallest m maximising rho~ (ties within a relative 1e-9, as PIGFit)."""
    vals = [float(exact_cover_pmf(m, lam, k, L, C)) for m in range(lam + 1)]
    mx = max(vals)
    return next(m for m, v in enumerate(vals) if v >= mx * (1.0 - 1e-9))


# --------------------------------------------------------------------------- literal Algorithm 2
def reference_pig_em(observations, n_steps: int = 5, hit_rate: str = "mode", likelihood: str = "paper") -> dict:
    """Algorithm 2, transcribed per observation with loops over i, j, lambda, k, y, z.

    ``observations``: iterable of (problem, L, C, s) with s in [0, 1] or None (IDK). Typo
    resolutions and guards (same as PIGFit): P_i(z) = sum_j sum_y q_ij(z|y) y_ij(y) / |J_i|;
    q(z = IDK) lines do not exist in Algorithm 2; p(x|N) = 1; line 1114 sets the hit rate to
    the mode of rho~ (lambda* = 0: rho = 1 is flat, the M-step value is kept); line 1116 with
    a zero denominator puts the remaining mass on y = 0; 0/0 in line 1105 -> the unweighted
    y-shares of the cell; 0/0 in the noise M-step -> 1/3; zero E-step denominator -> prior.
    Candidates {C_ij} U {0, maxC_i + 1, L_i}; ties within 1e-10 (1 + |max|) -> first pair in
    (lambda, k) ascending order. ``hit_rate="mean"`` uses E[m]/lambda instead of the mode.
    The options of line 1108: ``likelihood="score"`` evaluates rho at the observation's own
    score s_ij (IDK read as 0), ``"binned"`` the bin density 10 P(m / lambda in bin(s_ij) | O).
    """
    observations = list(observations)
    problems = sorted({o[0] for o in observations})
    L, J = {}, {i: [] for i in problems}
    for i, L_i, C_ij, s_ij in observations:
        L[i] = L_i
        J[i].append((C_ij, s_ij))
    # initialize discrete y from continuous s (lines 1090-1093)
    y = {
        i: [({1: 0.0, 0: 0.0, IDK: 1.0} if s is None else {1: s, 0: 1.0 - s, IDK: 0.0}) for _C, s in J[i]]
        for i in problems
    }
    cands, max_partial = {}, {}
    for i in problems:
        partial = [C for C, _ in J[i] if C < L[i]]
        max_partial[i] = max(partial) if partial else 0
        cands[i] = sorted({C for C, _ in J[i]} | {0, max_partial[i] + 1, L[i]})

    def log(v):
        return math.log(v) if v > 0 else -math.inf

    q = {i: [{z: {yy: 0.5 for yy in Y_VALUES} for z in "NO"} for _ in J[i]] for i in problems}  # lines 1095-1097
    P_z = {i: {"N": 0.5, "O": 0.5} for i in problems}
    P_N: dict = {}
    out = {"lam": {}, "k": {}, "loglik": {}, "hit_rate": {}, "pairs": {}}
    for _t in range(n_steps):
        # M-step: P(y | z = N) (line 1100)
        den = sum(q[i][j]["N"][y2] * y[i][j][y2] for i in problems for j in range(len(J[i])) for y2 in Y_VALUES)
        for yy in Y_VALUES:
            num = sum(q[i][j]["N"][yy] * y[i][j][yy] for i in problems for j in range(len(J[i])))
            P_N[yy] = num / den if den > 0 else 1.0 / 3.0
        P_O = {}
        for i in problems:
            cs = sorted({C for C, _ in J[i]})
            P_O[i] = {}
            for c in cs:  # line 1105 (identical for every lambda)
                js = [j for j in range(len(J[i])) if J[i][j][0] == c]
                den = sum(q[i][j]["O"][y2] * y[i][j][y2] for j in js for y2 in Y_VALUES)
                P_O[i][c] = {}
                for yy in Y_VALUES:
                    if den > 0:
                        P_O[i][c][yy] = sum(q[i][j]["O"][yy] * y[i][j][yy] for j in js) / den
                    else:
                        P_O[i][c][yy] = sum(y[i][j][yy] for j in js) / len(js)
            scored = []
            for lam in cands[i]:
                for k in cands[i]:
                    if k < 1 or k * lam > L[i]:
                        continue
                    objective = 0.0
                    for C_ij, s_ij in J[i]:
                        s_obs = 0.0 if s_ij is None else s_ij
                        if likelihood == "score":
                            p_O = exact_density(s_obs, lam, k, L[i], C_ij)
                        elif likelihood == "binned":
                            p_O = exact_bin_density(score_bin(s_obs), lam, k, L[i], C_ij)
                        else:
                            p_O = exact_density(P_O[i][C_ij][1], lam, k, L[i], C_ij)  # line 1108, Eq. 6
                        p_N = 1.0  # line 1109
                        objective += log(p_O * P_z[i]["O"] + p_N * P_z[i]["N"])  # line 1112
                    scored.append((objective, lam, k))
            out["pairs"][i] = {(lam, k): v for v, lam, k in scored}
            best_val = max(v for v, _, _ in scored)
            tol = TIE_RTOL * (1.0 + abs(best_val)) if math.isfinite(best_val) else 0.0
            best = next(t for t in scored if t[0] >= best_val - tol)
            out["loglik"][i], out["lam"][i], out["k"][i] = best
            lam_s, k_s = out["lam"][i], out["k"][i]
            for c in cs:  # lines 1113-1118
                if lam_s == 0:
                    continue
                if hit_rate == "mode":
                    h = exact_mode(lam_s, k_s, L[i], c) / lam_s
                else:
                    h = float(sum(m * exact_cover_pmf(m, lam_s, k_s, L[i], c) for m in range(lam_s + 1))) / lam_s
                rest = P_O[i][c][0] + P_O[i][c][IDK]
                if rest > 0:
                    P_O[i][c] = {1: h, 0: (1.0 - h) * P_O[i][c][0] / rest, IDK: (1.0 - h) * P_O[i][c][IDK] / rest}
                else:
                    P_O[i][c] = {1: h, 0: 1.0 - h, IDK: 0.0}
            out["hit_rate"][i] = {c: P_O[i][c][1] for c in cs}
        # M-step: P_i(z) (line 1122)
        for i in problems:
            for z in "NO":
                P_z[i][z] = sum(q[i][j][z][y2] * y[i][j][y2] for j in range(len(J[i])) for y2 in Y_VALUES) / len(J[i])
        # E-step: q_ij(z | y) (lines 1124-1126)
        for i in problems:
            for j, (C_ij, _s) in enumerate(J[i]):
                for yy in Y_VALUES:
                    a = P_N[yy] * P_z[i]["N"]
                    b = P_O[i][C_ij][yy] * P_z[i]["O"]
                    q[i][j]["N"][yy] = a / (a + b) if a + b > 0 else P_z[i]["N"]
                    q[i][j]["O"][yy] = b / (a + b) if a + b > 0 else P_z[i]["O"]
    return {
        "problems": problems,
        "lam": [out["lam"][i] for i in problems],
        "k": [out["k"][i] for i in problems],
        "loglik": [out["loglik"][i] for i in problems],
        "prior_oracle": [P_z[i]["O"] for i in problems],
        "lam_q": [max_partial[i] for i in problems],
        "noise": [P_N[yy] for yy in Y_VALUES],
        "hit_rate": [out["hit_rate"][i] for i in problems],
        "pairs": [out["pairs"][i] for i in problems],  # the last step's objective of every valid (lambda, k)
    }


# --------------------------------------------------------------------------- simulator
LADDER = (0, 1, 2, 5, 10, 20, 50, 100, 200)
PLANTED_LAMS = (1, 2, 5, 10, 20, 50, "L")
PLANTED_KS = (1, 2, 5, 10)


def simulate_pig_task(
    n_problems: int,
    seed: int,
    *,
    rho_max: float = 0.2,
    L_range: tuple[int, int] = (50, 300),
    p_idk_uncovered: float = 0.5,
    noise_kind: str = "task",
    p_noise_idk: float = 0.3,
    ladder=LADDER,
    task: str = "sim",
    redraw_each_observation: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Observation table drawn from the PIG model with planted (lambda, k) per problem.

    lambda in {1, 2, 5, 10, 20, 50, L}, k in {1, 2, 5, 10} with k lambda <= L (lambda = L
    forces k = 1), L uniform in L_range; the k lambda members occupy uniformly random distinct
    units, randomly grouped. Every span of every length C in ``ladder`` below L plus C = L is
    observed (C = 0: one empty span). Score: with probability rho_i ~ U(0, rho_max) noise -
    IDK with p_noise_idk, else U(0, 1) (``noise_kind="uniform"``) or a task-level
    Beta(a, b) (``"task"``) - otherwise the oracle's exact covered fraction m / lambda, with
    IDK instead of 0 with probability p_idk_uncovered when m = 0.
    ``redraw_each_observation``: m drawn afresh for every span from rho~(m; lambda, k, L, C)
    (:func:`exact_cover_pmf`, members re-placed per span), which is the PIG model
    itself (Eq. 6), instead of from one placement per problem.
    Returns (obs, planted) with planted = problem_id, L, planted_lam, planted_k, rho.
    """
    rng = np.random.default_rng(seed)
    beta_a, beta_b = rng.uniform(0.5, 3.0, size=2)
    frames, planted = [], []
    for n in range(n_problems):
        L = int(rng.integers(L_range[0], L_range[1] + 1))
        lam = PLANTED_LAMS[rng.integers(len(PLANTED_LAMS))]
        lam = L if lam == "L" else int(lam)
        k = int(rng.choice([kk for kk in PLANTED_KS if kk * lam <= L]))
        rho = float(rng.uniform(0.0, rho_max))
        units = rng.permutation(L)[: k * lam]
        group_of = np.full(L, -1)
        group_of[units] = np.arange(k * lam) % lam
        member = np.zeros((L + 1, lam), dtype=np.int64)  # prefix counts per group
        member[1:][np.flatnonzero(group_of >= 0), group_of[group_of >= 0]] = 1
        prefix = np.cumsum(member, axis=0)
        pid = f"p{n:04d}"
        for C in [c for c in ladder if c < L] + [L]:
            starts = np.zeros(1, dtype=np.int64) if C == 0 else np.arange(0, L - C + 1)
            if redraw_each_observation:
                pmf = exact_cover_pmf_vector(lam, k, L, C)
                m = rng.choice(lam + 1, size=starts.size, p=pmf / pmf.sum())
            else:
                cnt = prefix[starts + C] - prefix[starts]
                m = (cnt > 0).sum(axis=1)
            score = m / lam
            idk = (m == 0) & (rng.random(starts.size) < p_idk_uncovered)
            noisy = rng.random(starts.size) < rho
            if noise_kind == "uniform":
                ns = rng.random(starts.size)
            else:
                ns = rng.beta(beta_a, beta_b, size=starts.size)
            n_idk = rng.random(starts.size) < p_noise_idk
            score = np.where(noisy, ns, score)
            idk = np.where(noisy, n_idk, idk)
            frames.append(
                pl.DataFrame(
                    {
                        "task": task,
                        "problem_id": pid,
                        "L": np.full(starts.size, L, dtype=np.int64),
                        "C": np.full(starts.size, C, dtype=np.int64),
                        "start": starts.astype(np.int64),
                        "score": pl.Series(np.where(idk, np.nan, score)).fill_nan(None),
                        "metric": "rouge",
                    }
                )
            )
        planted.append({"problem_id": pid, "L": L, "planted_lam": lam, "planted_k": k, "rho": rho})
    return pl.concat(frames), pl.DataFrame(planted)
