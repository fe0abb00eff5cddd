"""A whole run through the OpenAI-compatible backend against a local server on 127.0.0.1."""

import subprocess
import sys
from pathlib import Path

import polars as pl
import yaml

from raycluster import free_port
from raylc.backends.testserver import SimulatedOpenAIServer, backend_for_job
from raylc.pipeline import stages
from raylc.pipeline.runner import run_job
from raylc.spec import load_job, parse_job

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"problems_per_task": 8, "max_units": 80}


def _jobs(tmp_path, base_url):
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"].update(SMALL)
    simulated = parse_job(spec)
    spec["probe"] = {"backend": "openai", "base_url": base_url, "model": "simulated", "mode": "completions",
                     "concurrency": 4, "max_retries": 10, "backoff_s": 0.01}
    spec["store"] = {"path": str(tmp_path / "store")}
    spec["ray"] = {"actors": 1, "actor_num_cpus": 0.5, "batch_size": 64, "no_progress_timeout_s": 300}
    path = tmp_path / "http.yaml"
    path.write_text(yaml.safe_dump(spec))
    return simulated, path


def test_run_completes_through_30_percent_503s(ray_session, tmp_path):
    probe_job = load_job(ROOT / "jobs" / "quickstart.yaml", {f"suite.{k}": v for k, v in SMALL.items()})
    with SimulatedOpenAIServer(backend_for_job(probe_job), fail_rate=0.3, seed=1) as server:
        simulated, job_file = _jobs(tmp_path, server.base_url)
        run = run_job(load_job(job_file), "http", log=lambda m: None)
        stats = dict(server.stats)
    assert stats["injected_failures"] > 0.2 * stats["requests"]
    problems = stages.build(simulated)
    spans = stages.sample(problems, simulated)
    expected = stages.score(stages.infer(spans, problems, simulated), problems, simulated)
    got = pl.read_parquet(Path(run.store.root, "http", "score", "observations.parquet"))
    assert got.equals(expected)
    infer = pl.read_parquet(f"{run.store.root}/http/infer/**/*.parquet", hive_partitioning=True)
    assert infer["error"].null_count() == infer.height == spans.height
    assert (infer["prompt_tokens"] > 0).all()
    assert run.manifest["stages"]["infer"]["rows"]["errors"] == 0


def test_endpoint_down_is_one_line_and_writes_no_shard(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    _, job_file = _jobs(tmp_path, url)
    proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(job_file), "--run-id", "down"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and url in last and "Traceback" not in proc.stderr
    assert not list((tmp_path / "store" / "down").glob("infer/**/*.parquet"))


def test_vllm_without_gpus_fails_fast_in_one_line(tmp_path):
    job_file = tmp_path / "vllm.yaml"
    job_file.write_text(yaml.safe_dump({
        "name": "v", "suite": {"problems_per_task": 2, "max_units": 60},
        "probe": {"backend": "vllm", "model": "some/model"}, "store": {"path": str(tmp_path / "s")},
        "ray": {"no_progress_timeout_s": 60},
    }))
    env = {k: v for k, v in __import__("os").environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(job_file)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: probe.backend vllm needs 1 GPU(s) per replica") and "Traceback" not in proc.stderr


def test_root_cause_is_the_innermost_error():
    from raylc.pipeline.ray_exec import root_cause

    try:
        try:
            raise ImportError("vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine")
        except ImportError as inner:
            raise RuntimeError("UDF failed to process a data block.\nmore lines") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ImportError: vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine"
