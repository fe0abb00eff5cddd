"""Test-only references for DOLCE COW: brute-force pi, a literal Algorithm 1, a simulator.

Nothing here is used by the package; these are slow, obviously-correct transcriptions.
"""

from __future__ import annotations

import inspect
import itertools
import math
import pickle
from fractions import Fraction
from functools import lru_cache

import numpy as np
import polars as pl

from raylc.scoring import OBSERVATION_SCHEMA as OBS_SCHEMA

IDK = None
X_VALUES = (1, 0, IDK)  # the order of COWFit.noise_
#: a likelihood within TIE_RTOL (1 + |max|) of the maximum is a tie (the package's documented
#: LL_TIE_RTOL; tests/dolce/test_cow.py checks that the two agree)
TIE_RTOL = 1e-10


# --------------------------------------------------------------------------- pi by enumeration
@lru_cache(maxsize=None)
def placements(L: int, lam: int, k: int) -> tuple[tuple[int, ...], ...]:
    """All start tuples of k non-overlapping length-lam spans in L units."""
    return tuple(
        p
        for p in itertools.combinations(range(L - lam + 1), k)
        if all(b - a >= lam for a, b in zip(p, p[1:]))
    )


def brute_cover_prob(lam: int, k: int, L: int, C: int) -> Fraction:
    """pi(lam, k; L, C) by enumerating every placement and every observation start."""
    if lam == 0:
        return Fraction(1)  # convention: empty evidence is always covered
    pls = placements(L, lam, k)
    if not pls:
        return Fraction(0)  # k * lam > L: no placement
    n_windows = L - C + 1
    covered = sum(
        1 for p in pls for s in range(n_windows) if any(s <= a and a + lam <= s + C for a in p)
    )
    return Fraction(covered, len(pls) * n_windows)


def _comb(n: int, r: int) -> int:
    return math.comb(n, r) if 0 <= r <= n else 0


@lru_cache(maxsize=None)
def closed_form_cover_prob(lam: int, k: int, L: int, C: int) -> Fraction:
    """pi(lam, k; L, C) by the final formula of Appendix A.1, written out here in exact integers
    (independent of ``raylc.dolce.cover``):

        pi = 1 - [2 binom(w + lam, k + 1) + (k - 1)/(k + 1) (2 k lam + 2 lam + w - 2 k - k u - 1) binom(w + u, k)]
                 / [binom(L - k lam + k, k) (L - C + 1)],   w = L - C - k lam + k,  u = min(C, 2 lam - 2),

    binom(n, r) = 0 unless 0 <= r <= n; pi = 1 for lam = 0, 0 when k < 1, k lam > L or C < lam,
    1 when C >= L. Equal to :func:`brute_cover_prob` for every L <= 12 (tests/dolce/test_cover.py)."""
    if lam == 0:
        return Fraction(1)
    if k < 1 or k * lam > L or C < lam:
        return Fraction(0)
    if C >= L:
        return Fraction(1)
    w, u = L - C - k * lam + k, min(C, 2 * lam - 2)
    bracket = (2 * _comb(w + lam, k + 1)
               + Fraction(k - 1, k + 1) * (2 * k * lam + 2 * lam + w - 2 * k - k * u - 1) * _comb(w + u, k))
    return 1 - bracket / (_comb(L - k * lam + k, k) * (L - C + 1))


