"""The inference pipeline (:mod:`raylc.run.pipeline`) on the vLLM backend's stages end to end
through Ray Data, against the timed vLLM 0.33 double (``tests/doubles``): prepare actors
tokenize, an engine actor drives ``AsyncLLM``, shards resume; and the Ray session's import path."""

import json
import os
import time
from pathlib import Path

import polars as pl
import pytest
from doubles.model_dir import make_model_dir

from raylc.evaluate import evaluate
from raylc.run.errors import InferenceFailed
from raylc.spec import Job

pytestmark = pytest.mark.ray

PLANTED = {"kind": "planted", "problems_per_task": 3, "min_units": 20, "max_units": 40, "lambdas": [1, 5], "ks": [1, 2]}
FAST = {"prefill_tokens_per_s": 5e6, "decode_step_s": 0.0005}


def _job(model: Path, store: Path, suite=None, **probe) -> Job:
    return Job(
        name="engine", suite=suite or PLANTED, sampling={"lengths": [0, 1, 5, "L"]},
        probe={"backend": "vllm", "model": str(model), "max_model_len": 8192, "chat_template": False,
               "sampling": {"max_tokens": 8}, "max_concurrent_batches": 2, **probe},
        store={"path": str(store)}, ray={"batch_size": 16, "actor_num_cpus": 0.25},
    )


def _shards(run_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(run_dir / "infer" / "**" / "*.parquet", hive_partitioning=True)


def _stats(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("stats-*.json"))]


def test_dolce_run_on_the_engine_double(ray_session, tmp_path):
    stats = tmp_path / "stats"
    model = make_model_dir(tmp_path / "m", double={**FAST, "stats_dir": str(stats)})
    run = evaluate(_job(model, tmp_path / "s"), "r", log=lambda m: None)
    shards = _shards(tmp_path / "s" / "r")
    spans = run.folder.read("sample/spans.parquet")
    assert shards.height == spans.height and shards["request_id"].n_unique() == spans.height
    assert shards["error"].null_count() == shards.height
    # metrics are on: each request has its own queued-to-last-token time, not the batch's
    assert shards["latency_s"].null_count() == 0 and shards["latency_s"].n_unique() > 1
    assert set(shards["finish_reason"]) <= {"stop", "length"} and shards["cached_tokens"].null_count() == 0
    # prefix caching: spans that share their start share a prefix, so some blocks were cached
    assert shards["cached_tokens"].sum() > 0
    engines = _stats(stats)
    assert len(engines) == 1 and engines[0]["requests"] == spans.height
    assert not (tmp_path / "s" / "r" / "requests").exists()  # the request table is removed
    assert run.manifest.stages["report"].status == "done"


def test_length_sweep_on_the_engine_double(ray_session, tmp_path):
    model = make_model_dir(tmp_path / "m", double=FAST)
    suite = {"kind": "helmet_recall", "tasks": ["json_kv", "mk_needle_uuid"], "lengths": [1024, 2048],
             "base_lengths": [1024], "samples_per_length": 3}
    run = evaluate(_job(model, tmp_path / "s", suite=suite), "r", log=lambda m: None)
    shards = _shards(tmp_path / "s" / "r")
    samples = run.folder.read("build/samples.parquet")
    assert shards.height == samples.height and shards["latency_s"].null_count() == 0
    # each request's own max_tokens (HELMET's per-task generation lengths) reached the engine
    sent = shards.join(samples.select("task", "sample_id", "length", "max_tokens"), on=["task", "sample_id", "length"])
    assert (sent["generated_tokens"] <= sent["max_tokens"]).all() and (sent["max_tokens"] > 8).all()
    assert (sent["finish_reason"] == "length").any() == (sent["generated_tokens"] == sent["max_tokens"]).any()
    assert run.folder.read("score/scores.parquet").height == shards.height


