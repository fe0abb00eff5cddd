import subprocess
import sys
from pathlib import Path

import pytest

from raylc.spec import Job, JobSpecError, load_job

ROOT = Path(__file__).resolve().parents[1]

BAD_JOBS = {
    "unknown_key": ("name: x\nsampling:\n  stride: 3\n", "unknown key 'sampling.stride' (allowed: lengths, strategy, every, stride_fraction, rate, min_length, max_length)"),
    "unknown_section": ("name: x\nprobes: {}\n", "unknown key 'probes' (allowed: name, seed, suite, sampling, probe, scoring, fit, judge, inference, store, ray)"),
    "wrong_type": ("name: x\nsuite:\n  problems_per_task: many\n", "key 'suite.problems_per_task'"),
    "bad_backend": ("name: x\nprobe:\n  backend: gpt\n", "key 'probe.backend': 'gpt' is not one of 'simulated', 'vllm', 'openai'"),
    "backend_key": ("name: x\nprobe:\n  backend: vllm\n  model: m\n  tp: 2\n", "unknown key 'probe.tp' (allowed: backend, model, tokenizer,"),
    "nested_key": ("name: x\nprobe: {backend: openai, base_url: 'http://h', model: m, sampling: {max_tokenz: 3}}\n", "unknown key 'probe.sampling.max_tokenz' (allowed: temperature, top_p, max_tokens, stop, seed)"),
    "no_backend": ("name: x\nprobe: {model: m}\n", "missing key 'probe.backend' (one of 'simulated', 'vllm', 'openai')"),
    "missing_key": ("seed: 1\n", "missing key 'name'"),
    "invalid_yaml": ("name: x\nsuite: [unclosed\n", "invalid YAML at line"),
    "not_mapping": ("- just\n- a list\n", "must be a YAML mapping"),
    "bad_lambda": ("name: x\nsuite:\n  lambdas: [0, 2]\n", "key 'suite.lambdas'"),
}


def test_quickstart_loads_and_defaults_are_resolved():
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    assert job.name == "quickstart"
    resolved = job.resolved()
    assert set(resolved) == set(Job.model_fields)
    assert resolved["fit"]["em_steps_cow"] == 10 and resolved["fit"]["em_steps_pig"] == 5
    assert job.fingerprint() == load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": "elsewhere"}).fingerprint()
    assert job.fingerprint() != load_job(ROOT / "jobs" / "quickstart.yaml", {"seed": 5}).fingerprint()


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_job_messages_name_file_and_key(tmp_path, case):
    text, expected = BAD_JOBS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    with pytest.raises(JobSpecError) as err:
        load_job(path)
    message = str(err.value)
    assert message.startswith(str(path))
    assert expected in message
    assert "\n" not in message


def test_missing_job_file(tmp_path):
    with pytest.raises(JobSpecError, match="job file not found"):
        load_job(tmp_path / "nope.yaml")


@pytest.mark.parametrize("case", ["unknown_key", "wrong_type", "invalid_yaml", "missing_key"])
def test_cli_bad_job_exit_2_one_line_nothing_written(tmp_path, case):
    text, expected = BAD_JOBS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "run", str(path), "--store", str(store)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {path}") and expected in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not store.exists()


def test_cli_missing_job_file(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "raylc", "run", str(tmp_path / "missing.yaml"), "--store", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing.yaml'}: job file not found"
    assert not (tmp_path / "s").exists()


def test_cli_help_on_every_command():
    for args in ([], ["run"], ["report"]):
        proc = subprocess.run([sys.executable, "-m", "raylc", *args, "--help"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Usage" in proc.stdout
