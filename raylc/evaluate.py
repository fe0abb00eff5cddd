"""One entry point for any suite: :func:`evaluate` runs a job, :func:`evaluation_for` names the
family that evaluates its suite (DOLCE or a length sweep), :func:`load_report` reads a run back.

The suite's config says which family it belongs to (:mod:`raylc.suites.registry`); the
family's evaluation gives its stages to the run skeleton (:mod:`raylc.run.skeleton`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import polars as pl

from raylc.dolce.evaluation import DolceEvaluation
from raylc.io.store import Store, StoreError
from raylc.run.skeleton import Evaluation, Run, run_job
from raylc.spec import Job, JobSpecError, parse_job
from raylc.sweep.evaluation import SweepEvaluation

EVALUATIONS: dict[str, Any] = {"dolce": DolceEvaluation(), "sweep": SweepEvaluation()}


def evaluation_for(job: Job) -> Evaluation:
    """The evaluation of the job's suite family."""
    return EVALUATIONS[job.suite.family]


def evaluate(job: Job, run_id: Optional[str] = None, log: Callable[[str], None] = print,
             overrides: Optional[dict[str, Any]] = None) -> Run:
    """Run ``job`` end to end (or resume the run ``run_id``); returns the finished run.
    ``overrides``: the command line's changes to the job file, recorded in the manifest."""
    return run_job(job, evaluation_for(job), run_id, log, overrides)


def load_report(run_dir: str) -> tuple[dict[str, pl.DataFrame], dict[str, Any], Evaluation]:
    """A finished run's report tables, manifest and evaluation, from ``run_dir`` (path or s3:// URI)."""
    root, _, run_id = run_dir.rstrip("/").rpartition("/")
    store = Store(root or ".")
    manifest = store.read_json(run_id, "manifest.json")
    if manifest is None:
        raise StoreError(f"{run_dir}: not a raylc run (no manifest.json)")
    try:
        job = parse_job(manifest.get("job"), f"{run_dir}/manifest.json")
    except JobSpecError as exc:
        raise StoreError(str(exc)) from None
    evaluation = evaluation_for(job)
    tables = {name: store.read_table(run_id, "report", f"{name}.parquet")
              for name in evaluation.report_tables(job) if store.exists(run_id, "report", f"{name}.parquet")}
    if not tables:
        raise StoreError(f"{run_dir}: the run has no report yet (run it to completion with `raylc run`)")
    return tables, manifest, evaluation


def report_page(run_dir: str) -> Any:
    """A finished run's page (:class:`raylc.io.page.Page`) rebuilt from its stored report, figures
    and fits: ``raylc report`` prints its sections, in the page's order."""
    tables, manifest, evaluation = load_report(run_dir)
    root, _, run_id = run_dir.rstrip("/").rpartition("/")
    store = Store(root or ".")

    def read(rel: str) -> Any:
        parts = rel.split("/")
        if not store.exists(run_id, *parts):
            return None
        if rel.endswith(".parquet"):
            return store.read_table(run_id, *parts)
        with store.open_input(run_id, *parts) as f:
            return f.read()

    job = parse_job(manifest.get("job"), f"{run_dir}/manifest.json")
    return evaluation.report_page(job, tables, manifest, read)