# --------------------------------------------------------------------------- literal Algorithm 1
def reference_cow_em(observations, n_steps: int = 10, not_covered: str = "fitted") -> dict:
    """Algorithm 1, transcribed per observation with loops over i, j, lambda, k, x.

    ``not_covered``: "idk" is Eq. 3 as printed (the oracle says IDK on a span without its
    evidence); "fitted" replaces Eq. 3's P(0|O) = 0, P(IDK|O) = 1 - pi by (1 - pi) q(0),
    (1 - pi) q(IDK), with q a task-level distribution started at the shares of 0 and IDK among
    the observations with 0 < C < L and x != 1 ((1/2, 1/2) without any), and re-estimated
    at the top of every step after the first (with the noise M-step) from the previous E-step:
    q(x) proportional to sum over observations with C_ij >= lambda_i* (the previous step's
    pair) and x_ij = x of q_ij(O | x), for x in {0, IDK}; unchanged when that mass is 0.
    With q fitted the oracle never answers the closed-book observation (C = 0) right under
    lambda >= 1: P_nonpar leaves out the right answers at C = 0, and P(1|O) = 0 there.

    ``observations``: iterable of (problem, L, C, x) with x in {1, 0, None (IDK)}. Typo
    resolutions (same as COWFit): priors P_i(z) = sum_j q_ij(z|x_ij) / |J_i|; the duplicated
    q(z = IDK) lines are dropped and q(O) = 1 - q(N); 0/0 in P_nonpar -> 0, in the noise
    M-step -> 1/3, in the E-step -> q(N) = P_i(N). Candidate sets: {C_ij} U {0, maxC+1, L_i};
    ties within TIE_RTOL (1 + |max|) -> first pair in (lambda, k) order; pi by
    :func:`closed_form_cover_prob` (not the package's).
    """
    problems = sorted({o[0] for o in observations})
    L, J = {}, {i: [] for i in problems}
    for i, L_i, C_ij, x_ij in observations:
        L[i] = L_i
        J[i].append((C_ij, x_ij))
    Lam, K = {}, {}
    max_partial = {}
    for i in problems:
        partial = [C for C, _ in J[i] if C < L[i]]
        max_partial[i] = max(partial) if partial else 0
        Lam[i] = sorted({C for C, _ in J[i]} | {0, max_partial[i] + 1, L[i]})
        K[i] = Lam[i]

    pi_cache: dict = {}

    def nonpar_takes(C, x, lam):  # what P_nonpar is estimated from (with q fitted: no right answer at C = 0)
        return C < lam and not (not_covered == "fitted" and C == 0 and x == 1)

    def pi(lam, k, L_i, C):
        key = (lam, k, L_i, C)
        if key not in pi_cache:
            pi_cache[key] = float(closed_form_cover_prob(lam, k, L_i, C))
        return pi_cache[key]

    def log(v):
        return math.log(v) if v > 0 else -math.inf

    # q_ij(z | x) <- 0.5
    q = {i: [{z: {x: 0.5 for x in X_VALUES} for z in "NO"} for _ in J[i]] for i in problems}
    P_z = {i: {"N": 0.5, "O": 0.5} for i in problems}
    P_N: dict = {}
    out_lam, out_k, out_ll = {}, {}, {}
    q_nc = {0: 0.0, IDK: 1.0}
    if not_covered == "fitted":  # the start: shares of 0 and IDK on partial spans (1/2 each without)
        miss = {x: sum(1 for i in problems for C, x_ij in J[i] if 0 < C < L[i] and x_ij == x) for x in (0, IDK)}
        tot = miss[0] + miss[IDK]
        q_nc = {x: miss[x] / tot for x in (0, IDK)} if tot else {0: 0.5, IDK: 0.5}
    for _t in range(n_steps):
        if not_covered == "fitted" and _t > 0:  # M-step: the not-covered outcome q
            mass = {x: sum(q[i][j]["O"][x] * (J[i][j][1] == x and J[i][j][0] >= out_lam[i])
                           for i in problems for j in range(len(J[i]))) for x in (0, IDK)}
            if mass[0] + mass[IDK] > 0:
                q_nc = {x: mass[x] / (mass[0] + mass[IDK]) for x in (0, IDK)}
        # M-step: P(x | z = N)
        den = sum(
            q[i][j]["N"][x2] * (J[i][j][1] == x2) for i in problems for j in range(len(J[i])) for x2 in X_VALUES
        )
        for x in X_VALUES:
            num = sum(q[i][j]["N"][x] * (J[i][j][1] == x) for i in problems for j in range(len(J[i])))
            P_N[x] = num / den if den > 0 else 1.0 / 3.0
        P_O_star = {}
        for i in problems:
            scored = []
            for lam in Lam[i]:
                # M-step: P_nonpar,i(x | z = O; lambda)
                den = sum(
                    q[i][j]["O"][x2] * (J[i][j][1] == x2 and nonpar_takes(J[i][j][0], x2, lam))
                    for j in range(len(J[i]))
                    for x2 in X_VALUES
                )
                nonpar = {}
                for x in X_VALUES:
                    num = sum(
                        q[i][j]["O"][x] * (J[i][j][1] == x and nonpar_takes(J[i][j][0], x, lam))
                        for j in range(len(J[i]))
                    )
                    nonpar[x] = num / den if den > 0 else 0.0
                for k in K[i]:
                    if k < 1 or k * lam > L[i]:
                        continue
                    P_ij = []
                    for C_ij, x_ij in J[i]:
                        p = pi(lam, k, L[i], C_ij)
                        par = {1: p ** (x_ij == 1), 0: ((1.0 - p) * q_nc[0]) ** (x_ij == 0),
                               IDK: ((1.0 - p) * q_nc[IDK]) ** (x_ij is IDK)}  # Eq. 3 with q
                        P_ij.append(
                            {
                                x: (0.0 if x == 1 and not nonpar_takes(C_ij, x, lam) else nonpar[x])
                                ** (x_ij == x and C_ij < lam) * par[x] ** (x_ij == x and C_ij >= lam)
                                for x in X_VALUES
                            }
                        )  # Eq. 4
                    objective = 0.0
                    for j, (_C, x_ij) in enumerate(J[i]):
                        objective += log(P_ij[j][x_ij] * P_z[i]["O"] + P_N[x_ij] * P_z[i]["N"])
                    scored.append((objective, lam, k, P_ij))
            # argmax: the first pair within TIE_RTOL (1 + |max|) of the maximum
            best_val = max(t[0] for t in scored)
            tol = TIE_RTOL * (1.0 + abs(best_val)) if math.isfinite(best_val) else 0.0
            best = next(t for t in scored if t[0] >= best_val - tol)
            out_ll[i], out_lam[i], out_k[i], P_O_star[i] = best
        # M-step: P_i(z)
        for i in problems:
            for z in "NO":
                P_z[i][z] = sum(
                    q[i][j][z][x2] * (J[i][j][1] == x2) for j in range(len(J[i])) for x2 in X_VALUES
                ) / len(J[i])
        # E-step: q_ij(z | x)
        for i in problems:
            for j in range(len(J[i])):
                for x in X_VALUES:
                    a = P_N[x] * P_z[i]["N"]
                    b = P_O_star[i][j][x] * P_z[i]["O"]
                    q_n = a / (a + b) if a + b > 0 else P_z[i]["N"]
                    q[i][j]["N"][x] = q_n
                    q[i][j]["O"][x] = 1.0 - q_n
    return {
        "problems": problems,
        "lam": [out_lam[i] for i in problems],
        "k": [out_k[i] for i in problems],
        "loglik": [out_ll[i] for i in problems],
        "prior_oracle": [P_z[i]["O"] for i in problems],
        "lam_q": [max_partial[i] for i in problems],
        "noise": [P_N[x] for x in X_VALUES],
        "not_covered": [q_nc[0], q_nc[IDK]],
    }


