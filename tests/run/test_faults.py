"""Faults: a corrupt or truncated table is detected and its stage redone; a killed worker is survived."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from in_process import infer_frame

from raylc.dolce import stages
from raylc.evaluate import evaluate
from raylc.io.store import Store, StoreError
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
# the fits of these runs are point fits (fit.uncertainty none): what is checked is the redone stages and
# the run that survives a killed worker, not the posterior, whose ~6 s a fit the DOLCE runs of
# tests/dolce/test_evaluation.py and tests/test_compare.py pay
SMALL = {"suite.problems_per_task": 15, "suite.max_units": 120, "ray.no_progress_timeout_s": 300,
         "fit.uncertainty": "none"}


@pytest.mark.ray
def test_corrupt_and_truncated_tables_are_detected_and_redone(ray_session, tmp_path):
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": str(tmp_path), **SMALL})
    evaluate(job, "r", log=lambda m: None)
    before = {rel: pl.read_parquet(tmp_path / "r" / rel)
              for rel in ("score/observations.parquet", "fits/problems.parquet", "report/problems.parquet")}
    obs = tmp_path / "r" / "score" / "observations.parquet"
    obs.write_bytes(obs.read_bytes()[: obs.stat().st_size // 2])  # truncated
    (tmp_path / "r" / "fits" / "problems.parquet").write_bytes(b"not parquet at all")  # corrupt
    with pytest.raises(StoreError, match="observations.parquet: unreadable Parquet"):
        Store(str(tmp_path)).read_table("r", "score", "observations.parquet")
    logs: list[str] = []
    evaluate(job, "r", log=logs.append)
    skipped = {line.split("]")[0].strip("[") for line in logs if "skipped" in line}
    assert skipped == {"build", "sample", "infer"}
    for rel, df in before.items():
        assert pl.read_parquet(tmp_path / "r" / rel).equals(df), rel
    # any table of the report, not only the first one it listed (the stage ran again only for that)
    report = tmp_path / "r" / "report" / "problems.parquet"
    report.write_bytes(report.read_bytes()[:100])
    logs.clear()
    evaluate(job, "r", log=logs.append)
    assert {line.split("]")[0].strip("[") for line in logs if "skipped" in line} == {
        "build", "sample", "infer", "score", "fit"}
    assert pl.read_parquet(report).equals(before["report/problems.parquet"])


def _infer_actor_pids(parent: int) -> list[int]:
    """Ray Data inference actors (their process title names the UDF)."""
    out = subprocess.run(["pgrep", "-f", "MapWorker.*TextActor"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _kill_inference_workers(job_file: Path, store: Path, address: str) -> None:
    """``raylc run`` joining the Ray at ``address`` (the session's: as a job on a cluster does,
    which saves starting a Ray of its own); SIGKILL every inference actor mid-stage; the run
    completes."""
    env = {**os.environ, "RAY_ADDRESS": address}
    proc = subprocess.Popen(
        [sys.executable, "-m", "raylc", "run", str(job_file), "--store", str(store), "--run-id", "k"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    killed = []
    deadline = time.time() + 300
    while not killed and time.time() < deadline and proc.poll() is None:
        pids = _infer_actor_pids(proc.pid)
        if pids and list((store / "k").glob("infer/*/*.parquet")):
            time.sleep(0.3)  # mid-stage
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:  # the pool ended first: try again (the test fails if none is left)
                    pass
        time.sleep(0.2)
    out, err = proc.communicate(timeout=900)
    assert killed, "no inference worker was found to kill"
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.ray
def test_killed_inference_worker_is_replaced_and_results_unchanged(ray_address, tmp_path):
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["inference"] = {"shard_rows": 2000, "shard_seconds": 0.5}
    spec["fit"]["uncertainty"] = "none"
    if os.environ.get("RAYLC_SLOW") != "1":  # CI: 25 problems per task of the quickstart
        spec["suite"]["problems_per_task"] = 25
    job_file = tmp_path / "quickstart.yaml"
    job_file.write_text(yaml.safe_dump(spec))
    job = load_job(job_file, {"store.path": str(tmp_path)})
    _kill_inference_workers(job_file, tmp_path, ray_address)
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    expected = stages.score(infer_frame(spans, problems, job), problems, job)
    assert pl.read_parquet(tmp_path / "k" / "score" / "observations.parquet").equals(expected)


@pytest.mark.ray
# the DOLCE variant above runs in CI; both families share the one inference path (pipeline.infer);
# RAYLC_SLOW=1 runs it
@pytest.mark.slow
def test_killed_inference_worker_in_a_length_sweep(ray_address, tmp_path):
    spec = yaml.safe_load((ROOT / "jobs" / "helmet-recall.yaml").read_text())
    spec["suite"].update({"lengths": [8192, 16384, 32768, 65536], "base_lengths": [8192], "samples_per_length": 24})
    spec["inference"] = {"shard_rows": 8, "shard_seconds": 0.5}
    spec["ray"].update({"batch_size": 4})
    job_file = tmp_path / "helmet.yaml"
    job_file.write_text(yaml.safe_dump(spec))
    _kill_inference_workers(job_file, tmp_path / "store", ray_address)
    clean = evaluate(load_job(job_file, {"store.path": str(tmp_path / "clean")}), "c", log=lambda m: None)
    for rel in ("build/samples.parquet", "score/scores.parquet"):
        assert pl.read_parquet(tmp_path / "store" / "k" / rel).equals(clean.folder.read(rel)), rel
