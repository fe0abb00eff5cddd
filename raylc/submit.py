"""Submit a job file to a Ray cluster with Ray's JobSubmissionClient.

The entrypoint is ``python -m raylc run JOB`` in a runtime environment whose working
directory is the local project folder (so the cluster runs this exact code); the
cluster's Python environment provides raylc's dependencies (see cluster/README.md).
Equivalent to ``ray job submit --working-dir . -- python -m raylc run JOB``.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from pathlib import Path
from typing import Callable, Optional

from raylc.spec import JobSpecError, load_job

EXCLUDES = [".venv", "runs", ".git", "**/__pycache__", ".pytest_cache", ".hypothesis", "*.egg-info"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class SubmitError(RuntimeError):
    """Submission failed (cluster unreachable, job failed); one-line message."""


def build_entrypoint(job_file: str, store: Optional[str], run_id: Optional[str]) -> str:
    args = ["python", "-m", "raylc", "run", job_file]
    if store:
        args += ["--store", store]
    if run_id:
        args += ["--run-id", run_id]
    return " ".join(shlex.quote(a) for a in args)


def submit(
    job_file: Path,
    address: str,
    store: Optional[str] = None,
    run_id: Optional[str] = None,
    wait: bool = True,
    working_dir: Path = Path("."),
    log: Callable[[str], None] = print,
) -> tuple[str, str]:
    """Validate the job file, submit it, and (``wait``) follow its logs; returns (job id, final status)."""
    from ray.job_submission import JobSubmissionClient

    wd = working_dir.resolve()
    try:
        rel = job_file.resolve().relative_to(wd)
    except ValueError:
        raise JobSpecError(f"{job_file}: job file must be inside the working directory {wd}") from None
    overrides = {"store.path": store} if store else None
    load_job(job_file, overrides)  # fail fast, locally, on a bad job file
    try:
        client = JobSubmissionClient(address)
        job_id = client.submit_job(
            entrypoint=build_entrypoint(rel.as_posix(), store, run_id),
            runtime_env={"working_dir": str(wd), "excludes": EXCLUDES},
            metadata={"raylc_job": rel.as_posix()},
        )
    except Exception as exc:  # connection refused, bad address, upload failure
        raise SubmitError(f"{address}: could not submit ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    log(f"submitted {job_id}")
    if not wait:
        return job_id, "PENDING"

    async def follow() -> None:
        async for chunk in client.tail_job_logs(job_id):
            log(chunk.rstrip("\n"))

    try:
        asyncio.run(follow())
    except Exception:  # log streaming is best effort; status below is authoritative
        pass
    status = str(client.get_job_status(job_id))
    while status.split(".")[-1] not in TERMINAL:
        time.sleep(1.0)
        status = str(client.get_job_status(job_id))
    status = status.split(".")[-1]
    if status != "SUCCEEDED":
        raise SubmitError(f"job {job_id} ended {status}; see `ray job logs {job_id} --address {address}`")
    return job_id, status