def test_engine_that_fails_to_start_fails_the_run_in_one_line(ray_session, tmp_path):
    reason = "CUDA out of memory. Tried to allocate 20.00 GiB (double)"
    model = make_model_dir(tmp_path / "m", double={**FAST, "fail_on_init": reason})
    t0 = time.monotonic()
    with pytest.raises(InferenceFailed) as err:
        evaluate(_job(model, tmp_path / "s"), "r", log=lambda m: None)
    assert time.monotonic() - t0 < 300  # not a hang (a vLLM stream has no no-progress limit); minutes under load
    message = str(err.value)
    assert "\n" not in message and reason in message and "failed to start" in message


def test_engine_that_dies_is_restarted_and_the_run_completes(ray_session, tmp_path):
    stats = tmp_path / "stats"
    model = make_model_dir(tmp_path / "m", double={**FAST, "die_after_requests": 200, "stats_dir": str(stats)})
    # CPU engines (probe.device: cpu), the path of vLLM's CPU build
    run = evaluate(_job(model, tmp_path / "s", max_engine_restarts=5, device="cpu", engine_num_cpus=0.25), "r",
                   log=lambda m: None)
    shards = _shards(tmp_path / "s" / "r")
    spans = run.folder.read("sample/spans.parquet")
    assert shards["request_id"].n_unique() == spans.height and shards["error"].null_count() == shards.height
    assert len(_stats(stats)) >= 2  # more than one engine served the run


def test_engine_restarts_are_bounded(ray_session, tmp_path):
    model = make_model_dir(tmp_path / "m", double={**FAST, "die_after_requests": 5})
    t0 = time.monotonic()
    with pytest.raises(InferenceFailed) as err:
        evaluate(_job(model, tmp_path / "s", max_engine_restarts=1, device="cpu", engine_num_cpus=0.25), "r",
                 log=lambda m: None)
    message = str(err.value)
    assert time.monotonic() - t0 < 400 and "\n" not in message  # not a hang; minutes under load
    assert ("EngineRestartsExceeded: the vLLM engine died 2 times, "
            "more than probe.max_engine_restarts = 1 allows") in message
    assert "die_after_requests=5 reached" in message  # the core's own reason, from its traceback


def test_a_folder_holding_another_raylc_is_kept_off_the_workers_import_path(tmp_path, monkeypatch):
    """Ray puts the driver's working folder on every worker's import path; a folder holding
    another raylc checkout (a different version) must not shadow the installed one there."""
    import raylc
    from raylc.run.session import _job_config

    (tmp_path / "raylc").mkdir()
    (tmp_path / "raylc" / "__init__.py").write_text("raise ImportError('the other checkout')\n")
    monkeypatch.chdir(tmp_path)
    paths = _job_config()["job_config"]._py_driver_sys_path
    paths.extend([str(tmp_path), "/elsewhere"])
    assert paths == ["/elsewhere"]
    monkeypatch.chdir(Path(raylc.__file__).parents[1])  # the imported checkout itself: kept
    assert _job_config() == {}


