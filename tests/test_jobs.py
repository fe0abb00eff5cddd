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
