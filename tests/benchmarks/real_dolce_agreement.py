"""Category agreement on the generated real-model suite, per kind, over generator seeds.

For each seed, a real ``raylc run`` of the job (default ``jobs/real-dolce-layouts-smollm2.yaml``:
SmolLM2-135M-Instruct through vLLM's CPU engine) into a scratch store; then per kind (task) and
overall: the problems, those answered right at full context, and among these the share whose
reported category (the run's ``fits/problems.parquet``) equals the one the probe's own answers
imply (``tests/real_implied.py``) and the designed one (``planted_lam``, ``planted_k`` under the
same thresholds); ``implied=designed`` says whether the probe answered as the layout was
designed. A last table gives each agreement's mean, min and max over the seeds.

``--runs`` re-fits finished runs without inference: each folder (a run, or a copy holding
``score/observations.parquet`` and ``build/problems.parquet``) is fitted again by ``raylc fit``
with the estimator in the tree (``--stored``: read the run's own ``fits/problems.parquet``).
``--noise P``: re-fit in this process with the task's P(1|N) fixed at P for every span class
(one value for COW's posterior, :data:`raylc.dolce.cow.NOISE_GRID`, which it otherwise integrates
over per span class): a diagnostic of how far a category turns on the noise.

    .venv-real/bin/python tests/benchmarks/real_dolce_agreement.py                  # seeds 0-2
    .venv-real/bin/python tests/benchmarks/real_dolce_agreement.py --seeds 0-4 --store /tmp/agree \\
        --set probe.dtype=float32 --save-obs /work/scratch/real-obs
    .venv/bin/python tests/benchmarks/real_dolce_agreement.py --runs /work/scratch/real-obs/*layouts*
    .venv/bin/python tests/benchmarks/real_dolce_agreement.py --runs /work/scratch/real-obs/* --noise 0.15
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from real_implied import implied_categories  # noqa: E402

from raylc.dolce.categories import assign_categories  # noqa: E402

JOB = ROOT / "jobs" / "real-dolce-layouts-smollm2.yaml"
AGREEMENTS = ("reported=implied", "reported=designed", "implied=designed")


def seeds_of(text: str) -> list[int]:
    """``0-2`` or ``0,3,5``."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def run_dtype(job: Path, sets: list[str]) -> str:
    """The dtype the engine runs the job in here (``auto`` resolved as the engine resolves it)."""
    from raylc.backends.vllm_engine import engine_dtype
    from raylc.spec import load_job, parse_overrides

    return engine_dtype(load_job(job, parse_overrides(sets)).probe)[0]