def counts_from_observations(observations):
    """(problem, L, C, n1, n0, nidk) arrays, one row per (problem, C), for COWFit.fit."""
    cells: dict = {}
    for i, L_i, C, x in observations:
        row = cells.setdefault((i, C), [L_i, 0, 0, 0])
        row[1 + X_VALUES.index(x)] += 1
    keys = sorted(cells)
    return (
        np.array([k[0] for k in keys]),
        np.array([cells[k][0] for k in keys]),
        np.array([k[1] for k in keys]),
        np.array([cells[k][1] for k in keys], dtype=float),
        np.array([cells[k][2] for k in keys], dtype=float),
        np.array([cells[k][3] for k in keys], dtype=float),
    )


# --------------------------------------------------------------------------- simulator
LADDER = (0, 1, 2, 5, 10, 20, 50, 100, 200)
PLANTED_LAMS = (1, 2, 5, 10, 20, 50, "L")
PLANTED_KS = (1, 2, 5, 10)


def plant_copies(rng: np.random.Generator, L: int, lam: int, k: int, size: int | None = None) -> np.ndarray:
    """Starts of k non-overlapping length-lam spans, uniform over the binom(L - k lam + k, k)
    placements (stars and bars: k sorted distinct slots b, starts b_i + i (lam - 1)).
    Shape (k,), or (size, k) for ``size`` independent placements."""
    n_slots = L - k * lam + k
    if size is None:
        b = np.sort(rng.choice(n_slots, size=k, replace=False))
    else:
        b = np.sort(np.argsort(rng.random((size, n_slots)), axis=1)[:, :k], axis=1)
    return b + np.arange(k) * (lam - 1)


def covers(starts: np.ndarray, C: int, copies: np.ndarray, lam: int) -> np.ndarray:
    """Does the span [s, s + C) contain one of the copies [a, a + lam)? ``C`` a length or one per
    span; ``copies`` is (k,) (shared by all spans), (len(starts), k) (one placement per span), or
    (P, 1, k) (P placements, each shared by all spans: the answer is (P, len(starts)))."""
    s, c = starts[:, None], np.reshape(C, (-1, 1))
    a = copies if copies.ndim == 3 else np.broadcast_to(copies, (starts.size, copies.shape[-1]))
    return ((s <= a) & (a + lam <= s + c)).any(axis=-1)


