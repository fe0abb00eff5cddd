"""raylc's vLLM engine wrapper (``raylc/backends/vllm_engine.py``) against the vLLM double, in
process: start-up failures in one line with the engine core's reason, one bad request kept
from failing its batch, engine arguments passed through and checked, a quiet shutdown, and
the reason read from an engine core's log. ``make test-real`` repeats these against vLLM's CPU build."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest
from doubles import DOUBLES_DIR, vllm_double
from doubles.model_dir import make_model_dir

from raylc.backends.base import BackendUnavailable
from raylc.backends.config import VLLMProbe
from raylc.backends.vllm_engine import VLLMEngine, check_engine_args, reason_in

FAST = {"prefill_tokens_per_s": 1e6, "decode_step_s": 0.0002}


@pytest.fixture(scope="module")
def vllm():
    with vllm_double() as module:
        yield module


def _probe(tmp_path, double=None, **kw) -> VLLMProbe:
    folder = make_model_dir(tmp_path / "m", double={**FAST, **(double or {})})
    return VLLMProbe(**{"backend": "vllm", "model": str(folder), "max_model_len": 4096, "chat_template": False, **kw})


def _generate(engine, ids, limits):
    return asyncio.run(engine.generate(ids, limits))


def test_a_start_up_failure_is_one_line_with_the_cores_reason_and_its_log_apart(vllm, tmp_path, capfd):
    probe = _probe(tmp_path, {"kv_cache_tokens": 1000})  # smaller than max_model_len: the core refuses to start
    with pytest.raises(BackendUnavailable) as err:
        VLLMEngine(probe)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"vLLM engine for {probe.model} failed to start: ValueError: "
                                                      "To serve at least one request with the model's max seq len")
    assert "Engine core initialization failed" not in message  # vLLM's own words say only "see above"
    log = message.split("(vLLM's start-up log: ", 1)[1].split(" on ", 1)[0]
    text = open(log).read()
    assert "Traceback (most recent call last):" in text and "EngineCore failed to start." in text
    out, errs = capfd.readouterr()
    assert "Traceback" not in out + errs and "EngineCore" not in out + errs  # held back, not on the console


def test_one_refused_request_is_an_error_row_and_the_batch_goes_on(vllm, tmp_path):
    engine = VLLMEngine(_probe(tmp_path))
    try:
        good, refused, empty = _generate(engine, [[5, 6, 7], [5, 6, 8], []], [4, 0, 4])
    finally:
        engine.shutdown()
    assert good["error"] is None and good["generated_tokens"] == 4 and good["finish_reason"] == "length"
    assert refused["completion"] is None and refused["error"].startswith("vLLM refused the request: ")
    assert "max_tokens" in refused["error"] and empty["error"].startswith("vLLM refused the request: ")


def test_engine_arguments_are_checked_and_passed_through(vllm, tmp_path):
    probe = _probe(tmp_path, engine_args={"enforce_eager": True, "block_size": 32})
    engine = VLLMEngine(probe)
    try:
        config = engine.engine.vllm_config  # the double keeps block_size, not enforce_eager, in its config
        assert config.cache_config.block_size == 32
        assert config.scheduler_config.max_num_seqs == 1024  # the offline LLM class's default (H100), not 128
    finally:
        engine.shutdown()
    with pytest.raises(BackendUnavailable, match=r"not started: probe.engine_args.enforce_eagr is not a vLLM engine "
                                                 r"argument .*did you mean 'enforce_eager'\?\)$"):
        VLLMEngine(_probe(tmp_path, engine_args={"enforce_eagr": True}))
    with pytest.raises(ValueError, match="did you mean 'block_size'"):
        check_engine_args(_probe(tmp_path, engine_args={"blok_size": 1}), vllm=vllm)


def test_a_successful_engine_shuts_down_without_a_traceback_or_an_error_line(vllm, tmp_path, capfd):
    engine = VLLMEngine(_probe(tmp_path))
    results = _generate(engine, [[5, 6, 7]] * 3, [3, 3, 3])
    engine.shutdown()
    engine.shutdown()  # idempotent
    assert all(r["error"] is None for r in results)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ERROR" not in out + err


def test_reason_in_takes_the_error_a_wrapper_wraps_and_ignores_colour():
    log = textwrap.dedent("""\
        (Worker pid=1) ERROR [x.py:1] \x1b[31mValueError: Available memory on node 0 is less than asked\x1b[0m
        (EngineCore pid=2) ERROR [core.py:1] EngineCore failed to start.
        RuntimeError: Worker failed with error 'Available memory on node 0 is less than asked', see above
        """)
    assert reason_in(log) == "ValueError: Available memory on node 0 is less than asked"
    assert reason_in("torch.OutOfMemoryError: CUDA out of memory\n") == "OutOfMemoryError: CUDA out of memory"
    assert reason_in("INFO all good\nWARNING: nothing raised\n") is None


def test_output_tail_holds_a_start_up_back_and_keeps_a_childs_output(tmp_path):
    """In a subprocess (fds 1 and 2 are its own): what a child writes while held goes to the
    log on divert; after release, output is forwarded and still kept for reasons."""
    code = textwrap.dedent("""\
        import subprocess, sys, time
        from raylc.backends.vllm_engine import OutputTail
        tail = OutputTail()
        subprocess.run([sys.executable, "-c",
                        "import sys; print('child out'); sys.stderr.write('KeyError: boom\\\\n')"])
        tail.restore()
        tail.drained(30)  # the child has exited: the pump reads the pipe to its end (no race with a sleep)
        path = tail.divert()
        print("diverted", open(path).read().split())
        tail = OutputTail()
        tail.restore()
        tail.release()
        print("released", tail.text() == "")
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([DOUBLES_DIR, *sys.path])})
    assert out.returncode == 0, out.stderr
    assert "child out" not in out.stdout.split("diverted")[0] and "KeyError" not in out.stderr
    assert "diverted ['child', 'out', 'KeyError:', 'boom']" in out.stdout and "released True" in out.stdout
