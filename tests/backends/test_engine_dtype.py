"""``probe.dtype: auto`` on ``device: cpu`` (:func:`raylc.backends.vllm_engine.engine_dtype`):
bfloat16 where /proc/cpuinfo flags native bfloat16 (avx512_bf16, amx_bf16), else float32; the
engine gets the resolved dtype and says once on standard error which it chose and why."""

from __future__ import annotations

import pytest
from doubles import vllm_double
from doubles.model_dir import make_model_dir

from raylc.backends import vllm_engine
from raylc.backends.config import VLLMProbe
from raylc.backends.vllm_engine import VLLMEngine, engine_dtype, engine_kwargs

#: the shape of a real /proc/cpuinfo: one block per logical CPU, Intel's "vmx flags" line beside "flags"
XEON = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni
vmx flags\t: vnmi preemption_timer avx512_bf16 amx_bf16
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni
"""
EPYC = XEON.replace("avx512_vnni\n", "avx512_vnni avx512_bf16\n")
SAPPHIRE = XEON.replace("avx512_vnni\n", "avx512_vnni amx_bf16 amx_tile amx_int8\n")
BOTH = XEON.replace("avx512_vnni\n", "avx512_vnni avx512_bf16 amx_bf16\n")


def _cpu(**kw) -> VLLMProbe:
    return VLLMProbe(**{"backend": "vllm", "model": "m", "device": "cpu", **kw})


@pytest.mark.parametrize(("cpuinfo", "dtype", "because"), [
    (XEON, "float32", "no avx512_bf16 or amx_bf16"),  # avx512f alone: bf16 is emulated
    (EPYC, "bfloat16", "this CPU has avx512_bf16)"),
    (SAPPHIRE, "bfloat16", "this CPU has amx_bf16)"),
    (BOTH, "bfloat16", "this CPU has avx512_bf16 and amx_bf16)"),
    ("", "float32", "no avx512_bf16 or amx_bf16"),  # no /proc/cpuinfo (macOS) or an empty one
    ("Features\t: fp asimd bf16\n", "float32", "no avx512_bf16"),  # an ARM CPU's feature line is not read
])
def test_auto_on_cpu_is_the_dtype_the_cpu_computes_natively(cpuinfo, dtype, because):
    got, why = engine_dtype(_cpu(), cpuinfo)
    assert got == dtype and why.startswith(f"probe.dtype auto on CPU: {dtype} (") and because in why


@pytest.mark.parametrize("probe", [_cpu(dtype="bfloat16"), _cpu(dtype="float16"),
                                   VLLMProbe(backend="vllm", model="m"),  # a GPU keeps vLLM's own auto
                                   VLLMProbe(backend="vllm", model="m", dtype="float32")])
def test_a_set_dtype_or_a_gpu_is_left_alone(probe):
    assert engine_dtype(probe, XEON) == (probe.dtype, None)
    assert engine_dtype(probe, EPYC) == (probe.dtype, None)


@pytest.mark.parametrize(("cpuinfo", "dtype"), [(XEON, "float32"), (EPYC, "bfloat16")])
def test_the_engine_runs_in_the_resolved_dtype_and_says_why(cpuinfo, dtype, tmp_path, monkeypatch, capfd):
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo)
    monkeypatch.setattr(vllm_engine, "CPUINFO", str(info))
    folder = make_model_dir(tmp_path / "m", double={"prefill_tokens_per_s": 1e6, "decode_step_s": 0.0002})
    probe = _cpu(model=str(folder), max_model_len=4096, chat_template=False)
    assert engine_kwargs(probe)["dtype"] == dtype
    with vllm_double():
        engine = VLLMEngine(probe)
        try:
            assert engine.engine.vllm_config.model_config.dtype == dtype
        finally:
            engine.shutdown()
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "probe.dtype" in ln]
    assert lines == [f"raylc: {engine_dtype(probe, cpuinfo)[1]}"] and f"auto on CPU: {dtype} (" in lines[0]