def simulate_cow_task(
    n_problems: int,
    seed: int,
    *,
    rho_max: float = 0.2,
    take_every: int = 1,
    L_range: tuple[int, int] = (50, 300),
    p_zero_below: float = 0.1,
    ladder=LADDER,
    noise=None,
    replant_each_observation: bool = False,
    task: str = "sim",
    stride_fraction: float = 0.0,
    p_closed_book: float = 0.0,
    p_wrong: float = 0.0,
) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray]:
    """Observation table drawn from the COW model with planted (lambda, k) per problem.

    lambda uniform in {1, 2, 5, 10, 20, 50, L}, then k uniform in {1, 2, 5, 10} with
    k lambda <= L; L uniform in ``L_range``. The k copies are placed explicitly at random
    non-overlapping positions, once per problem (or afresh for every span when
    ``replant_each_observation``, which makes P(1 | O) exactly pi as the model assumes).
    Observation lengths: ``ladder`` below L plus C = L, starts 0, e, 2e, ... <= L - C with
    e = max(``take_every``, floor(``stride_fraction`` C)) (take-every strides,
    :class:`raylc.text.sampling.Sampling`; C = 0 has one empty span). With probability
    ``p_closed_book`` a problem is closed-book: lambda = 0 (k = 1), the oracle answers 1 at
    every C, C = 0 included. Each outcome is noise with probability
    rho_i ~ U(0, rho_max) (task noise distribution over 1, 0, IDK; Dirichlet(2, 2, 2) unless
    given), else oracle: for C >= lambda, 1 if the span covers a copy, else IDK; for
    C < lambda, 0 with probability ``p_zero_below``, else IDK. ``p_wrong``: on a span at or
    above lambda that misses the copies the oracle answers wrongly (0) with this probability
    instead of IDK (a probe that does not always abstain as told).
    Returns (obs, planted, noise): obs has the columns of ``fit_cow_task`` (score 1.0 / 0.0 /
    null), planted has problem_id, L, planted_lam, planted_k, rho.
    """
    rng = np.random.default_rng(seed)
    noise = rng.dirichlet([2.0, 2.0, 2.0]) if noise is None else np.asarray(noise, dtype=float)
    cols: dict[str, list] = {"problem_id": [], "L": [], "C": [], "start": [], "x": []}
    planted = []
    for n in range(n_problems):
        L = int(rng.integers(L_range[0], L_range[1] + 1))
        lams = [lam for lam in PLANTED_LAMS if lam == "L" or lam < L]  # every lambda of the ladder a context holds
        lam = lams[rng.integers(len(lams))]
        lam = L if lam == "L" else lam
        k = int(rng.choice([k for k in PLANTED_KS if k * lam <= L]))
        rho = float(rng.uniform(0.0, rho_max))
        copies = plant_copies(rng, L, lam, k)
        if p_closed_book and rng.random() < p_closed_book:
            lam, k = 0, 1
        pid = f"p{n:04d}"
        for C in [c for c in ladder if c < L] + [L]:
            every = max(take_every, int(stride_fraction * C))
            starts = np.zeros(1, dtype=np.int64) if C == 0 else np.arange(0, L - C + 1, every)
            m = starts.size
            if lam == 0:
                x = np.ones(m, dtype=np.int64)
            elif C >= lam:
                spans_copies = plant_copies(rng, L, lam, k, size=m) if replant_each_observation else copies
                x = np.where(covers(starts, C, spans_copies, lam), 1, 2)
                if p_wrong:
                    x = np.where((x == 2) & (rng.random(m) < p_wrong), 0, x)
            else:
                x = np.where(rng.random(m) < p_zero_below, 0, 2)
            x = np.where(rng.random(m) < rho, rng.choice(np.array([1, 0, 2]), size=m, p=noise), x)
            cols["problem_id"].append(np.full(m, pid))
            cols["L"].append(np.full(m, L))
            cols["C"].append(np.full(m, C))
            cols["start"].append(starts)
            cols["x"].append(x)
        planted.append({"problem_id": pid, "L": L, "planted_lam": lam, "planted_k": k, "rho": rho})
    cat = {c: np.concatenate(v) for c, v in cols.items()}
    x = cat.pop("x")
    obs = pl.DataFrame(
        {
            "task": pl.Series([task]).extend_constant(task, x.size - 1),
            "problem_id": cat["problem_id"].astype(str),
            "L": cat["L"].astype(np.int64),
            "C": cat["C"].astype(np.int64),
            "start": cat["start"].astype(np.int64),
            "score": pl.Series(np.where(x == 2, np.nan, (x == 1).astype(float))).fill_nan(None),
            "metric": pl.Series(["accuracy"]).extend_constant("accuracy", x.size - 1),
        }
    )
    return obs, pl.DataFrame(planted), noise


