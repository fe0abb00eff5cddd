"""A whole run through the OpenAI-compatible backend against a local server on 127.0.0.1."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml
from doubles.openai_server import SimulatedOpenAIServer, backend_for_job
from in_process import infer_frame
from raycluster import free_port

from raylc.dolce import stages
from raylc.evaluate import evaluate
from raylc.run.errors import InferenceFailed
from raylc.spec import load_job, parse_job

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"problems_per_task": 8, "max_units": 80}
TINY = {"problems_per_task": 3, "min_units": 40, "max_units": 50}


def _jobs(tmp_path, base_url, suite=SMALL):
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"].update(suite)
    spec["fit"]["uncertainty"] = "none"  # the point fit: these tests are about the HTTP backend, not the posterior
    simulated = parse_job(spec)
    spec["probe"] = {"backend": "openai", "base_url": base_url, "model": "simulated", "mode": "completions",
                     "concurrency": 4, "max_retries": 10, "backoff_s": 0.01}
    spec["store"] = {"path": str(tmp_path / "store")}
    spec["ray"] = {"actors": 1, "actor_num_cpus": 0.5, "batch_size": 64, "no_progress_timeout_s": 300}
    path = tmp_path / "http.yaml"
    path.write_text(yaml.safe_dump(spec))
    return simulated, path


@pytest.mark.ray
def test_run_completes_through_30_percent_503s(ray_session, tmp_path):
    probe_job = load_job(ROOT / "jobs" / "quickstart.yaml", {f"suite.{k}": v for k, v in SMALL.items()})
    with SimulatedOpenAIServer(backend_for_job(probe_job), fail_rate=0.3, seed=1) as server:
        simulated, job_file = _jobs(tmp_path, server.base_url)
        run = evaluate(load_job(job_file), "http", log=lambda m: None)
        stats = dict(server.stats)
    assert stats["injected_failures"] > 0.2 * stats["requests"]
    problems = stages.build(simulated)
    spans = stages.sample(problems, simulated)
    expected = stages.score(infer_frame(spans, problems, simulated), problems, simulated)
    got = pl.read_parquet(Path(run.folder.root, "http", "score", "observations.parquet"))
    assert got.equals(expected)
    infer = pl.read_parquet(f"{run.folder.root}/http/infer/**/*.parquet", hive_partitioning=True)
    assert infer["error"].null_count() == infer.height == spans.height
    assert (infer["prompt_tokens"] > 0).all()
    assert run.manifest.stages["infer"].rows["errors"] == 0


def _expected_observations(simulated):
    problems = stages.build(simulated)
    spans = stages.sample(problems, simulated)
    return spans, stages.score(infer_frame(spans, problems, simulated), problems, simulated)


@pytest.mark.ray
def test_null_replies_are_errors_counted_and_retried_on_resume(ray_session, tmp_path):
    """Half the replies ``content: null`` (content_filter): the run fails on the error budget
    (it used to exit 0 with errors=0), and the resumed run re-sends exactly those requests."""
    probe_job = load_job(ROOT / "jobs" / "quickstart.yaml", {f"suite.{k}": v for k, v in TINY.items()})

    def sent(since: int = 0, null: bool = False) -> Counter:  # completion requests, by body
        return Counter(json.dumps(r["body"], sort_keys=True) for r in server.requests[since:]
                       if r["path"].rstrip("/").endswith("completions") and (r["null"] or not null))

    with SimulatedOpenAIServer(backend_for_job(probe_job), null_rate=0.5, seed=5, record=True) as server:
        simulated, job_file = _jobs(tmp_path, server.base_url, TINY)
        job = load_job(job_file)
        with pytest.raises(InferenceFailed) as err:
            evaluate(job, "nulls", log=lambda m: None)
        nulls, failed, seen = server.stats["null_replies"], sent(null=True), len(server.requests)
        spans, expected = _expected_observations(simulated)
        assert sent().total() == spans.height and failed.total() == nulls
        assert 0.3 * spans.height < nulls < 0.7 * spans.height
        msg = str(err.value)
        assert f"{nulls} of {spans.height} requests failed (allowed: 0.0%)" in msg and "\n" not in msg
        assert f"{server.base_url}/completions: empty completion (content null, finish_reason content_filter" in msg
        infer = pl.read_parquet(f"{tmp_path}/store/nulls/infer/**/*.parquet", hive_partitioning=True)
        failed_rows = infer.filter(pl.col("error").is_not_null())
        assert failed_rows.height == nulls and failed_rows["completion"].null_count() == nulls
        assert (failed_rows["finish_reason"] == "content_filter").all()

        server.null_rate = 0.0  # the filter relents: resume retries the failed requests only
        run = evaluate(job, "nulls", log=lambda m: None)
        resent = sent(seen)
        # each failed request again, and nothing else: a request the client sent twice (a connection
        # reset, ci54) is one of them again, not a request that had an answer
        assert not failed - resent and set(resent) <= set(failed), (failed - resent, set(resent) - set(failed))
    assert run.manifest.stages["infer"].rows["errors"] == 0
    assert pl.read_parquet(Path(run.folder.root, "nulls", "score", "observations.parquet")).equals(expected)


@pytest.mark.ray
def test_every_reply_null_fails_in_one_line(ray_session, tmp_path):
    """Every reply null: ``raylc run`` exits 1 with one line on the error budget, no traceback
    (the fit used to crash on an empty observation table)."""
    with SimulatedOpenAIServer(null_rate=1.0) as server:
        _, job_file = _jobs(tmp_path, server.base_url, TINY)
        env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
        proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(job_file), "--run-id", "allnull"],
                              capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    stored = pl.read_parquet(tmp_path / "store" / "allnull" / "infer" / "**" / "*.parquet")
    n = stored["request_id"].n_unique()  # the server may count one more: a request the client sent
    assert stored["error"].null_count() == 0 and n <= server.stats["requests"]  # again (a reset, ci56)
    assert last.startswith("error: ") and f"{n} of {n} requests failed" in last
    assert "empty completion (content null, finish_reason content_filter" in last
    assert not (tmp_path / "store" / "allnull" / "fits").exists()


def test_endpoint_down_is_one_line_and_writes_no_shard(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    _, job_file = _jobs(tmp_path, url)
    proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(job_file), "--run-id", "down"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and url in last and "Traceback" not in proc.stderr
    assert not list((tmp_path / "store" / "down").glob("infer/**/*.parquet"))


@pytest.mark.ray
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
    assert last.startswith("error: each vLLM engine actor needs ") and "Traceback" not in proc.stderr
    assert "GPU 1 on one node; the Ray cluster's largest node has" in last and "probe.device: cpu" in last


def test_root_cause_is_the_innermost_error():
    from raylc.run.session import root_cause

    try:
        try:
            raise ImportError("vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine")
        except ImportError as inner:
            raise RuntimeError("UDF failed to process a data block.\nmore lines") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ImportError: vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine"