@pytest.mark.ray
def test_workers_import_the_drivers_raylc_from_a_folder_holding_another(tmp_path):
    import subprocess
    import sys

    import raylc

    (tmp_path / "raylc").mkdir()
    (tmp_path / "raylc" / "__init__.py").write_text("raise ImportError('the other checkout')\n")
    code = ("import sys; sys.path.remove('') if '' in sys.path else None\n"
            "import ray\nfrom raylc.run.session import init_ray\ninit_ray(None, 1)\n"
            "print(ray.get(ray.remote(lambda: __import__('raylc').__file__).remote()))\nray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == raylc.__file__


def test_concurrent_batches_keep_twice_max_num_seqs_in_flight():
    from raylc.backends.config import VLLMProbe
    from raylc.backends.vllm_engine import concurrent_batches

    probe = VLLMProbe(backend="vllm", model="m")
    assert concurrent_batches(probe, 256) == 8 and concurrent_batches(probe, 64) == 32  # 2 x 1,024 (GPU)
    cpu = probe.model_copy(update={"device": "cpu"})
    assert concurrent_batches(cpu, 64) == 8 and concurrent_batches(cpu, 1000) == 2  # 2 x 256; at least 2
    assert concurrent_batches(probe.model_copy(update={"max_num_seqs": 100}), 64) == 4  # ceil(200 / 64)
    assert concurrent_batches(probe.model_copy(update={"max_concurrent_batches": 3}), 64) == 3


def _streamed(job: Job, frame: pl.DataFrame, where: Path, ledger=None) -> pl.DataFrame:
    """``frame``'s request rows through ``job``'s pipeline, from request files of a run folder."""
    from raylc.run import pipeline
    from raylc.run.folder import RunFolder

    folder = RunFolder(str(where), "direct")
    source = pipeline.RequestFiles(folder, folder.write_requests([frame], job.ray.batch_size))
    return pl.concat(list(pipeline.stream(source, job, ledger=ledger)))


def test_the_ledger_records_the_engines_busy_window(ray_session, tmp_path):
    import ray

    from raylc.run import pipeline

    model = make_model_dir(tmp_path / "m", double=FAST)
    # a CPU engine (probe.device: cpu)
    job = _job(model, tmp_path / "s", device="cpu", engine_num_cpus=0.25)
    texts = [f"Document {i}. " * (5 + i % 7) for i in range(40)]
    frame = pl.DataFrame({"row": range(40), "head": "", "context": texts, "tail": ""})
    ledger = ray.remote(num_cpus=0)(pipeline.EngineLedger).remote()
    t0 = time.time()
    out = _streamed(job, frame, tmp_path / "direct", ledger)
    t1 = time.time()
    for _ in range(50):  # the engine's last record is fire and forget: it may land just after the stream ends
        summary = ray.get(ledger.summary.remote(), timeout=60)
        if summary["requests"] == 40:
            break
        time.sleep(0.2)
    assert out.height == 40 and summary["requests"] == 40 and summary["deaths"] == 0
    assert summary["batches"] >= 3  # batch_size 16
    assert len(summary["ready_at"]) == 1
    assert t0 <= summary["ready_at"][0] <= summary["first_in"] <= summary["last_out"] <= t1


def _alive_pool_actors() -> list[str]:
    """Live actors of an engine pipeline's pools (Ray Data names them
    ``MapWorker(MapBatches(<UDF class>))``), from the GCS actor table (no dashboard needed)."""
    import ray

    return [a["ActorClassName"] for a in ray._private.state.actors().values() if a.get("State") == "ALIVE"
            and any(f"({name})" in a["ActorClassName"] for name in ("PrepareActor", "EngineActor"))]


def test_a_failed_run_releases_its_engine_actors_and_the_next_run_gets_the_gpu(ray_session, tmp_path):
    """In one long-lived Ray session, an engine that failed to start leaves no engine actor (and
    no reserved GPU) behind its failed run: the next GPU engine of the session is placed."""
    import ray

    failing = make_model_dir(tmp_path / "bad", double={**FAST, "fail_on_init": "RuntimeError: no engine (double)"})
    with pytest.raises(InferenceFailed, match="no engine"):
        evaluate(_job(failing, tmp_path / "s"), "bad", log=lambda m: None)
    deadline = time.monotonic() + 120  # ray.kill returns before the GCS marks the actor dead; slower under load
    while time.monotonic() < deadline:
        if not _alive_pool_actors() and ray.available_resources().get("GPU", 0) == 1:
            break
        time.sleep(0.2)
    assert _alive_pool_actors() == [] and ray.available_resources().get("GPU", 0) == 1
    good = _job(make_model_dir(tmp_path / "good", double=FAST), tmp_path / "s")
    frame = pl.DataFrame({"row": range(20), "head": "", "context": [f"Document {i}." for i in range(20)], "tail": ""})
    out = _streamed(good, frame, tmp_path / "direct")
    assert out.height == 20 and out["error"].null_count() == 20
