"""Calibration of the DOLCE per-problem uncertainty, and its cost.

    .venv/bin/python tests/benchmarks/calibration.py [--groups 4] [--pig-groups 2] [--generators NAME ...] [--cost-only]
        [--no-cost] [--first-seed 0] [--paper-start-only] [--pig-hit-rate]

1. Per generator (``dolce_reference.COW_GENERATORS``): COW "model" (copies re-placed for every
   span, Eq. 3 exactly), "fixed" (copies fixed per problem), "mix" (fixed copies, 15%
   closed-book problems, noise mostly IDK, take-every strides, L 50-1,000), "wrong 0",
   "wrong 0.5", "wrong 1" (fixed copies, 15% closed-book problems, the probe's answer on a span
   missing the copies a wrong one at that rate instead of IDK), "short" and "short wrong 1"
   (documents of 5-12 units on the exponential ladder), "short every" and "short every wrong 1"
   (the same with every span length sampled); ``--generators`` picks some; 150 problems per
   seed, noise prior rho_max 0.2; PIG "model" and "fixed" (the default ``pig_likelihood:
   binned``, 40 problems per seed; ``--pig-hit-rate`` adds one group of Algorithm 2's
   likelihood, ``paper``).
   In groups of 5 seeds: per group the expected calibration error, the share of problems at
   confidence >= 0.9 and their accuracy, the coverage of the 90% lambda interval, and the
   accuracy (recovery) of the reported categories over all problems; then mean, min and max
   over the groups, and the reliability table of the first group.
   ``--paper-start-only``: the posterior of the EM run from the paper's start alone
   (``COWFit._posterior_starts = (0.5,)``).
2. The cost of the posterior (default) against ``uncertainty="none"`` on the 1,000 x 1,000
   benchmark frame of ``bench_cow_fit.py``: ``COWFit`` on the frame as built, and ``DolceFit``
   on it with one row per span (it refuses repeated spans); then ``COWFit`` on one 150-problem
   task of the "fixed" generator (documents within the chain's budget); medians of 3 runs, and
   the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from dolce_reference import COW_GENERATORS, calibration_frame, reliability  # noqa: E402

from raylc.dolce.fit import DolceFit  # noqa: E402
from raylc.dolce.options import FitOptions  # noqa: E402


def summarize(label: str, frame: pl.DataFrame, show_table: bool) -> dict:
    """Print one group's figures (and its reliability table if ``show_table``); return them. The
    lambda interval's coverage where the frame has ``covered``."""
    table, ece = reliability(frame)
    sure = frame.filter(pl.col("confidence") >= 0.9)
    got = dict(ece=ece, sure=sure.height / frame.height, right=sure["right"].mean())
    if "covered" in frame.columns:
        got["covered"] = frame["covered"].mean()
    got["accuracy"] = frame["right"].mean()
    covered = f"90% lambda interval covers {got['covered']:.3f}; " if "covered" in got else ""
    print(f"{label}: ECE {ece:.3f}; confidence >= 0.9: {got['sure']:.3f} of problems, "
          f"{got['right']:.3f} right; {covered}accuracy {got['accuracy']:.3f} (n = {frame.height})", flush=True)
    if show_table:
        with pl.Config(tbl_rows=12, float_precision=3):
            print(table)
    return got


def over_groups(label: str, frame_of, groups: int, n_problems: int, first_seed: int = 0) -> None:
    """One generator in ``groups`` groups of 5 seeds from ``first_seed`` (``frame_of(seeds)``: one
    row per problem, as ``calibration_frame``): each group, then mean, min, max over them."""
    rows = []
    if groups < 1:
        return
    for g in range(groups):
        seeds = range(first_seed + 5 * g, first_seed + 5 * g + 5)
        rows.append(summarize(f"{label} seeds {seeds.start}-{seeds.stop - 1}",
                              frame_of(seeds), show_table=g == 0))
    figs = {k: [r[k] for r in rows] for k in rows[0]}
    print(f"{label}, {groups} groups of 5 seeds x {n_problems} problems: " + "; ".join(
        f"{k} mean {statistics.fmean(v):.3f} min {min(v):.3f} max {max(v):.3f}" for k, v in figs.items()), flush=True)


