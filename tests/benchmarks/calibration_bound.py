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
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))

from calibration import over_groups  # noqa: E402
from dolce_reference import COW_GENERATORS, bayes_enumerable, bayes_frame  # noqa: E402

SHORT = [name for name in COW_GENERATORS if bayes_enumerable(name)]


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
        over_groups(f"Bayes-optimal ({prior}) {gen}",
                    partial(bayes_frame, gen, n_problems=150, rho_prior=args.rho_prior), args.groups, 150)

if __name__ == "__main__":
    main()
