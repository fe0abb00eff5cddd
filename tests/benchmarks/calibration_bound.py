"""The Bayes-optimal reference for the calibration figures of the short-document generators.

    .venv/bin/python tests/benchmarks/calibration_bound.py [--groups 4] [--generators NAME ...] [--rho-prior R]

For each fixed-copy generator of ``dolce_reference.COW_GENERATORS`` whose documents are short
enough to enumerate ("short", "short wrong 1", "short every", "short every wrong 1": 5-12
units), the Bayes-optimal category posterior (``dolce_reference.bayes_frame``): the posterior
that knows how the generator draws the problems (the closed-book rate, lambda, k and the copies'
placement, the task's noise, P_i(N) ~ U(0, 0.2), the answers below lambda), every placement
enumerated. The figures of ``calibration.py`` (ECE, the share at confidence >= 0.9 and its
accuracy, the accuracy over all problems) for the same seeds and 150 problems per seed, in groups
of 5 seeds, then mean, min and max over the groups. Its accuracy is the most any estimator of
these observations can expect; its share at confidence >= 0.9 and the accuracy there are the
reference a calibrated estimator that does not know the generator cannot expect to beat.
``--rho-prior 1`` gives the same posterior with P_i(N) ~ U(0, 1), that is P_i(O) uniform, the
prior the COW posterior puts on P_i(O) (``raylc.dolce.placement``).
Deterministic (seeded draws, no sampling in the posterior).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))

from dolce_reference import BAYES_MAX_L, COW_GENERATORS, bayes_frame, reliability  # noqa: E402

SHORT = [name for name, kw in COW_GENERATORS.items()
         if not kw.get("replant_each_observation") and kw.get("L_range", (50, 300))[1] <= BAYES_MAX_L]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=4, help="groups of 5 seeds (seeds 0 .. 5 * groups - 1)")
    ap.add_argument("--generators", nargs="+", choices=SHORT, default=SHORT, metavar="NAME",
                    help=f"generators (default: {', '.join(SHORT)})")
    ap.add_argument("--rho-prior", type=float, default=None,
                    help="P_i(N) ~ U(0, R) in the posterior instead of the generator's U(0, 0.2)")
    args = ap.parse_args()
    if args.groups < 1 or (args.rho_prior is not None and not 0.0 < args.rho_prior <= 1.0):
        ap.error("--groups must be >= 1 and --rho-prior in (0, 1]")
    prior = "the generator's prior" if args.rho_prior is None else f"P_i(N) ~ U(0, {args.rho_prior:g})"
    for gen in args.generators:
        figs = []
        for g in range(args.groups):
            seeds = range(5 * g, 5 * g + 5)
            frame = bayes_frame(gen, seeds, 150, rho_prior=args.rho_prior)
            _, ece = reliability(frame)
            sure = frame.filter(pl.col("confidence") >= 0.9)
            figs.append(dict(ece=ece, sure=sure.height / frame.height, right=sure["right"].mean(),
                             accuracy=frame["right"].mean()))
            print(f"Bayes-optimal ({prior}) {gen} seeds {seeds.start}-{seeds.stop - 1}: ECE {ece:.3f}; "
                  f"confidence >= 0.9: {figs[-1]['sure']:.3f} of problems, {figs[-1]['right']:.3f} right; "
                  f"accuracy {figs[-1]['accuracy']:.3f} (n = {frame.height})", flush=True)
        print(f"Bayes-optimal ({prior}) {gen}, {args.groups} groups of 5 seeds x 150 problems: " + "; ".join(
            f"{k} mean {statistics.fmean(r[k] for r in figs):.3f} min {min(r[k] for r in figs):.3f} "
            f"max {max(r[k] for r in figs):.3f}" for k in figs[0]), flush=True)


if __name__ == "__main__":
    main()
