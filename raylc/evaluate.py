"""One entry point for any suite: :func:`evaluate` runs a job, :func:`evaluation_for` names the
family that evaluates its suite (DOLCE or a length sweep), :func:`load_report` reads a run back.

The suite's config says which family it belongs to (:mod:`raylc.suites.registry`); the
family's evaluation gives its stages to the stage runner (:mod:`raylc.run.runner`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import polars as pl

from raylc.dolce.evaluation import DolceEvaluation
from raylc.io.errors import StoreError
from raylc.io.schemas import TableSchema
from raylc.run.folder import MANIFEST, RunFolder
from raylc.run.manifest import Manifest
from raylc.run.runner import Evaluation, Run, run_job
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


def _run_job(folder: RunFolder, manifest: Manifest) -> Job:
    try:
        return parse_job(manifest.job, folder.uri(MANIFEST))
    except JobSpecError as exc:
        raise StoreError(str(exc)) from None


def load_report(run_dir: str) -> tuple[dict[str, pl.DataFrame], Manifest, Evaluation]:
    """A finished run's report tables, manifest and evaluation, from its folder ``run_dir``
    (path or s3:// URI)."""
    folder = RunFolder.at(run_dir)
    manifest = folder.manifest()
    if manifest is None:
        raise StoreError(f"{run_dir}: not a raylc run (no manifest.json)")
    job = _run_job(folder, manifest)
    evaluation = evaluation_for(job)
    read = {schema.name: folder.read_declared(schema, stage="report", missing_ok=True)
            for schema in evaluation.report_tables(job)}
    tables = {name: table for name, table in read.items() if table is not None}
    if not tables:
        stopped = manifest.stopped()
        if stopped is not None:
            from raylc.run.budget import budget_line

            raise StoreError(f"{run_dir}: the run stopped at its budget during {stopped[0]}, so it has no report: "
                             f"{budget_line(stopped[1])}; re-run it with a higher --max-prompt-tokens to finish it")
        raise StoreError(f"{run_dir}: the run has no report yet (run it to completion with `raylc run`)")
    return tables, manifest, evaluation


def report_page(run_dir: str) -> Any:
    """A finished run's page (:class:`raylc.io.page.Page`) rebuilt from its stored report, figures
    and fits: ``raylc report`` prints its sections, in the page's order."""
    tables, manifest, evaluation = load_report(run_dir)
    folder = RunFolder.at(run_dir)

    def read(what: str | TableSchema, stage: Optional[str] = None) -> Any:
        if isinstance(what, TableSchema):
            return folder.read_declared(what, stage=stage, missing_ok=True)
        return folder.read_bytes(what)

    return evaluation.report_page(_run_job(folder, manifest), tables, manifest.record(), read)
