"""The Bayes-optimal reference for the calibration figures of the short-document generators.

    .venv/bin/python tests/benchmarks/calibration_bound.py [--groups 4] [--generators NAME ...]
        [--rho-prior R|learned|bound] [--pairs generator|learned]

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
prior the COW posterior puts on P_i(O) (``raylc.dolce.placement``). What an estimator that does
not know the generator can expect: ``--pairs learned`` (closed-book, every lambda 1 .. L and every
k a task-level categorical) and ``--rho-prior learned`` (P_i(N) a distribution on (0, 1)), fitted
to each task by EM (empirical Bayes; the task's noise and the oracle's answers without its
evidence stay known, as the fit estimates them from the whole task); ``--rho-prior bound``
(P_i(N) ~ U(0, r), the bound r fitted to each task by marginal likelihood: a family that holds
the uniform prior, r = 1).
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
    ap.add_argument("--rho-prior", default=None,
                    help="P_i(N) ~ U(0, R) in the posterior instead of the generator's U(0, 0.2); 'learned': "
                         "a distribution on (0, 1) fitted to the task; 'bound': U(0, r), r fitted to the task")
    ap.add_argument("--pairs", choices=("generator", "learned"), default="generator",
                    help="the prior over closed-book, lambda and k: the generator's, or learned from the task")
    args = ap.parse_args()
    rho = args.rho_prior
    if rho not in (None, "learned", "bound"):
        try:
            rho = float(rho)
        except ValueError:
            ap.error(f"--rho-prior: {rho!r} is not a number, 'learned' or 'bound'")
    if args.groups < 1 or (isinstance(rho, float) and not 0.0 < rho <= 1.0):
        ap.error("--groups must be >= 1 and --rho-prior in (0, 1]")
    prior = ("P_i(N) ~ U(0, 0.2)" if rho is None else "P_i(N) learned" if rho == "learned"
             else "P_i(N) ~ U(0, r), r learned" if rho == "bound" else f"P_i(N) ~ U(0, {rho:g})")
    prior += "; closed-book, lambda, k " + ("learned" if args.pairs == "learned" else "as drawn")
    for gen in args.generators:
        over_groups(f"Bayes-optimal ({prior}) {gen}",
                    partial(bayes_frame, gen, n_problems=150, rho_prior=rho, pairs=args.pairs),
                    args.groups, 150)

if __name__ == "__main__":
    main()
