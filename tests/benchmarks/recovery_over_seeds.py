"""Planted-category recovery of the quickstart over seeds (issue 17 item 4): the distribution a
README figure must quote, never one draw.

    python tests/benchmarks/recovery_over_seeds.py [--seeds 0-6] [--set key=value ...]

Runs ``jobs/quickstart.yaml`` once per seed (in one local Ray instance, each run in its own
temporary store), prints each run's recovery with its 95% Wilson interval over the problems
and per task, then the mean, min and max over the seeds. ``--set`` passes job overrides
(``--set fit.em_steps_cow=100``). The simulated probe is the instrument here: the figure
measures the pipeline and the estimator on planted problems, not a model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.dolce.categories import wilson  # noqa: E402
from raylc.evaluate import evaluate  # noqa: E402
from raylc.spec import load_job, parse_overrides  # noqa: E402


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-6")
    ap.add_argument("--set", dest="settings", action="append", default=[])
    args = ap.parse_args()
    overrides = parse_overrides(args.settings)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds_of(args.seeds):
            t0 = time.perf_counter()
            job = load_job(ROOT / "jobs" / "quickstart.yaml", {**overrides, "seed": seed, "store.path": tmp})
            with contextlib.redirect_stdout(io.StringIO()):  # each run's own report tables
                run = evaluate(job, f"seed-{seed}", log=lambda m: None)
            rec = run.folder.read("report/recovery.parquet")
            lo, hi = wilson(pl.col("recovered"), pl.col("n_problems"))
            rec = rec.with_columns(lo=lo, hi=hi)
            total = rec.filter(pl.col("task") == "(all)").row(0, named=True)
            per_task = ", ".join(f"{r['task']} {r['recovery']:.1%}"
                                 for r in rec.filter(pl.col("task") != "(all)").iter_rows(named=True))
            print(f"seed {seed}: {total['recovery']:.1%} ({total['recovered']}/{total['n_problems']}; 95% Wilson "
                  f"[{total['lo']:.1%}, {total['hi']:.1%}]; {per_task}) in {time.perf_counter() - t0:.0f} s",
                  flush=True)
            rows.append(total["recovery"])
    print(f"recovery over {len(rows)} seeds ({args.seeds}{'; ' + ' '.join(args.settings) if args.settings else ''}): "
          f"mean {statistics.mean(rows):.1%}, min {min(rows):.1%}, max {max(rows):.1%}")


if __name__ == "__main__":
    main()
