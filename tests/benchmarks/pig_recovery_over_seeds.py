"""PIG parameter recovery over seeds (issue 17 item 4): docs/figures.md's PIG recovery row as a
distribution over seeds (mean, min, max), never one pooled draw.

    python tests/benchmarks/pig_recovery_over_seeds.py [--seeds 1-6] [--steps 5,50] [--designs model,realistic]

For each design (``model``: data drawn from the PIG model itself, m from rho~ afresh for every
span and uniform noise, Eq. 6; ``realistic``: members placed once per problem, task-level Beta
noise), each fit (``faithful``: Algorithm 2 as published, ``pig_likelihood: paper``; ``binned``, the
default; ``score``; ``mean``: Algorithm 2 with ``hit_rate=mean``) and each step count T, it fits 40 problems
per seed and prints the share of problems whose category is the planted one and the Spearman
correlation of lambda with the planted lambda, per seed and as mean (min-max) over the seeds.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))

from pig_reference import simulate_pig_task  # noqa: E402

#: ``fit_pig_task``'s options per fit; each names its likelihood, so that a change of the default
#: (``binned`` since 2026-11-28) does not change what a row measures.
FITS = {"faithful": {"likelihood": "paper"}, "binned": {"likelihood": "binned"}, "score": {"likelihood": "score"},
        "mean": {"likelihood": "paper", "hit_rate": "mean"}}


def _recovery_fn():
    """``_recovery`` of tests/dolce/test_pig.py: the measure the tests assert, in one place."""
    spec = importlib.util.spec_from_file_location("test_pig", HERE.parent / "dolce" / "test_pig.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module._recovery


def _range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--steps", default="5,50")
    ap.add_argument("--designs", default="model,realistic")
    ap.add_argument("--fits", default=",".join(FITS))
    args = ap.parse_args()
    recovery = _recovery_fn()
    seeds = _range(args.seeds)
    for design in args.designs.split(","):
        kw = {"redraw_each_observation": True, "noise_kind": "uniform"} if design == "model" else {}
        data = [simulate_pig_task(40, seed=seed, **kw) for seed in seeds]
        for steps in (int(s) for s in args.steps.split(",")):
            for name in args.fits.split(","):
                t0 = time.perf_counter()
                rows = np.array([recovery(obs, planted, n_steps=steps, **FITS[name]) for obs, planted in data])
                per_seed = ", ".join(f"{c:.3f} / {r:.3f}" for c, r in rows)
                print(f"{design} T={steps} {name}: category {rows[:, 0].mean():.3f} ({rows[:, 0].min():.3f}-"
                      f"{rows[:, 0].max():.3f}), Spearman {rows[:, 1].mean():.3f} ({rows[:, 1].min():.3f}-"
                      f"{rows[:, 1].max():.3f}) over seeds {seeds[0]}-{seeds[-1]}; per seed {per_seed} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