# ------------------------------------------------------------------------------ synthetic observation tables

def synth_task(task: str, n_bimodal: int, n_unimodal: int, *, seed: int = 0, L: int = 60, metric: str = "f1",
               stride: int = 2):
    """A continuous-metric task: ``n_bimodal`` COW-like problems (score ~U(.85, 1) when a span of
    C >= lambda hits, else ~U(0, .12) or IDK) then ``n_unimodal`` PIG-like problems (score
    ~N(0.1 + 0.6 C / L, 0.08) clipped to [.01, .99]). Ladder 0, 1, 2, 5, 10, 20, L; starts every
    ``stride`` (1: a full enumeration)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_bimodal + n_unimodal):
        bimodal = i < n_bimodal
        pid = f"{task}-{'b' if bimodal else 'u'}{i:03d}"
        lam = int(rng.choice([1, 2, 5, 10, 20]))
        for C in (0, 1, 2, 5, 10, 20, L):
            for start in ([0] if C in (0, L) else range(0, L - C + 1, stride)):
                if bimodal:
                    hit = C >= lam and rng.random() < 0.6
                    s = rng.uniform(0.85, 1.0) if hit else rng.uniform(0.0, 0.12)
                    if not hit and rng.random() < 0.3:
                        s = None
                else:
                    s = float(np.clip(rng.normal(0.1 + 0.6 * C / L, 0.08), 0.01, 0.99))
                rows.append((task, pid, L, C, start, s, metric))
    return pl.DataFrame(rows, schema=OBS_SCHEMA, orient="row")


def scores_task(task: str, problem_scores: dict[str, list], *, L: int = 50, metric: str = "rouge_l"):
    """A task whose problem p has exactly the scores ``problem_scores[p]`` (C cycles 1, 2, 5, 10, 20)."""
    rows = []
    for pid, scores in problem_scores.items():
        for j, s in enumerate(scores):
            C = (1, 2, 5, 10, 20)[j % 5]
            rows.append((task, pid, L, C, j % (L - C + 1), s, metric))
    return pl.DataFrame(rows, schema=OBS_SCHEMA, orient="row")


def identity_mapper_pickled(fn, frames, *args):
    """Fake mapper: serializes every frame and argument as Ray would and runs the cells in
    reverse order, returning results in input order."""
    out = [fn(pickle.loads(pickle.dumps(f)), *pickle.loads(pickle.dumps(args))) for f in reversed(frames)]
    return out[::-1]


# ------------------------------------------------------------------------------ calibration (issue 17)

#: The COW calibration generators (issue 29): keyword arguments of :func:`simulate_cow_task`.
#: "model": copies re-placed for every span (Eq. 3 exactly); "fixed": copies fixed per problem,
#: as in a real document; "mix": fixed copies, 15% closed-book problems (lambda = 0), noise
#: mostly IDK, take-every strides (every 2, at least C / 2), L from 50 to 1,000; "wrong w": fixed
#: copies, 15% closed-book problems, and a probe that answers wrongly instead of saying IDK with
#: probability w where it lacks the evidence (below lambda, or a span missing the copies);
#: "short": documents of 5-12 units on the exponential ladder (C = 0, 1, 2, 5, L), "short
#: every": the same documents with every span length C = 0 .. L sampled.
COW_GENERATORS = {
    "model": dict(replant_each_observation=True),
    "fixed": dict(replant_each_observation=False),
    "mix": dict(replant_each_observation=False, p_closed_book=0.15, noise=(0.1, 0.15, 0.75), take_every=2,
                stride_fraction=0.5, L_range=(50, 1000)),
    **{f"wrong {w:g}": dict(replant_each_observation=False, p_closed_book=0.15, p_wrong=w) for w in (0.0, 0.5, 1.0)},
    **{f"short{' wrong 1' if w else ''}": dict(replant_each_observation=False, p_closed_book=0.15, p_wrong=w,
                                                L_range=(5, 12)) for w in (0.0, 1.0)},
    **{f"short every{' wrong 1' if w else ''}": dict(replant_each_observation=False, p_closed_book=0.15, p_wrong=w,
                                                      L_range=(5, 12), ladder=tuple(range(12)))
       for w in (0.0, 1.0)},
}


def calibration_frame(kind: str, seeds, n_problems: int, *, rho_max: float = 0.2, uncertainty_steps: int = 200,
                      generator: str = "model", **fit_kw) -> pl.DataFrame:
    """Tasks drawn per ``generator`` (COW: :data:`COW_GENERATORS`; PIG: "model", m drawn from
    rho~ for every span, Eq. 6, or "fixed", one placement of the members per problem; uniform
    noise), fitted with the posterior of :mod:`raylc.dolce.uncertainty`: one row per problem
    with seed, truth (the planted category), category (reported), confidence, right, covered
    (planted lambda in [lam_low, lam_high], open = up to L)."""
    from pig_reference import simulate_pig_task

    from raylc.dolce.categories import assign_categories
    from raylc.dolce.cow import COWFit
    from raylc.dolce.pig import PIGFit

    rows = []
    for seed in seeds:
        if kind == "COW":
            obs, planted, _ = simulate_cow_task(n_problems, seed, rho_max=rho_max, **COW_GENERATORS[generator])
            fit = COWFit(uncertainty_steps=uncertainty_steps, **fit_kw).fit(obs)
        else:
            obs, planted = simulate_pig_task(n_problems, seed, rho_max=rho_max,
                                             redraw_each_observation=generator == "model",
                                             noise_kind="uniform")
            fit = PIGFit(uncertainty_steps=uncertainty_steps, **fit_kw).fit(obs)
        problems, _ = fit.frames()
        df = problems.join(planted, on="problem_id")
        lam_q = pl.DataFrame({"problem_id": fit.problems_.astype(str), "lam_q": fit.lam_q_})
        df = df.join(lam_q, on="problem_id")
        truth = assign_categories(df["planted_lam"].to_numpy(), df["planted_k"].to_numpy(), fit.lam_p_, fit.k_p_,
                                  df["lam_q"].to_numpy())
        rows.append(df.select(
            seed=pl.lit(seed), truth=pl.Series(truth), category="category", confidence="confidence",
            right=pl.col("category") == pl.Series(truth),
            covered=(pl.col("lam_low") <= pl.col("planted_lam"))
            & (pl.col("lam_high").is_null() | (pl.col("planted_lam") <= pl.col("lam_high"))),
        ))
    return pl.concat(rows)


#: The longest document :func:`bayes_frame` enumerates the placements of (binom(L - k lambda + k, k)).
BAYES_MAX_L = 16


def _generator_setting(generator: str, name: str):
    """A keyword of :data:`COW_GENERATORS` [generator], or :func:`simulate_cow_task`'s default."""
    return COW_GENERATORS[generator].get(name, inspect.signature(simulate_cow_task).parameters[name].default)