def run_seed(job: Path, seed: int, store: Path, sets: list[str]) -> Path:
    """A real ``raylc run`` of ``job`` at ``seed`` (a finished run of that id is reused)."""
    from raylc.spec import load_job

    run_id = f"{load_job(job).name}-seed{seed}-{run_dtype(job, sets)}"
    args = [sys.executable, "-m", "raylc", "run", str(job), "--store", str(store), "--run-id", run_id,
            "--seed", str(seed), *[a for s in sets for a in ("--set", s)]]
    print("$", " ".join(args), file=sys.stderr, flush=True)
    proc = subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        sys.exit(f"raylc run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return store / run_id


def refit(run: Path) -> pl.DataFrame:
    """``fits/problems.parquet`` of ``raylc fit`` on the run's observations (no figures, no Ray)."""
    with tempfile.TemporaryDirectory(prefix="raylc-refit-") as out:
        args = [sys.executable, "-m", "raylc", "fit", str(run / "score" / "observations.parquet"), "--out", out,
                "--no-ray", "--no-figures"]
        proc = subprocess.run(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode:
            sys.exit(f"raylc fit {run} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return pl.read_parquet(Path(out) / "problems.parquet")


def refit_noise(run: Path, noise: float) -> pl.DataFrame:
    """The problems frame of a fit of the run's observations with COW's P(1|N) fixed at ``noise``."""
    from raylc.dolce import cow
    from raylc.dolce.fit import fit_observations

    grid, cow.NOISE_GRID = cow.NOISE_GRID, (noise,)
    try:
        return fit_observations(pl.read_parquet(run / "score" / "observations.parquet"))[0]
    finally:
        cow.NOISE_GRID = grid


def agreement_rows(run: Path, fits: pl.DataFrame) -> pl.DataFrame:
    """Per problem: task, right at full context, and the reported, implied and designed categories."""
    obs = pl.read_parquet(run / "score" / "observations.parquet")
    problems = pl.read_parquet(run / "build" / "problems.parquet")
    implied = implied_categories(obs)
    table = implied.join(fits.select("problem_id", pl.col("category").alias("reported")), on="problem_id", how="left")
    designed = pl.Series("designed", [None] * table.height, pl.String)  # a suite without a designed layout
    if "planted_lam" in problems.columns:
        table = table.join(problems.select("problem_id", "planted_lam", "planted_k"), on="problem_id", how="left")
        designed = pl.Series("designed", assign_categories(
            table["planted_lam"].to_numpy(), table["planted_k"].to_numpy(), table["lam_p"].to_numpy(),
            table["k_p"].to_numpy(), table["lam_q"].to_numpy()).tolist(), pl.String)
    return table.select("task", "problem_id", "right_full", "reported", pl.col("category").alias("implied"), designed)


def summarize(rows: pl.DataFrame) -> pl.DataFrame:
    """Per task and overall: problems, right at full context, agreements among those."""
    right = pl.col("right_full")
    stats = dict(problems=pl.len(), right_full=right.sum(),
                 **{name: pl.when(pl.col(b).is_not_null().any()).then(
                     ((pl.col(a) == pl.col(b)).fill_null(False) & right).sum() / right.sum())
                    for name, (a, b) in zip(AGREEMENTS, [("reported", "implied"), ("reported", "designed"),
                                                         ("implied", "designed")])})
    per_task = rows.group_by("task").agg(**stats).sort("task")
    return pl.concat([per_task, rows.select(task=pl.lit("(all)"), **stats)], how="vertical_relaxed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", type=Path, default=JOB)
    parser.add_argument("--seeds", default="0-2", help="generator seeds: 0-2 (default) or 0,3,5")
    parser.add_argument("--store", type=Path, help="store of the runs (default: a new scratch folder)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="KEY.PATH=VALUE for raylc run")
    parser.add_argument("--save-obs", type=Path,
                        help="copy each run's observations and problems to DIR/<run id>/ (score/, build/)")
    parser.add_argument("--runs", type=Path, nargs="+", help="re-fit these finished runs instead of running any")
    parser.add_argument("--stored", action="store_true", help="with --runs: read each run's own fits")
    parser.add_argument("--noise", type=float, help="with --runs: re-fit with COW's P(1|N) fixed at this value")
    args = parser.parse_args()
    if args.noise is not None and not args.runs:
        parser.error("--noise re-fits finished runs: give them with --runs")

    if args.runs:
        runs = [(run.name, run) for run in args.runs]
    else:
        store = args.store or Path(tempfile.mkdtemp(prefix="raylc-agreement-"))
        print(f"store: {store}", file=sys.stderr)
        runs = [(f"seed {s}", run_seed(args.job.resolve(), s, store, args.sets)) for s in seeds_of(args.seeds)]
    summaries = []
    for name, run in runs:
        if args.save_obs:
            for rel in ("score/observations.parquet", "build/problems.parquet"):
                (args.save_obs / run.name / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(run / rel, args.save_obs / run.name / rel)
        stored = not args.runs or args.stored
        if args.noise is not None:
            fits, how = refit_noise(run, args.noise), f"P(1|N) = {args.noise} refit"
        elif stored:
            fits, how = pl.read_parquet(run / "fits" / "problems.parquet"), "the run"
        else:
            fits, how = refit(run), "refitted"
        summary = summarize(agreement_rows(run, fits)).with_columns(run=pl.lit(name))
        summaries.append(summary)
        with pl.Config(tbl_rows=-1, tbl_width_chars=160, float_precision=3, tbl_hide_dataframe_shape=True):
            print(f"{name} ({run}; {how}'s categories{_infer_time(run)})")
            print(summary.drop("run"))
    every = pl.concat(summaries)
    over = every.group_by("task", maintain_order=True).agg(
        runs=pl.len(), problems=pl.col("problems").sum(), right_full=pl.col("right_full").sum(),
        **{f"{a} mean (min-max)": pl.col(a).map_batches(lambda s: pl.Series([_mmm(s)]), returns_scalar=True)
           for a in AGREEMENTS})
    with pl.Config(tbl_rows=-1, tbl_width_chars=200, fmt_str_lengths=40, tbl_hide_dataframe_shape=True):
        print(f"over {len(runs)} runs: agreement among problems answered right at full context")
        print(over)
    return 0


def _infer_time(run: Path) -> str:
    """``; infer N requests in S s`` from the run's manifest (none for a copy without one)."""
    import json

    try:
        infer = json.loads((run / "manifest.json").read_text())["stages"]["infer"]
        return f"; infer {infer['rows']['requests']} requests in {infer['seconds']:.0f} s"
    except (OSError, KeyError, ValueError):
        return ""


def _mmm(values: pl.Series) -> str:
    vals = [v for v in values.to_list() if v is not None]
    if not vals:
        return ""
    return f"{statistics.mean(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})"


if __name__ == "__main__":
    sys.exit(main())