def _medians(fits: dict, repeat: int) -> dict:
    """Median wall time of each callable in ``fits``, run alternately after one warm-up each."""
    times = {name: [] for name in fits}
    for _ in range(repeat + 1):
        for name, fn in fits.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t[1:]) for name, t in times.items()}


def cost(repeat: int = 3) -> None:
    from bench_cow_fit import build_task

    from raylc.dolce.cow import COWFit

    steps = FitOptions().uncertainty_steps
    obs = build_task(1000, 1000)
    t = _medians({"none": lambda: COWFit().fit(obs).frames(),
                  "posterior": lambda: COWFit(uncertainty_steps=steps).fit(obs).frames()}, repeat)
    print(f"cost, COWFit on the benchmark frame (1,000 problems x 1,000 observations, {obs.height:,} rows): "
          f"uncertainty none {t['none']:.2f} s, posterior ({steps} steps) {t['posterior']:.2f} s, "
          f"ratio {t['posterior'] / t['none']:.1f}x (medians of {repeat})", flush=True)
    # DolceFit refuses repeated spans (the benchmark frame draws C = 0 and C = L spans again): one row per span
    spans = obs.unique(["task", "problem_id", "C", "start"], keep="first", maintain_order=True)
    t = _medians({mode: (lambda mode=mode: DolceFit(FitOptions(scenario="cow", uncertainty=mode)).fit(spans))
                  for mode in ("none", "posterior")}, repeat)
    print(f"cost, DolceFit (scenario cow) on that frame with one row per span ({spans.height:,} rows): "
          f"uncertainty none {t['none']:.2f} s, posterior {t['posterior']:.2f} s, "
          f"ratio {t['posterior'] / t['none']:.1f}x (medians of {repeat})", flush=True)
    # documents within the chain's budget: one task of the fixed-copy generator (seed 0)
    from dolce_reference import simulate_cow_task

    obs, _, _ = simulate_cow_task(150, 0, rho_max=0.2, **COW_GENERATORS["fixed"])
    t = _medians({"none": lambda: COWFit().fit(obs).frames(),
                  "posterior": lambda: COWFit(uncertainty_steps=steps).fit(obs).frames()}, repeat)
    print(f"cost, COWFit on one task of the fixed-copy generator (150 problems, seed 0, {obs.height:,} rows): "
          f"uncertainty none {t['none']:.2f} s, posterior {t['posterior']:.2f} s, "
          f"ratio {t['posterior'] / t['none']:.0f}x (medians of {repeat})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=4, help="COW: groups of 5 seeds (seeds 0 .. 5 * groups - 1)")
    ap.add_argument("--pig-groups", type=int, default=2, help="PIG: groups of 5 seeds")
    ap.add_argument("--generators", nargs="+", choices=list(COW_GENERATORS), default=list(COW_GENERATORS),
                    metavar="NAME", help="COW generators to run (default: all)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed of the first group (e.g. 100: seeds no figure in the docs was measured on)")
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--no-cost", action="store_true", help="skip the cost measurement")
    ap.add_argument("--pig-hit-rate", action="store_true", help="add one group of PIG with Algorithm 2's likelihood")
    ap.add_argument("--paper-start-only", action="store_true",
                    help="COW posterior from the EM of the paper's start alone (no second start)")
    args = ap.parse_args()
    if args.paper_start_only:
        from raylc.dolce.cow import COWFit

        COWFit._posterior_starts = (0.5,)
    if not args.cost_only:
        for gen in args.generators:
            over_groups(f"COW {gen}", partial(calibration_frame, "COW", n_problems=150, generator=gen),
                        args.groups, 150, args.first_seed)
        for gen in ("model", "fixed"):
            over_groups(f"PIG {gen} (binned, the default)",
                        partial(calibration_frame, "PIG", n_problems=40, generator=gen), args.pig_groups, 40,
                        args.first_seed)
        if args.pig_hit_rate:
            over_groups("PIG fixed paper (Algorithm 2)",
                        partial(calibration_frame, "PIG", n_problems=40, generator="fixed", likelihood="paper"), 1, 40,
                        args.first_seed)
    if not args.no_cost:
        cost()


if __name__ == "__main__":
    main()
