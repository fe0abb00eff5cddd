"""Every shipped job file loads, and the GPU job maps onto vLLM's engine arguments."""

from pathlib import Path

import pytest

from raylc.backends.vllm_engine import actor_options, engine_kwargs, sampling_kwargs
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "jobs").glob("*.yaml")), ids=lambda p: p.name)
def test_job_files_load(path):
    job = load_job(path)
    assert job.name


def test_vllm_job_engine_arguments():
    job = load_job(ROOT / "jobs" / "dolce-vllm.yaml")
    kw = engine_kwargs(job.probe)
    assert kw["max_model_len"] == 32768 and kw["enable_prefix_caching"] and kw["enable_chunked_prefill"]
    assert "hf_overrides" not in kw  # the model's native window: no YaRN
    assert kw["distributed_executor_backend"] == "uni"
    assert actor_options(job.probe, verbose=True) == {"num_gpus": 1}
    assert sampling_kwargs(job.probe.generation) == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16}


def test_vllm_128k_job_engine_arguments():
    job = load_job(ROOT / "jobs" / "helmet-recall-vllm-128k.yaml")
    kw = engine_kwargs(job.probe)
    assert kw["max_model_len"] == 131072 and max(job.suite.lengths) == 131072
    rope = kw["hf_overrides"]["rope_scaling"]
    assert rope["rope_type"] == "yarn" and rope["factor"] == 4.0 and rope["original_max_position_embeddings"] == 32768
    assert kw["hf_overrides"]["max_position_embeddings"] == 131072  # vLLM 0.33 does not apply YaRN's factor itself
    assert job.probe.truncation == "end" and job.store.path.startswith("s3://CHANGE-ME/")


# ---- the example jobs of docs/backends.md ("Example jobs"): each passes `raylc check` ----------------

#: a `raylc check` in this process without the Hub or the machine's RAY_ADDRESS
OFFLINE = {"HF_HUB_OFFLINE": "1", "RAY_ADDRESS": None, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": None}


def _explained(path: Path, keys: tuple[str, ...]) -> None:
    """Each of ``keys`` of the probe section follows a comment line that names it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for key in keys:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {key}:"))
        assert lines[at - 1].lstrip().startswith("#"), key


def test_the_openai_example_passes_raylc_check_against_the_test_server(tmp_path):
    """jobs/openai-endpoint.yaml, its base_url pointed at the OpenAI-compatible test server (the
    only change): the endpoint answers, serves the job's model, and the prompts fit its window;
    with a key in the variable api_key_env names, the server gets that key."""
    from cli_runner import raylc
    from doubles.openai_server import SimulatedOpenAIServer

    path = ROOT / "jobs" / "openai-endpoint.yaml"
    job = load_job(path)
    assert (job.probe.backend, job.probe.base_url, job.probe.mode, job.probe.api_key_env) == (
        "openai", "http://127.0.0.1:8000/v1", "chat", None)
    _explained(path, ("base_url", "api_key_env", "mode"))
    with SimulatedOpenAIServer(model=job.probe.model, record=True) as server:
        proc = raylc("check", path, "--set", f"probe.base_url={server.base_url}", env=OFFLINE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [f"probe.base_url: {server.base_url} (answered GET /models)",
                         f"probe.model: {job.probe.model} (listed by /models)",
                         "probe.max_model_len: 32768 (server's window: not reported; prompts are fitted client-side)"]
    assert lines[3].startswith("longest prompt: ") and "<= probe.max_model_len 32768: fits (192 requests" in lines[3]
    assert [r["path"] for r in server.requests] == ["/v1/models"]  # checked, nothing generated
    with SimulatedOpenAIServer(model=job.probe.model, api_key="sk-example", record=True) as server:
        keyed = raylc("check", path, "--set", f"probe.base_url={server.base_url}", "--set",
                      "probe.api_key_env=RAYLC_EXAMPLE_KEY", env={**OFFLINE, "RAYLC_EXAMPLE_KEY": "sk-example"},
                      cwd=tmp_path)
        keyless = raylc("check", path, "--set", f"probe.base_url={server.base_url}", env=OFFLINE, cwd=tmp_path)
    assert keyed.returncode == 0 and server.requests[0]["headers"]["Authorization"] == "Bearer sk-example"
    assert keyless.returncode == 2 and keyless.stderr.count("\n") == 1 and "401" in keyless.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_the_one_gpu_128k_example_passes_raylc_check_offline(tmp_path):
    """jobs/longbench-v2-vllm-1gpu-128k.yaml: one engine on one GPU at a 131072-token window,
    checked against the model's shipped config.json: 7 GiB of KV cache per sequence, which an
    80 GiB GPU holds and a 16 GiB one, full with the weights, does not."""
    from cli_runner import raylc

    path = ROOT / "jobs" / "longbench-v2-vllm-1gpu-128k.yaml"
    job = load_job(path)
    assert (job.probe.tensor_parallel_size, job.probe.replicas, job.probe.max_model_len) == (1, 1, 131072)
    assert actor_options(job.probe, verbose=True)["num_gpus"] == 1
    proc = raylc("check", path, "--gpu-memory-gib", 80, env=OFFLINE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "derived max length (vLLM 0.33.0): 131072 (max_position_embeddings; yarn factor not applied)" in proc.stdout
    assert "7.00 GiB per 131072-token sequence" in proc.stdout and "sequences per GPU: <= 8 of 131072" in proc.stdout
    small = raylc("check", path, "--gpu-memory-gib", 16, env=OFFLINE, cwd=tmp_path)
    assert small.returncode == 2 and small.stderr.count("\n") == 1, small
    assert small.stderr.startswith(f"error: {path}: probe.max_model_len 131072: one sequence needs 7.00 GiB")


def test_the_hugging_face_id_example_passes_raylc_check_against_a_hub(tmp_path):
    """jobs/dolce-layouts-hf-model.yaml names its model by its Hugging Face id alone (no
    hf_config, no local folder): `raylc check` reads config.json from the Hub (a stand-in on
    127.0.0.1 serving the model's real config.json)."""
    import json

    from doubles.hub import HubStandIn, raylc_with_hub

    path = ROOT / "jobs" / "dolce-layouts-hf-model.yaml"
    job = load_job(path)
    model = job.probe.model
    assert job.probe.hf_config is None and model.count("/") == 1 and not (ROOT / model).exists()
    config = json.loads((ROOT / "jobs" / "models" / model.split("/")[1] / "config.json").read_text())
    with HubStandIn({model: config}) as hub:
        [(code, out, err)] = raylc_with_hub(hub, [("check", path)], tmp_path / "cache", tmp_path)
    assert code == 0, err
    assert f"probe.model: {model} (config: the Hugging Face Hub)" in out
    assert "derived max length (vLLM 0.33.0): 32768" in out and "probe.max_model_len: 8192" in out
