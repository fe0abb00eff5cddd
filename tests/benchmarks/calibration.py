"""Calibration of the DOLCE per-problem uncertainty (issue 17 items 1, 4 and 5).

    .venv/bin/python tests/benchmarks/calibration.py [--groups 4] [--cost-only] [--paper-start-only]

1. Tasks drawn from the COW model (150 problems per seed, every span, noise prior rho_max 0.1
   and 0.2) and from the PIG model (40 problems, ``--pig-likelihood binned``), in groups of 5
   seeds: the reliability table (confidence bins against accuracy), the expected calibration
   error, the share of problems at confidence >= 0.9 and their accuracy, and the coverage of
   the 90% lambda interval; for COW also the candidate measured beside it, the posterior read
   after the paper's T = 10 steps (``uncertainty_steps=10``). ``--paper-start-only``: the
   posterior of the EM run from the paper's start alone (``COWFit._posterior_starts = (0.5,)``,
   all ``uncertainty_steps`` from it), the posterior before the second start.
2. The cost of the posterior (default) against ``uncertainty="none"`` on the 1,000 x 1,000
   benchmark frame of ``bench_cow_fit.py``: ``COWFit`` on the frame as built, and ``DolceFit``
   on it with one row per span (it refuses repeated spans); medians of 3 runs, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from dolce_reference import calibration_frame, reliability  # noqa: E402

from raylc.dolce.fit import DolceFit  # noqa: E402
from raylc.dolce.options import FitOptions  # noqa: E402


def summarize(label: str, frame: pl.DataFrame, show_table: bool) -> None:
    table, ece = reliability(frame)
    sure = frame.filter(pl.col("confidence") >= 0.9)
    print(f"{label}: ECE {ece:.3f}; confidence >= 0.9: {sure.height / frame.height:.3f} of problems, "
          f"{sure['right'].mean():.3f} right; 90% lambda interval covers {frame['covered'].mean():.3f}; "
          f"accuracy {frame['right'].mean():.3f} (n = {frame.height})", flush=True)
    if show_table:
        with pl.Config(tbl_rows=12, float_precision=3):
            print(table)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=4, help="groups of 5 seeds (seeds 0 .. 5 * groups - 1)")
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--paper-start-only", action="store_true",
                    help="COW posterior from the EM of the paper's start alone (no second start)")
    args = ap.parse_args()
    if args.paper_start_only:
        from raylc.dolce.cow import COWFit

        COWFit._posterior_starts = (0.5,)
    if not args.cost_only:
        for rho in (0.1, 0.2):
            for g in range(args.groups):
                seeds = range(5 * g, 5 * g + 5)
                summarize(f"COW rho_max {rho} seeds {seeds.start}-{seeds.stop - 1}",
                          calibration_frame("COW", seeds, 150, rho_max=rho), show_table=g == 0)
            summarize(f"COW rho_max {rho} seeds 0-4, posterior after T = 10 steps",
                      calibration_frame("COW", range(5), 150, rho_max=rho, uncertainty_steps=10), show_table=True)
        for g in range(args.groups):
            seeds = range(5 * g, 5 * g + 5)
            summarize(f"PIG binned rho_max 0.2 seeds {seeds.start}-{seeds.stop - 1}",
                      calibration_frame("PIG", seeds, 40, likelihood="binned"), show_table=g == 0)
    cost()


if __name__ == "__main__":
    main()
