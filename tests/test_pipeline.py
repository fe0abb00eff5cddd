"""End to end: the quickstart job through Ray, twice, and the report."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from raylc.pipeline.runner import OUTPUTS, RunError, run_job
from raylc.report import load_report
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[1]
TABLES = ["build/problems.parquet", "sample/spans.parquet", "infer", "score/observations.parquet",
          "fits/problems.parquet", "fits/tasks.parquet", "report/categories.parquet", "report/recovery.parquet"]


@pytest.fixture(scope="module")
def quickstart_runs(ray_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    overrides = {"store.path": str(store), "ray.no_progress_timeout_s": 300}
    job = load_job(ROOT / "jobs" / "quickstart.yaml", overrides)
    logs: list[str] = []
    first = run_job(job, "first", log=logs.append)
    second = run_job(job, "second", log=logs.append)
    return store, first, second, logs, job


def _read(store, run_id, rel):
    if rel == "infer":  # hive-partitioned by task
        df = pl.read_parquet(str(Path(store, run_id, rel)) + "/**/*.parquet", hive_partitioning=True)
    else:
        df = pl.read_parquet(Path(store, run_id, rel))
    return df.sort("task", "problem_id", "C", "start") if rel == "infer" else df


def test_every_stage_written_and_manifest_complete(quickstart_runs):
    store, first, _, _, job = quickstart_runs
    for outputs in OUTPUTS.values():
        for rel in outputs:
            assert Path(store, "first", rel).exists(), rel
    manifest = first.manifest
    assert manifest["seed"] == job.seed and manifest["job"]["name"] == "quickstart"
    assert {s: v["status"] for s, v in manifest["stages"].items()} == dict.fromkeys(OUTPUTS, "done")
    assert manifest["stages"]["score"]["rows"]["observations"] == _read(store, "first", "score/observations.parquet").height
    assert "ray" in manifest["versions"] and "polars" in manifest["versions"]


def test_observation_table_contract(quickstart_runs):
    store = quickstart_runs[0]
    obs = _read(store, "first", "score/observations.parquet")
    assert obs.schema == pl.Schema({"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                    "start": pl.Int64, "score": pl.Float64, "metric": pl.String})
    assert obs.filter(pl.col("C") > pl.col("L")).height == 0
    assert set(obs["score"].drop_nulls().unique()) <= {0.0, 1.0} and obs["score"].null_count() > 0
    fits = _read(store, "first", "fits/problems.parquet")
    assert {"task", "problem_id", "scenario", "lam", "k", "category", "loglik"} <= set(fits.columns)
    assert fits.height == 200 and set(fits["category"]) <= {"I", "II", "III", "IV", "V"}


def test_same_seed_identical_tables(quickstart_runs):
    store = quickstart_runs[0]
    for rel in TABLES:
        assert _read(store, "first", rel).equals(_read(store, "second", rel)), rel


def test_planted_category_recovery_at_least_90_percent(quickstart_runs):
    store = quickstart_runs[0]
    recovery = _read(store, "first", "report/recovery.parquet")
    overall = recovery.filter(pl.col("task") == "(all)")["recovery"][0]
    assert overall >= 0.90, recovery


def test_rerun_same_run_id_skips_finished_stages(quickstart_runs):
    store, first, _, _, job = quickstart_runs
    logs: list[str] = []
    run_job(job, "first", log=logs.append)
    assert sum("skipped" in line for line in logs) == len(OUTPUTS)


def test_same_run_id_different_spec_refused(quickstart_runs):
    store, _, _, _, job = quickstart_runs
    other = job.model_copy(update={"seed": job.seed + 1})
    with pytest.raises(RunError, match="different job spec"):
        run_job(other, "first", log=lambda m: None)


def test_report_command(quickstart_runs):
    store = quickstart_runs[0]
    tables, manifest = load_report(str(Path(store, "first")))
    assert manifest["run_id"] == "first"
    proc = subprocess.run([sys.executable, "-m", "raylc", "report", str(Path(store, "first"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "DOLCE focus categories" in proc.stdout and "planted-a" in proc.stdout
    summary = Path(store, "first", "report", "summary.md").read_text()
    assert "Planted-category recovery" in summary and "| planted-b |" in summary
    bad = subprocess.run([sys.executable, "-m", "raylc", "report", str(store / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
