"""The ``raylc`` command line: the only entry point."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import polars as pl
import typer

from raylc.spec import JobSpecError, load_job
from raylc.store import StoreError, StoreUnavailable

app = typer.Typer(
    name="raylc",
    help="Distributed long-context LLM evaluation on Ray: DOLCE focus categories, length sweeps, LongScore.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    job_file: Path = typer.Argument(..., help="Job YAML file (see jobs/quickstart.yaml)."),
    store: Optional[str] = typer.Option(None, "--store", help="Store root (local folder or s3://bucket/prefix); overrides store.path."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id; an existing run with the same job resumes at its first unfinished stage."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed; overrides the job's seed."),
) -> None:
    """Run a job end to end: build -> sample -> infer -> score -> fit -> report."""
    from raylc.pipeline.runner import RunError, default_run_id, run_job

    overrides: dict[str, Any] = {}
    if store is not None:
        overrides["store.path"] = store
    if seed is not None:
        overrides["seed"] = seed
    try:
        job = load_job(job_file, overrides)
        if run_id is not None and (not run_id or "/" in run_id or run_id.startswith(".")):
            raise JobSpecError(f"--run-id {run_id!r}: must be a plain name (no '/', not starting with '.')")
        run_id = run_id or default_run_id(job)
        run_job(job, run_id, log=lambda m: typer.echo(m, err=True))
    except StoreUnavailable as exc:
        _fail(f"{exc} (finished stages are kept; re-run with --run-id {run_id} to resume)", 1)
    except (JobSpecError, RunError, StoreError) as exc:
        _fail(str(exc))


@app.command()
def report(run_dir: str = typer.Argument(..., help="A run folder: <store>/<run_id> (local path or s3:// URI).")) -> None:
    """Print a finished run's category table and planted recovery (also in report/summary.md)."""
    from raylc.report import load_report, print_report

    try:
        tables, _ = load_report(run_dir)
    except StoreError as exc:
        _fail(str(exc))
    print_report(tables)


@app.command()
def submit(
    job_file: Path = typer.Argument(..., help="Job YAML file inside the working directory."),
    address: str = typer.Option(..., "--address", help="Ray dashboard address, e.g. http://HEAD:8265."),
    store: Optional[str] = typer.Option(None, "--store", help="Store root as seen from the cluster (e.g. s3://bucket/runs)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id to use (or resume) on the cluster."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Print the job id and return without following the logs."),
    working_dir: Path = typer.Option(Path("."), "--working-dir", help="Folder uploaded as the job's working directory."),
) -> None:
    """Submit a job file to a Ray cluster (Ray Jobs API) and follow its logs."""
    from raylc.submit import SubmitError
    from raylc.submit import submit as do_submit

    try:
        job_id, status = do_submit(job_file, address, store, run_id, not no_wait, working_dir, log=typer.echo)
    except (JobSpecError, SubmitError) as exc:
        _fail(str(exc), 2 if isinstance(exc, JobSpecError) else 1)
    typer.echo(f"{job_id} {status}")


@app.command()
def longscore(
    scores: str = typer.Argument(..., help="Scores table (Parquet/CSV/JSONL, local or s3://): model, task, length, score [, sample_id]."),
    out: str = typer.Option(..., "--out", help="Output folder (local or s3://) for per_length/summary tables and figures."),
    base_lengths: str = typer.Option("2048,4096,6144", "--base-lengths", help="Comma-separated base lengths in tokens."),
    n_boot: int = typer.Option(0, "--n-boot", help="Bootstrap resamples for confidence intervals (needs sample_id)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    ray: Optional[bool] = typer.Option(None, "--ray/--no-ray", help="Aggregate per (model, task) as Ray tasks (default: when RAY_ADDRESS is set)."),
) -> None:
    """LongScore LC_l = 100 (S_l - Base) / Base per model and task, rankings, correlations, figures."""
    from rich.console import Console

    from raylc.length_report import run_longscore
    from raylc.report import rich_table

    try:
        lengths = [int(x) for x in base_lengths.split(",") if x.strip()]
    except ValueError:
        _fail(f"--base-lengths {base_lengths!r}: expected comma-separated integers")
    try:
        result = run_longscore(scores, out, lengths, n_boot, seed, ray)
    except StoreUnavailable as exc:
        _fail(str(exc), 1)
    except StoreError as exc:
        _fail(str(exc))
    cols = ["model", "task", "base", "avg_score", "avg_lc", "rank_base", "rank_score", "rank_lc", "warning"]
    summary = result["summary"].select(cols).with_columns(pl.col("base", "avg_score", "avg_lc").round(2))
    Console().print(rich_table(summary, "LongScore (LC in %, averaged over long lengths)"))


def main() -> None:
    app(prog_name="raylc")


if __name__ == "__main__":
    sys.exit(main())
