"""Coverage of the category shares' 95% intervals against the planted shares (issue 29
acceptance 3): the quickstart at 100 problems per task over seeds 0-6 and at 1,000 problems
per task over seeds 0-2.

    python tests/benchmarks/share_coverage.py [--seeds 0-6] [--big-seeds 0-2] [--set key=value ...]
    python tests/benchmarks/share_coverage.py --runs 0-6   # acceptance 2 on real runs (Ray)

Each setting runs ``jobs/quickstart.yaml`` (simulated probe, planted tasks) through the DOLCE
stage functions in this process (``dolce_tables`` of ``tests/in_process.py``: build, sample,
the simulated probe, score, fit, report; the same functions a run maps over Ray) and reads
``categories`` of the report stage (``share_coverage``). The planted share of a (task, category) cell is the
share of that task's problems whose planted (lambda, k) falls in the category under the fit's
thresholds (the report's ``problems.planted_category``): the quantity the shares estimate, as
the interval is over these problems (:mod:`raylc.dolce.shares`). Printed per setting: each
seed's coverage (cells whose interval holds the planted share, of 10), the distribution over
seeds (mean, min, max) and the pooled coverage, every missed cell with its planted share,
point and interval, the mean error of the shares per category, and whether every share lies
inside its interval. Exit 1 when the pooled
coverage of a setting is below 90%. The simulated probe is the instrument: the figures
measure the estimator on planted problems, not a model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from in_process import dolce_tables, share_coverage  # noqa: E402

from raylc.spec import load_job, parse_overrides  # noqa: E402

TARGET = 0.90


def quickstart_tables(overrides: dict) -> dict[str, pl.DataFrame]:
    """The report tables of ``jobs/quickstart.yaml`` with ``overrides``, every stage in process."""
    return dolce_tables(load_job(ROOT / "jobs" / "quickstart.yaml", overrides))


def seeds_of(text: str) -> list[int]:
    """Seeds from "0-6", "0,3,5", or "" / "none" (no seeds)."""
    if text.strip().lower() in ("", "none"):
        return []
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",") if x]


def run_setting(name: str, seeds: list[int], overrides: dict) -> float:
    print(f"== {name}: seeds {seeds[0]}-{seeds[-1]}, overrides {overrides}", flush=True)
    per_seed, cells = [], []
    for seed in seeds:
        t0 = time.time()
        got = share_coverage(quickstart_tables({**overrides, "seed": seed})).with_columns(seed=pl.lit(seed))
        cov = got["covered"].mean()
        per_seed.append(cov)
        cells.append(got)
        print(f"seed {seed}: {int(got['covered'].sum())}/{got.height} cells covered ({cov:.0%}); every share inside "
              f"its interval: {bool(got['inside'].all())}; {time.time() - t0:.0f} s", flush=True)
    allc = pl.concat(cells)
    pooled = float(allc["covered"].mean())
    print(f"{name}: coverage over seeds mean {statistics.mean(per_seed):.1%}, min {min(per_seed):.0%}, "
          f"max {max(per_seed):.0%}; pooled {int(allc['covered'].sum())}/{allc.height} = {pooled:.1%} "
          f"(target >= {TARGET:.0%}); shares inside their intervals: {int(allc['inside'].sum())}/{allc.height}")
    bias = allc.group_by("category").agg(err=(pl.col("share") - pl.col("planted")).mean(),
                                         width=(pl.col("share_hi") - pl.col("share_lo")).mean()).sort("category")
    print("  mean share - planted (mean interval width) per category: " + ", ".join(
        f"{r['category']} {r['err']:+.1%} ({r['width']:.1%})" for r in bias.iter_rows(named=True)))
    missed = allc.filter(~pl.col("covered"))
    for r in missed.iter_rows(named=True):
        print(f"  missed: seed {r['seed']} {r['task']} {r['category']}: planted {r['planted']:.1%}, share "
              f"{r['share']:.1%} [{r['share_lo']:.1%}, {r['share_hi']:.1%}]")
    return pooled


def check_runs(seeds: list[int], overrides: dict) -> bool:
    """Acceptance 2 on real runs (``raylc run`` through Ray, then ``raylc compare RUN``): every
    share of ``report/categories.parquet`` inside its interval, and compare's table equal to it."""
    import tempfile

    from polars.testing import assert_frame_equal

    from raylc.compare import compare_runs, find_runs
    from raylc.evaluate import evaluate

    ok = True
    with tempfile.TemporaryDirectory() as store:
        for seed in seeds:
            run_id = f"qs-{seed}"
            evaluate(load_job(ROOT / "jobs" / "quickstart.yaml", {**overrides, "seed": seed, "store.path": store}),
                     run_id, log=lambda m: None)
            cats = pl.read_parquet(Path(store) / run_id / "report" / "categories.parquet")
            inside = bool(cats.select(pl.col("share").is_between("share_lo", "share_hi")).to_series().all())
            got = compare_runs(find_runs([f"{store}/{run_id}"]), f"{store}/cmp-{seed}")[0]["categories"]
            try:
                assert_frame_equal(got.drop("run_id", "model"), cats.select(got.drop("run_id", "model").columns))
                equal = True
            except AssertionError:
                equal = False
            ok &= inside and equal
            print(f"run seed {seed}: every share inside its interval: {inside}; raylc compare repeats the run's "
                  f"shares and intervals exactly: {equal}", flush=True)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-6", help="seeds at 100 problems per task")
    ap.add_argument("--big-seeds", default="0-2", help="seeds at 1,000 problems per task ('' or none to skip)")
    ap.add_argument("--set", dest="settings", action="append", default=[])
    ap.add_argument("--runs", default="", help="also make real runs at these seeds (e.g. 0-6) and check that every "
                    "share lies in its interval and `raylc compare` repeats them (acceptance 2); then exit")
    args = ap.parse_args()
    extra = parse_overrides(args.settings)
    if args.runs:
        sys.exit(0 if check_runs(seeds_of(args.runs), extra) else 1)
    results = []
    if seeds_of(args.seeds):
        results.append(run_setting("100 problems per task", seeds_of(args.seeds),
                                   {**extra, "suite.problems_per_task": 100}))
    if seeds_of(args.big_seeds):
        results.append(run_setting("1,000 problems per task", seeds_of(args.big_seeds),
                                   {**extra, "suite.problems_per_task": 1000}))
    sys.exit(0 if all(r >= TARGET for r in results) else 1)


if __name__ == "__main__":
    main()