def bayes_enumerable(generator: str) -> bool:
    """Whether :func:`bayes_frame` can enumerate the generator: copies fixed per problem and
    documents of at most :data:`BAYES_MAX_L` units."""
    return (not _generator_setting(generator, "replant_each_observation")
            and _generator_setting(generator, "L_range")[1] <= BAYES_MAX_L)


def bayes_frame(generator: str, seeds, n_problems: int, *, rho_max: float = 0.2,
                rho_prior: float | str | None = None, pairs: str = "generator", nodes: int = 24) -> pl.DataFrame:
    """The Bayes-optimal category posterior of a fixed-copy COW generator (:data:`COW_GENERATORS` with
    L <= :data:`BAYES_MAX_L`): the posterior that knows how :func:`simulate_cow_task` draws
    (closed-book with ``p_closed_book``; else lambda, k and the placement uniform as drawn; the
    task's noise; below lambda 0 with probability ``p_zero_below``, else IDK), by enumerating every
    placement, with rho ~ U(0, ``rho_prior``) (default ``rho_max``, the generator's) integrated out
    on Gauss-Legendre nodes. Its accuracy is the most any estimator of the same observations can
    expect, and its share at confidence >= 0.9 with the accuracy there the reference a calibrated
    estimator that does not know the generator cannot expect to beat; with ``rho_prior`` = 1 (P_i(O)
    uniform, as the fit assumes), what a vague prior on P_i(O) costs; with ``rho_prior="learned"``,
    the prior of rho a distribution on the nodes over (0, 1) fitted to the task (empirical Bayes,
    the nonparametric maximum likelihood, jointly with ``pairs``); with ``rho_prior="bound"``, rho ~
    U(0, r) on equal bins, the bound r fitted to the task (:func:`_bounded_posterior`). With
    ``pairs="learned"`` the posterior does not know the prior over closed-book, lambda and k: the
    hypotheses are closed-book and every lambda 1 .. L (lambda = L one value whatever L) with every
    k <= L / lambda, under a task-level categorical fitted to the task's problems by EM (empirical
    Bayes, pseudo-count 1/2; a problem's prior is it renormalised over the problem's own
    hypotheses): what an estimator that learns the task's (lambda, k) distribution can expect.
    One row per problem: seed, truth, category, confidence, right (as :func:`calibration_frame`)."""
    from scipy.special import logsumexp

    from raylc.dolce.categories import CATEGORIES, category_codes, category_thresholds

    if not bayes_enumerable(generator):
        raise ValueError(f"{generator}: the enumeration needs fixed copies and L <= {BAYES_MAX_L}")
    if pairs not in ("generator", "learned"):
        raise ValueError(f"pairs: {pairs!r} is not 'generator' or 'learned'")
    if isinstance(rho_prior, str) and rho_prior not in ("learned", "bound"):
        raise ValueError(f"rho_prior: {rho_prior!r} is not a number, 'learned' or 'bound'")
    learn_rho, bound = rho_prior == "learned", rho_prior == "bound"
    p_zero, p_closed, p_wrong = (_generator_setting(generator, n) for n in ("p_zero_below", "p_closed_book", "p_wrong"))
    if bound:  # equal bins over (0, 1), so that U(0, r) for every r of BOUND_GRID is a set of whole bins
        rho, log_w = (np.arange(BOUND_BINS) + 0.5) / BOUND_BINS, np.full(BOUND_BINS, -math.log(BOUND_BINS))
    else:
        t, w = np.polynomial.legendre.leggauss(nodes)
        rho = (t + 1.0) / 2.0 * (rho_max if rho_prior is None else 1.0 if learn_rho else rho_prior)
        log_w = np.log(w / 2.0)
    # the oracle's P(x) for x coded 0: right, 1: wrong, 2: IDK, by the span's state
    oracle = {"right": np.array([1.0, 0.0, 0.0]), "below": np.array([0.0, p_zero, 1.0 - p_zero]),
              "missed": np.array([0.0, p_wrong, 1.0 - p_wrong])}
    rows = []
    for seed in seeds:
        obs, planted, noise = simulate_cow_task(n_problems, seed, rho_max=rho_max, **COW_GENERATORS[generator])
        lam_p, k_p = category_thresholds(obs.filter((pl.col("C") > 0) & (pl.col("C") < pl.col("L")))["C"].unique())
        truth_of = dict(zip(planted["problem_id"], zip(planted["planted_lam"], planted["planted_k"])))
        code = pl.when(pl.col("score").is_null()).then(2).when(pl.col("score") == 1.0).then(0).otherwise(1)
        problems = []  # per problem: its id, hypotheses' keys, log-likelihoods (with the generator's prior
        # unless learned) and categories, its lam_q
        for (pid,), g in obs.with_columns(x=code).group_by("problem_id", maintain_order=True):
            L, C, s, x = int(g["L"][0]), g["C"].to_numpy(), g["start"].to_numpy(), g["x"].to_numpy()
            partial = C[(C > 0) & (C < L)]
            lam_q = int(partial.max()) if partial.size else 0
            # log P(x_j | state) per span and rho node: (1 - rho) P(x | O, state) + rho P(x | N)
            lp = {state: np.log((1.0 - rho) * o[x][:, None] + rho * noise[x][:, None]) for state, o in oracle.items()}
            keys, ll, cat = [], [], []
            if p_closed or pairs == "learned":
                keys.append("closed")
                ll.append(lp["right"].sum(axis=0) + (math.log(p_closed) if pairs == "generator" else 0.0))
                cat.append(0)
            lams = ([L if a == "L" else a for a in PLANTED_LAMS if a == "L" or a < L] if pairs == "generator"
                    else list(range(1, L + 1)))
            for lam in lams:
                ks = ([k for k in PLANTED_KS if k * lam <= L] if pairs == "generator"
                      else list(range(1, L // lam + 1)))
                above = C >= lam
                base = lp["below"][~above].sum(axis=0)
                for k in ks:
                    slots = np.array(list(itertools.combinations(range(L - k * lam + k), k)))
                    copies = slots + np.arange(k) * (lam - 1)  # (placements, k), as plant_copies
                    cov = covers(s[above], C[above], copies[:, None, :], lam)  # (placements, spans)
                    lk = cov @ lp["right"][above] + (~cov) @ lp["missed"][above]  # (placements, nodes)
                    keys.append(("L" if lam == L else lam, k))
                    prior = math.log(1.0 - p_closed) - math.log(len(lams) * len(ks)) if pairs == "generator" else 0.0
                    ll.append(logsumexp(lk + base, axis=0) - math.log(len(copies)) + prior)
                    cat.append(int(category_codes(lam, k, lam_p, k_p, lam_q)))
            problems.append((pid, keys, np.array(ll), np.array(cat), lam_q))
        posterior = _bounded_posterior if bound else _hypotheses_posterior
        for (pid, _, _, cat, lam_q), hyp in zip(problems, posterior(
                [p[1] for p in problems], [p[2] for p in problems], log_w, pairs == "learned", learn_rho)):
            proba = np.bincount(cat, weights=np.exp(hyp - logsumexp(hyp)), minlength=len(CATEGORIES))
            truth = int(category_codes(*truth_of[pid], lam_p, k_p, lam_q))
            rows.append({"seed": seed, "truth": CATEGORIES[truth], "category": CATEGORIES[int(proba.argmax())],
                         "confidence": float(proba.max()), "right": int(proba.argmax()) == truth})
    return pl.DataFrame(rows)


#: ``bayes_frame(rho_prior="bound")``: the bounds r of P_i(N) ~ U(0, r) tried, and the equal bins over (0, 1).
BOUND_GRID = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
BOUND_BINS = 60


def _bounded_posterior(keys: list, ll: list, log_w: np.ndarray, learn_pairs: bool, learn_rho: bool) -> list[np.ndarray]:
    """:func:`_hypotheses_posterior` with P_i(N) ~ U(0, r), the bound r of :data:`BOUND_GRID` of
    largest marginal likelihood over the task's problems (empirical Bayes, a family that holds the
    uniform prior at r = 1); ``ll`` on :data:`BOUND_BINS` equal bins (``log_w`` unused)."""
    from scipy.special import logsumexp

    mids = (np.arange(BOUND_BINS) + 0.5) / BOUND_BINS
    best = None
    for r in BOUND_GRID:
        inside = mids < r
        with np.errstate(divide="ignore"):
            post = _hypotheses_posterior(keys, ll, np.log(inside / inside.sum()), learn_pairs, False)
        evidence = sum(logsumexp(p) for p in post)
        if best is None or evidence > best[0]:
            best = (evidence, post)
    return best[1]


def _hypotheses_posterior(keys: list, ll: list, log_w: np.ndarray, learn_pairs: bool, learn_rho: bool,
                          rounds: int = 300) -> list[np.ndarray]:
    """:func:`bayes_frame`'s log posterior over each problem's hypotheses (``keys``; ``ll`` their
    (hypotheses, nodes) log-likelihoods with any fixed prior added). Learned by EM (empirical
    Bayes): the task-level categorical pi over the keys (``learn_pairs``, pseudo-count 1/2; a
    problem's prior is pi renormalised over its own keys) and the masses of rho's nodes
    (``learn_rho``, from the quadrature weights ``log_w``; else those weights)."""
    from scipy.special import logsumexp

    names = sorted({k for ks in keys for k in ks}, key=str)
    index = {k: i for i, k in enumerate(names)}
    idx = [np.array([index[k] for k in ks]) for ks in keys]
    pi, log_m = np.full(len(names), 1.0 / len(names)), log_w.copy()
    for _ in range(rounds if learn_pairs or learn_rho else 1):
        joint = [a + np.log(pi[i] / pi[i].sum())[:, None] + log_m for i, a in zip(idx, ll)]  # (hypotheses, nodes)
        post = [np.exp(j - logsumexp(j)) for j in joint]
        mass = np.full(len(names), 0.5)
        for i, q in zip(idx, post):
            np.add.at(mass, i, q.sum(axis=1))
        new_pi = mass / mass.sum() if learn_pairs else pi
        with np.errstate(divide="ignore"):  # a node the data leave empty
            new_m = np.log(sum(q.sum(axis=0) for q in post) / len(post)) if learn_rho else log_m
        if np.allclose(new_pi, pi, rtol=0.0, atol=1e-7) and np.allclose(np.exp(new_m), np.exp(log_m), atol=1e-7):
            break
        pi, log_m = new_pi, new_m
    return [logsumexp(j, axis=1) for j in joint]


def reliability(frame: pl.DataFrame, bins: int = 10) -> tuple[pl.DataFrame, float]:
    """Reliability table (confidence bins of width 1 / bins: n, mean confidence, accuracy)
    and the expected calibration error sum_b n_b |conf_b - acc_b| / n."""
    table = (frame.with_columns(bin=(pl.col("confidence") * bins).floor().clip(0, bins - 1).cast(pl.Int64))
             .group_by("bin").agg(n=pl.len(), confidence=pl.col("confidence").mean(), accuracy=pl.col("right").mean())
             .sort("bin").with_columns(lo=pl.col("bin") / bins, hi=(pl.col("bin") + 1) / bins))
    ece = float((table["n"] * (table["confidence"] - table["accuracy"]).abs()).sum() / frame.height)
    return table.select("lo", "hi", "n", "confidence", "accuracy"), ece
