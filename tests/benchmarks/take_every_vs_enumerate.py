"""Benchmark: take-every-N vs full enumeration on the quickstart planted suite (DOLCE Appendix K.1).

Builds the quickstart suite (``jobs/quickstart.yaml``: 2 tasks x 100 problems, L in
[50, 400], exponential ladder) with the pipeline's plain functions, observes every span
(sampling strategy ``enumerate``, stride 1) with the simulated probe in-process, scores it, and
runs :func:`raylc.dolce.sensitivity.run_sensitivity` with the take-every experiment. The reference
is the fit of the full enumeration; the test fits keep the rows with start % N == 0 and reuse
the reference's scenario selection. Prints, per task and N, the median relative changes
delta(lambda), delta(k), Spearman rho(lambda), rho(k), the KL divergence of P(x | z = N)
and the share of observations kept. The paper reports rho(lambda) = 0.93, rho(k) = 0.99 and
KL = 3.7e-5 for take-every-5 on L-Eval SFiction (Section 6); the target here is
rho(lambda), rho(k) >= 0.9 for take-every-5 (exit status 1 when missed).

    .venv/bin/python tests/benchmarks/take_every_vs_enumerate.py [--every 2 5 10] [--problems 100]
        [--strategies take_ip_rate sample_rate sample_ip_rate min_length max_length]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.dolce import stages  # noqa: E402
from raylc.dolce.sensitivity import run_sensitivity  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from in_process import infer_frame  # noqa: E402

from raylc.spec import load_job  # noqa: E402

TARGET_RHO = 0.9


def enumerate_observations(problems_per_task: int | None = None) -> tuple[pl.DataFrame, float]:
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    updates = {"sampling": job.sampling.model_copy(update={"strategy": "enumerate"})}
    if problems_per_task is not None:
        updates["suite"] = job.suite.model_copy(update={"problems_per_task": problems_per_task})
    job = job.model_copy(update=updates)
    t0 = time.perf_counter()
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    obs = stages.score(infer_frame(spans, problems, job), problems, job)
    return obs, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, nargs="+", default=[2, 5, 10])
    ap.add_argument("--problems", type=int, default=None, help="problems per task (default: the quickstart's 100)")
    ap.add_argument("--strategies", nargs="*", default=[], metavar="NAME",
                    help="other Appendix K.1 strategies at their default settings: take_ip_rate sample_rate "
                         "sample_ip_rate min_length max_length")
    args = ap.parse_args()

    obs, t_obs = enumerate_observations(args.problems)
    print(f"full enumeration: {obs.height} observations, {obs['problem_id'].n_unique()} problems, "
          f"{obs['task'].n_unique()} tasks (build+sample+infer+score {t_obs:.1f} s)")
    t0 = time.perf_counter()
    res = run_sensitivity(obs, experiments=("take_every", *args.strategies), every=args.every)
    print(f"reference fit + {res.height} take-every cells: {time.perf_counter() - t0:.1f} s")
    res = res.with_columns(kept=pl.col("n_obs_test") / pl.col("n_obs_ref"))
    with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=200, float_precision=4):
        print(res.select("experiment", "setting", "task", "n_problems", "kept", "delta_lam", "delta_k", "rho_lam",
                         "rho_k", "kl_noise", "category_agreement"))
    five = res.filter((pl.col("experiment") == "take_every") & (pl.col("setting") == 5.0))
    if five.height == 0:
        return 0
    ok = bool(((five["rho_lam"] >= TARGET_RHO) & (five["rho_k"] >= TARGET_RHO)).all())
    print(f"take-every-5: rho(lambda) {', '.join(f'{v:.3f}' for v in five['rho_lam'])}; "
          f"rho(k) {', '.join(f'{v:.3f}' for v in five['rho_k'])}; "
          f"KL {', '.join(f'{v:.2e}' for v in five['kl_noise'])} "
          f"-> target >= {TARGET_RHO} {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
