"""`raylc submit` and plain `ray job submit --working-dir` against a local Ray head on 127.0.0.1."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from raycluster import LocalHead

ROOT = Path(__file__).resolve().parents[1]
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
