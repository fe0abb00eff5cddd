"""Benchmark: COW fit of one task with 1,000 problems x 1,000 observations.

Times (a) the raw polars group_by over (problem_id, L, C) that builds the counts (eager, as
users write it, and the same query through Polars' lazy optimizer, which ``fit_cow_task``
uses) and (b) ``fit_cow_task`` end to end, each pair run alternately after one warm-up run
each (medians of ``--repeat`` runs), and (c) the literal per-observation Algorithm 1 of
``tests/dolce_reference.py`` on a subsample, scaled linearly to the full task.

    .venv/bin/python tests/benchmarks/bench_cow_fit.py [--problems 1000] [--obs 1000] [--ref-problems 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dolce_reference import PLANTED_KS, PLANTED_LAMS, plant_copies, reference_cow_em  # noqa: E402

from raylc.dolce import fit_cow_task  # noqa: E402

LADDER = np.array([0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])


def build_task(n_problems: int, n_obs: int, seed: int = 0) -> pl.DataFrame:
    """One COW task: per problem L in [200, 2000], planted (lambda, k), ``n_obs`` spans with C
    uniform over the ladder below L plus C = L and a uniform start; outcome from the model
    (noise w.p. rho <= 0.2, else 1 iff the span covers a planted copy / IDK, 0 sometimes below lambda)."""
    rng = np.random.default_rng(seed)
    L = rng.integers(200, 2001, n_problems)
    kmax = max(PLANTED_KS)
    lam = np.empty(n_problems, dtype=np.int64)
    copies = np.full((n_problems, kmax), -(10**9), dtype=np.int64)  # padding never covered
    for i in range(n_problems):
        choice = PLANTED_LAMS[rng.integers(len(PLANTED_LAMS))]
        lam[i] = L[i] if choice == "L" else choice
        k = int(rng.choice([k for k in PLANTED_KS if k * lam[i] <= L[i]]))
        copies[i, :k] = plant_copies(rng, int(L[i]), int(lam[i]), k)
    rho = rng.uniform(0, 0.2, n_problems)
    noise = np.array([0.3, 0.5, 0.2])

    pid = np.repeat(np.arange(n_problems), n_obs)
    Lo, lamo = L[pid], lam[pid]
    n_partial = (LADDER[None, :] < L[:, None]).sum(axis=1)  # ladder is sorted
    pick = (rng.random(pid.size) * (n_partial[pid] + 1)).astype(np.int64)
    C = np.where(pick < n_partial[pid], LADDER[np.minimum(pick, LADDER.size - 1)], Lo)
    start = np.where(C == 0, 0, (rng.random(pid.size) * (Lo - C + 1)).astype(np.int64))
    a = copies[pid]
    covered = ((start[:, None] <= a) & (a + lamo[:, None] <= (start + C)[:, None])).any(axis=1)
    x = np.where(C >= lamo, np.where(covered, 1, 2), np.where(rng.random(pid.size) < 0.1, 0, 2))
    x = np.where(rng.random(pid.size) < rho[pid], rng.choice(np.array([1, 0, 2]), size=pid.size, p=noise), x)
    n = pid.size
    return pl.DataFrame(
        {
            "task": pl.Series(["bench"]).extend_constant("bench", n - 1),
            "problem_id": pl.Series(np.char.add("p", np.char.zfill(pid.astype(str), 5))),
            "L": Lo.astype(np.int64),
            "C": C.astype(np.int64),
            "start": start.astype(np.int64),
            "score": pl.Series(np.where(x == 2, np.nan, (x == 1).astype(float))).fill_nan(None),
            "metric": pl.Series(["accuracy"]).extend_constant("accuracy", n - 1),
        }
    )


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def timed_pair(fn_a, fn_b, repeat: int) -> tuple[float, object, float, object]:
    """Median times of two functions run alternately (a, b, a, b, ...), so that a change in
    machine load affects both alike."""
    times_a, times_b, out_a, out_b = [], [], None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out_a = fn_a()
        t1 = time.perf_counter()
        out_b = fn_b()
        times_b.append(time.perf_counter() - t1)
        times_a.append(t1 - t0)
    return statistics.median(times_a), out_a, statistics.median(times_b), out_b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=1000)
    ap.add_argument("--obs", type=int, default=1000)
    ap.add_argument("--ref-problems", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    obs = build_task(args.problems, args.obs)
    print(f"task: {args.problems} problems x {args.obs} observations = {obs.height:,} rows")

    score = pl.col("score")
    def group_by():
        return obs.group_by("problem_id", "L", "C").agg(
            n1=(score >= 0.5).sum(), n0=(score < 0.5).sum(), nidk=score.is_null().sum()
        )

    def lazy_group_by():  # the same query through Polars' optimizer (what fit_cow_task runs)
        return obs.lazy().group_by("problem_id", "L", "C").agg(
            n1=(score >= 0.5).sum(), n0=(score < 0.5).sum(), nidk=score.is_null().sum()
        ).collect()

    group_by(), lazy_group_by(), fit_cow_task(obs)  # warm-up
    t_group, cells, t_fit, (problems, _) = timed_pair(group_by, lambda: fit_cow_task(obs), args.repeat)
    t_lazy, _, t_fit2, _ = timed_pair(lazy_group_by, lambda: fit_cow_task(obs), args.repeat)
    print(f"(a) polars group_by (problem_id, L, C): {t_group * 1e3:9.1f} ms  ({cells.height:,} cells)")
    print(f"    the same, lazy (optimized) query:   {t_lazy * 1e3:9.1f} ms")
    print(f"(b) fit_cow_task (T = 10):               {t_fit * 1e3:9.1f} ms")
    print(f"    categories: {dict(problems['category'].value_counts().sort('category').iter_rows())}")

    sub_ids = problems["problem_id"].head(args.ref_problems)
    sub = obs.filter(pl.col("problem_id").is_in(sub_ids.implode()))
    observations = [
        (p, L, C, None if s is None else int(s >= 0.5))
        for p, L, C, s in sub.select("problem_id", "L", "C", "score").iter_rows()
    ]
    t_sub_fit, (sub_fit, _) = timed(lambda: fit_cow_task(sub), args.repeat)
    t0 = time.perf_counter()
    ref = reference_cow_em(observations, n_steps=10)
    t_ref = time.perf_counter() - t0
    scale = args.problems / args.ref_problems
    same = ref["lam"] == sub_fit["lam"].to_list() and ref["k"] == sub_fit["k"].to_list()
    print(
        f"(c) literal Algorithm 1 on {args.ref_problems} problems: {t_ref:8.2f} s "
        f"-> scaled x{scale:g}: {t_ref * scale:9.1f} s   (fit_cow_task on the same subsample: "
        f"{t_sub_fit * 1e3:.1f} ms; identical lambda, k: {same})"
    )
    print(f"ratio fit / group_by:             {t_fit / t_group:9.2f}")
    print(f"ratio fit / lazy group_by:        {t_fit2 / t_lazy:9.2f}")
    print(f"ratio reference (scaled) / fit:   {t_ref * scale / t_fit:9.0f}")
    print(f"ratio reference / fit (same subsample): {t_ref / t_sub_fit:9.0f}")


if __name__ == "__main__":
    main()
