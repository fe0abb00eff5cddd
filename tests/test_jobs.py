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
    assert kw["max_model_len"] == 131072 and kw["enable_prefix_caching"] and kw["enable_chunked_prefill"]
    assert kw["hf_overrides"]["rope_scaling"]["rope_type"] == "yarn"
    assert kw["distributed_executor_backend"] == "uni"
    assert actor_options(job.probe) == {"num_gpus": 1}
    assert sampling_kwargs(job.probe.sampling) == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16}
