"""`raylc submit` and plain `ray job submit --working-dir` against a local Ray head on 127.0.0.1."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from raycluster import LocalHead

ROOT = Path(__file__).resolve().parents[2]
COMPARED = ["build/problems.parquet", "score/observations.parquet", "fits/problems.parquet", "report/recovery.parquet"]


@pytest.fixture
def small_job():
    """A smaller quickstart inside the working directory that `ray job submit` uploads."""
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"].update(problems_per_task=40, max_units=200)
    path = ROOT / "jobs" / ".submit-test.yaml"
    path.write_text(yaml.safe_dump(spec))
    yield path.relative_to(ROOT).as_posix()
    path.unlink()


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    cluster = LocalHead(tmp_path_factory.mktemp("head") / "ray")
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def _check_run(store: Path, run_id: str) -> None:
    manifest = (store / run_id / "manifest.json").read_text()
    assert '"status": "done"' in manifest and '"report"' in manifest
    recovery = pl.read_parquet(store / run_id / "report" / "recovery.parquet")
    assert recovery.filter(pl.col("task") == "(all)")["recovery"][0] >= 0.8


@pytest.mark.ray
def test_raylc_submit_and_plain_ray_job_submit(head, tmp_path, small_job):
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "submit", small_job, "--address", head.address,
         "--store", str(store), "--run-id", "via-raylc"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].endswith("SUCCEEDED")
    assert "[report]" in proc.stdout  # the job's logs were followed
    _check_run(store, "via-raylc")

    ray_bin = Path(sys.executable).parent / "ray"
    proc = subprocess.run(
        [str(ray_bin), "job", "submit", "--address", head.address, "--working-dir", ".", "--",
         "python", "-m", "raylc", "run", small_job, "--store", str(store), "--run-id", "via-ray"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_run(store, "via-ray")
    for rel in COMPARED:
        assert pl.read_parquet(store / "via-raylc" / rel).equals(pl.read_parquet(store / "via-ray" / rel)), rel


def test_submit_unreachable_cluster_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "submit", "jobs/quickstart.yaml", "--address", "http://127.0.0.1:9"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: http://127.0.0.1:9: could not submit")
    assert "Traceback" not in proc.stderr


def test_submit_bad_job_file_fails_locally(tmp_path):
    bad = ROOT / "jobs" / ".bad-submit-test.yaml"
    bad.write_text("name: x\nsampling: {stride: 2}\n")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "raylc", "submit", str(bad), "--address", "http://127.0.0.1:9"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
    finally:
        bad.unlink()
    assert proc.returncode == 2
    assert "unknown key 'sampling.stride'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.ray
def test_ray_job_stop_interrupts_the_run(head, tmp_path):
    """`ray job stop` sends SIGTERM to the driver (then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S,
    3 s): the run ends in time with its one line in the job's log, the stage marked
    interrupted and the lock released."""
    import json
    import re
    import time

    from ray.job_submission import JobSubmissionClient

    job = ROOT / "jobs" / ".stop-test.yaml"
    job.write_text("name: stop\nsuite: {kind: planted, tasks: [planted-a, planted-b], problems_per_task: 3, "
                   "min_units: 200, max_units: 400}\ninference: {shard_rows: 500, shard_seconds: 0.5}\n")
    store = tmp_path / "store"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "raylc", "submit", job.relative_to(ROOT).as_posix(), "--address", head.address,
             "--store", str(store), "--run-id", "stop", "--no-wait"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
    finally:
        job.unlink()
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = proc.stdout.split()[-2]
    run = store / "stop"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            running = (json.loads((run / "manifest.json").read_text())["stages"].get("infer", {}).get("status")
                       == "running")
        except (OSError, ValueError, KeyError):
            running = False
        if running and any((run / "infer").rglob("part-*.parquet")):
            break
        time.sleep(0.1)
    client = JobSubmissionClient(head.address)
    client.stop_job(job_id)
    while str(client.get_job_status(job_id)).split(".")[-1] not in ("STOPPED", "SUCCEEDED", "FAILED"):
        time.sleep(0.5)
    time.sleep(1.0)  # the log's last lines
    logs = client.get_job_logs(job_id)
    assert re.search(r"^interrupted \(SIGTERM\) during infer; \d+ requests stored; "
                     r"re-run with --run-id stop to resume$",
                     logs, re.M), logs[-3000:]
    assert "Traceback" not in logs and "SIGTERM received" not in logs
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["stages"]["infer"]["status"] == "interrupted"
    assert not (run / "_lock.json").exists()


def test_the_entrypoint_passes_every_set_on_quoted():
    from raylc.run.submit import build_entrypoint

    got = build_entrypoint("jobs/q.yaml", "s3://b/runs", "r1", ["seed=3", "name=my run", "suite.lengths=[1, 2]"])
    assert got == ("python -m raylc run jobs/q.yaml --store s3://b/runs --run-id r1 --set seed=3 "
                   "--set 'name=my run' --set 'suite.lengths=[1, 2]'")
    assert build_entrypoint("jobs/q.yaml", None, None) == "python -m raylc run jobs/q.yaml"
