"""raylc.backends.preflight / ``raylc check``: vLLM 0.33.0's start-up refusals before any GPU time.

Configs are written by the tests (shaped like Qwen2.5-7B and Llama-3.1-8B); expected numbers
are computed by hand in the comments. Nothing here contacts an address outside 127.0.0.0/8:
every test runs with HF_HUB_OFFLINE=1 except the Hub test, whose HF_ENDPOINT is a local server.
"""

import ast
import copy
import http.server
import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cli_runner import raylc
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.backends.config import VLLMProbe
from raylc.backends.preflight import (
    GPU_MEMORY_GIB,
    PreflightError,
    apply_hf_overrides,
    check_probe,
    derive_max_len,
    parameter_count,
    preflight,
    prompt_fit,
    resolve_hf_config,
    text_config,
    valid_tensor_parallel_sizes,
)
from raylc.evaluate import evaluation_for
from raylc.spec import load_job, parse_job

ROOT = Path(__file__).resolve().parents[2]
RAYLC = ROOT / ".venv" / "bin" / "raylc"
CLI = [str(RAYLC)] if RAYLC.exists() else [sys.executable, "-m", "raylc"]
GIB = 1024 ** 3

QWEN = {  # Qwen2.5-7B-Instruct's shape
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 131072, "use_sliding_window": False,
    "max_window_layers": 28, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
LLAMA = {  # Llama-3.1-8B's shape
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}
YARN4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "RAY_ADDRESS")}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


#: the same for a command run in this process (tests/cli_runner.py): jobs whose config is a local file
IN_PROCESS_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": None, "RAY_ADDRESS": None, "HF_HUB_OFFLINE": "1"}


def _probe(**kw) -> VLLMProbe:
    return VLLMProbe(**{"backend": "vllm", "model": "org/model", **kw})


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False))
    return path


def _job(config_path, suite=None, **probe):
    return parse_job({"name": "t", "suite": suite or {"problems_per_task": 2, "max_units": 60},
                      "probe": {"backend": "vllm", "model": "org/model", "hf_config": str(config_path), **probe}})


# ---- hand-computed numbers ---------------------------------------------------------------------

def test_qwen_numbers():
    r = check_probe(_probe(max_model_len=32768, dtype="bfloat16"), config=QWEN)
    assert (r.derived_max_len, r.derived_key) == (32768, "max_position_embeddings")
    assert (r.attention_heads, r.kv_heads, r.kv_heads_per_gpu, r.head_dim, r.layers) == (28, 4, 4, 128, 28)  # 3584 / 28
    assert r.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57344
    assert r.kv_bytes_per_seq == 32768 * 57344  # 1.75 GiB
    # per layer: q, o 3584^2 each, k, v 3584 x 512 each; MLP 3 x 3584 x 18944;
    # embeddings + untied head 2 x 152064 x 3584
    per_layer = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944
    assert per_layer == 29_360_128 + 203_685_888
    assert r.parameters == 28 * per_layer + 2 * 152064 * 3584 == 7_615_283_200
    assert r.weight_bytes_per_gpu == 2 * 7_615_283_200
    # one embedding matrix
    assert parameter_count({**QWEN, "tie_word_embeddings": True}) == 7_615_283_200 - 152064 * 3584
    assert not r.warnings  # use_sliding_window false: the window is off


def test_llama_numbers_and_tensor_parallel_split():
    r = check_probe(_probe(max_model_len=131072), config=LLAMA)
    assert r.derived_max_len == 131072 and r.rope_types == ("llama3",)  # llama3's factor 8 is not applied
    assert r.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert r.kv_bytes_per_seq == 16 * GIB
    assert (
        r.parameters
        == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096
        == 8_029_995_008
    )
    r2 = check_probe(_probe(max_model_len=131072, tensor_parallel_size=2), config=LLAMA)
    assert r2.kv_heads_per_gpu == 4 and r2.kv_bytes_per_token == 65536 and r2.weight_bytes_per_gpu == 8_029_995_008
    r16 = check_probe(_probe(max_model_len=131072, tensor_parallel_size=16), config=LLAMA)
    assert r16.kv_heads_per_gpu == 1 and r16.kv_bytes_per_token == 2 * 32 * 1 * 128 * 2  # 8 KV heads replicated over 16


def test_sequences_per_gpu_and_memory_refusals():
    qwen128 = dict(max_model_len=131072, hf_overrides={"rope_scaling": YARN4, "max_position_embeddings": 131072})
    # H100: 0.9 x 80 GiB - 14.18 GiB weights = 57.8 GiB; 7 GiB per 131072-token sequence -> 8
    assert check_probe(_probe(accelerator_type="H100", **qwen128), config=QWEN).sequences_per_gpu == 8
    assert check_probe(_probe(**qwen128), config=QWEN, gpu_memory_gib=80).sequences_per_gpu == 8
    # L4: 0.9 x 24 = 21.6 GiB - 14.18 = 7.42 GiB: one sequence; at 0.85: 6.22 GiB < 7 GiB: vLLM cannot start
    assert check_probe(_probe(accelerator_type="L4", **qwen128), config=QWEN).sequences_per_gpu == 1
    with pytest.raises(PreflightError) as err:
        check_probe(_probe(accelerator_type="L4", gpu_memory_utilization=0.85, **qwen128), config=QWEN)
    msg = str(err.value)
    assert msg.startswith("probe.max_model_len 131072: one sequence needs 7.00 GiB") and "L4 24 GiB" in msg
    fits = int((0.85 * 24 * GIB - 2 * 7_615_283_200) // 57344) // 16 * 16
    assert f"lower probe.max_model_len to <= {fits}" in msg and "\n" not in msg
    # Llama-3.1-8B weights (~15 GiB) on an 8 GiB P4
    with pytest.raises(PreflightError, match=r"^probe.tensor_parallel_size 1: ~15.0 GiB of weights per GPU do not fit"):
        check_probe(_probe(accelerator_type="P4", max_model_len=8192), config=LLAMA)
    r = check_probe(_probe(accelerator_type="TPU-V4", max_model_len=8192), config=LLAMA)
    assert r.sequences_per_gpu is None and "--gpu-memory-gib" in r.warnings[0]


def test_gpu_table_uses_ray_accelerator_names():
    spec = importlib.util.find_spec("ray")
    source = (Path(spec.origin).parent / "util" / "accelerators" / "accelerators.py").read_text()
    names = {node.value.value for node in ast.parse(source).body
             if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}
    assert set(GPU_MEMORY_GIB) <= names and {"H100", "A100-80G", "A100-40G", "L4", "A10G", "L40S"} <= set(
        GPU_MEMORY_GIB
    )


# ---- the length limit ---------------------------------------------------------------------------

@pytest.mark.parametrize("config, overrides, limit, key", [
    (QWEN, {}, 32768, "max_position_embeddings"),
    (QWEN, {"rope_scaling": YARN4}, 32768, "max_position_embeddings"),  # YaRN's factor is not applied
    (QWEN, {"rope_scaling": YARN4, "max_position_embeddings": 131072}, 131072, "max_position_embeddings"),
    (QWEN, {"rope_parameters": YARN4, "max_position_embeddings": 131072}, 131072, "max_position_embeddings"),
    (QWEN, {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 131072, "max_position_embeddings"),
    (QWEN, {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 65536, "max_position_embeddings"),
    (QWEN, {"rope_scaling": {"rope_type": "linear", "factor": None}}, 32768, "max_position_embeddings"),
    (LLAMA, {}, 131072, "max_position_embeddings"),
    ({**QWEN, "rope_scaling": {"type": "linear", "factor": 2}}, {}, 65536, "max_position_embeddings"),  # legacy key
    ({**QWEN, "rope_scaling": {"type": "su", "factor": 2}}, {}, 32768, "max_position_embeddings"),  # su -> longrope
    ({"n_positions": 1024, "max_position_embeddings": 2048}, {}, 1024, "n_positions"),  # the smallest key
    ({"max_position_embeddings": 4096, "model_max_length": 8192}, {}, 8192, "model_max_length"),  # set: it wins
    ({"model_type": "gemma3_text", "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, {}, 131072, "max_position_embeddings"),
    ({"max_position_embeddings": 8192, "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {"rope_type": "default"}}},
     {}, 16384, "max_position_embeddings"),  # per layer type: the factor carries over the default entry
    ({"text_config": {**QWEN}, "model_type": "vl"}, {"text_config": {"max_position_embeddings": 65536}},
     65536, "max_position_embeddings"),
])
def test_derived_max_len(config, overrides, limit, key):
    assert derive_max_len(text_config(apply_hf_overrides(config, overrides)))[:2] == (limit, key)


def test_no_length_key_is_unbounded_with_a_warning():
    limit, key, _ = derive_max_len({"hidden_size": 8})
    assert limit == math.inf and key is None
    r = check_probe(
        _probe(max_model_len=10 ** 6), config={k: v for k, v in QWEN.items() if k != "max_position_embeddings"}
    )
    assert r.derived_max_len is None and "takes probe.max_model_len as given" in r.warnings[0]


def test_max_model_len_above_the_limit_is_refused_in_one_line():
    with pytest.raises(PreflightError) as err:
        check_probe(
            _probe(model="Qwen/Qwen2.5-7B-Instruct", max_model_len=131072, hf_overrides={"rope_scaling": YARN4}),
            config=QWEN,
        )
    assert str(err.value) == (
        "probe.max_model_len 131072 is above the 32768 tokens vLLM 0.33.0 derives for Qwen/Qwen2.5-7B-Instruct "
        "(max_position_embeddings=32768; the yarn factor is not applied); add max_position_embeddings: 131072 to "
        "probe.hf_overrides (or lower probe.max_model_len, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    check_probe(_probe(max_model_len=32768, hf_overrides={"rope_scaling": YARN4}), config=QWEN)  # at the limit: fine


@pytest.mark.parametrize(
    "value, allowed", [("1", True), ("true", True), (" TRUE ", True), ("0", False), ("yes", False)]
)
def test_env_switch_turns_the_refusal_into_a_warning(monkeypatch, value, allowed):
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", value)  # vLLM's parse: envs.py:1115-1118
    probe = _probe(max_model_len=65536)
    if not allowed:
        with pytest.raises(PreflightError, match="probe.max_model_len 65536 is above the 32768"):
            check_probe(probe, config=QWEN)
        return
    r = check_probe(probe, config=QWEN)
    assert any("allowed because VLLM_ALLOW_LONG_MAX_MODEL_LEN is set" in w for w in r.warnings)


# ---- tensor parallelism -------------------------------------------------------------------------

def test_tensor_parallel_size_must_split_the_heads():
    with pytest.raises(PreflightError) as err:
        check_probe(_probe(max_model_len=4096, tensor_parallel_size=3), config=QWEN)
    assert str(err.value).startswith("probe.tensor_parallel_size 3 does not divide the model's 28 attention heads")
    assert str(err.value).endswith("use one of 1, 2, 4, 28")
    with pytest.raises(PreflightError, match=r"tensor_parallel_size 7 does not split the model's 4 KV heads"):
        check_probe(_probe(max_model_len=4096, tensor_parallel_size=7), config=QWEN)  # 28 % 7 == 0, 7 % 4 != 0
    assert valid_tensor_parallel_sizes(32, 8) == [1, 2, 4, 8, 16, 32]
    assert valid_tensor_parallel_sizes(28, 4) == [1, 2, 4, 28]


def test_judge_section_is_checked_and_named(tmp_path):
    cfg = _write(tmp_path / "config.json", QWEN)
    job = parse_job({"name": "t", "suite": {"problems_per_task": 2, "max_units": 60},
                     "judge": {"backend": "vllm", "model": "m", "hf_config": str(cfg), "max_model_len": 4096,
                               "tensor_parallel_size": 8}})
    with pytest.raises(PreflightError, match=r"^judge.tensor_parallel_size 8 does not divide"):
        preflight(job)


# ---- overrides as vLLM applies them ------------------------------------------------------------

def test_overrides_examples():
    out = apply_hf_overrides(QWEN, {"rope_scaling": YARN4, "max_position_embeddings": 131072})
    assert out["rope_parameters"] == YARN4 and "rope_scaling" not in out  # replaced whole: rope_theta gone
    assert out["max_position_embeddings"] == 131072 and QWEN["max_position_embeddings"] == 32768
    assert apply_hf_overrides(QWEN, {})["rope_parameters"] == {"rope_theta": 1e6, "rope_type": "default"}
    r = check_probe(_probe(max_model_len=4096, hf_overrides={"rope_scaling": YARN4}), config=QWEN)
    assert "dropping rope_theta=1000000.0" in r.warnings[0]
    kept = check_probe(
        _probe(max_model_len=4096, hf_overrides={"rope_scaling": {**YARN4, "rope_theta": 1e6}}), config=QWEN
    )
    assert not kept.warnings
    # inside a sub-config, dict values merge key by key (_update_nested), rope_scaling included
    vl = {
        "model_type": "vl",
        "text_config": copy.deepcopy(LLAMA),
        "quantization_config": {"quant_method": "fp8", "x": 1},
    }
    out = apply_hf_overrides(vl, {"text_config": {"rope_scaling": {"factor": 4.0}}, "quantization_config": {"y": 2}})
    assert out["text_config"]["rope_parameters"] == {**LLAMA["rope_scaling"], "factor": 4.0, "rope_theta": 500000.0}
    assert out["quantization_config"] == {"y": 2}  # not a sub-config: replaced


def test_dict_override_without_rope_type_or_yarn_keys_is_refused():
    with pytest.raises(PreflightError, match=r"no 'rope_type'.*vllm/config/model.py:2608"):
        check_probe(
            _probe(
                max_model_len=4096,
                hf_overrides={
                    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
                },
            ),
            config=QWEN,
        )
    with pytest.raises(PreflightError, match=r"yarn rope parameters lack original_max_position_embeddings"):
        check_probe(_probe(max_model_len=4096, hf_overrides={"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
                    config=QWEN)


def test_dtype_names_and_float16_refusals():
    with pytest.raises(PreflightError, match=r"^probe.dtype 'fp8': vLLM 0.33.0 accepts auto, half"):
        check_probe(_probe(max_model_len=4096, dtype="fp8"), config=QWEN)
    with pytest.raises(PreflightError, match=r"refuses float16 for model type 'gemma2'"):
        check_probe(_probe(max_model_len=4096, dtype="float16"), config={**QWEN, "model_type": "gemma2"})
    r = check_probe(_probe(max_model_len=4096, dtype="float32"), config=QWEN)
    assert r.dtype_bytes == 4 and r.kv_bytes_per_token == 2 * 57344
    assert check_probe(_probe(max_model_len=4096), config={**QWEN, "torch_dtype": "float32"}).dtype == "bfloat16"


NAMES = st.sampled_from(["alpha", "beta", "gamma", "delta", "max_position_embeddings", "vocab_size"])
LEAF = st.one_of(st.integers(-5, 10 ** 6), st.booleans(), st.none(), st.text(max_size=4))
# {} merges nothing
NESTED = st.recursive(LEAF, lambda inner: st.dictionaries(NAMES, inner, min_size=1, max_size=3), max_leaves=8)


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _at(d, path):
    for k in path:
        d = d[k]
    return d


@settings(max_examples=200, deadline=None)
@given(flat=st.dictionaries(NAMES, LEAF, max_size=4),
       top=st.dictionaries(NAMES, st.dictionaries(NAMES, NESTED, max_size=3), max_size=2),
       sub=st.dictionaries(NAMES, NESTED, max_size=4))
def test_overrides_property(flat, top, sub):
    """Flat values are set; a dict value for a plain key replaces it whole; a dict for a sub-config
    updates it leaf by leaf (every override leaf lands, every other original leaf survives); the
    input config is never modified (vllm/config/model.py:527-570, transformers_utils/config.py:989-991)."""
    base = {
        **QWEN,
        "alpha": {"beta": 1, "gamma": {"delta": 2}},
        "text_config": {**QWEN, "beta": {"gamma": 3}, "delta": 4},
    }
    before = copy.deepcopy(base)
    overrides = {**flat, **top, "text_config": sub}
    out = apply_hf_overrides(base, overrides)
    assert base == before
    for k, v in overrides.items():
        if k != "text_config":
            assert out[k] == v
    original = apply_hf_overrides(base, {})["text_config"]
    updates = list(_leaves(sub))
    for path, value in updates:
        assert _at(out["text_config"], path) == value
    for path, value in _leaves(original):
        if not any(path[:len(q)] == q or q[:len(path)] == path for q, _ in updates):
            assert _at(out["text_config"], path) == value


# ---- finding the config ------------------------------------------------------------------------

def test_config_sources_in_order(tmp_path, monkeypatch):
    folder = _write(tmp_path / "cfg" / "config.json", QWEN).parent
    assert resolve_hf_config(_probe(hf_config=str(folder)))[0] == QWEN  # a folder holding config.json
    assert resolve_hf_config(_probe(hf_config=str(folder / "config.json")))[0] == QWEN
    with pytest.raises(PreflightError, match=r"^probe.hf_config '.*nope.json': no such config.json"):
        resolve_hf_config(_probe(hf_config=str(tmp_path / "nope.json")))
    monkeypatch.chdir(tmp_path)  # relative: the working directory, then the job file's folder
    assert resolve_hf_config(_probe(hf_config="cfg"))[1] == "cfg/config.json"
    jobdir = tmp_path / "jobs"
    _write(jobdir / "m" / "config.json", LLAMA)
    assert resolve_hf_config(_probe(hf_config="m/config.json"), source=jobdir / "job.yaml")[0] == LLAMA
    model = _write(tmp_path / "weights" / "config.json", LLAMA).parent  # probe.model as a local folder
    assert resolve_hf_config(_probe(model=str(model)))[0] == LLAMA
    # the Hugging Face cache (its own layout), then nothing: what was tried, in one line
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--cached"
    _write(repo / "snapshots" / ("a" * 40) / "config.json", QWEN)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    config, where = resolve_hf_config(_probe(model="org/cached"))
    assert config == QWEN and where.startswith("the Hugging Face cache")
    config, tried = resolve_hf_config(_probe(model="org/elsewhere"))
    assert config is None and tried == ("probe.hf_config is unset; no local folder 'org/elsewhere' with a config.json; "
                                        "not in the Hugging Face cache; hub: skipped (HF_HUB_OFFLINE is set)")
    assert resolve_hf_config(_probe(model="org/elsewhere"), hub=False)[1].endswith(
        "the Hub not asked (raylc check asks it)"
    )


def test_hub_download_and_a_missing_model_through_the_cli(tmp_path):
    """`raylc check` asks the Hub (HF_ENDPOINT, read when huggingface_hub is imported, so in a
    process of its own; both jobs in one process) for a served model and a missing one."""
    from doubles.hub import HubStandIn, raylc_with_hub

    models = ("org/served", "org/missing")
    jobs = [_write(tmp_path / f"{model.split('/')[1]}.yaml", {
        "name": "h", "suite": {"problems_per_task": 2, "max_units": 60},
        "probe": {"backend": "vllm", "model": model, "max_model_len": 4096, "tokenizer": "default"}})
        for model in models]
    with HubStandIn({"org/served": QWEN}) as hub:
        (code, out, _), (code_missing, _, err) = raylc_with_hub(hub, [("check", j) for j in jobs], tmp_path / "cache",
                                                                tmp_path, env=_env())
    assert code == 0 and "config: the Hugging Face Hub" in out and "derived max length (vLLM 0.33.0): 32768" in out
    assert code_missing == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "cannot find the config.json of probe.model 'org/missing'" in err
    assert "hub: " in err and err.strip().endswith("set probe.hf_config: path/to/config.json")


def test_the_hub_fetch_is_bounded_in_all_and_its_error_is_one_line(monkeypatch, tmp_path):
    """A Hub that does not answer in time is given up at the limit (its download left running,
    quiet); one that fails says why in one line."""
    import huggingface_hub

    from raylc.backends.preflight import _hub_config

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: time.sleep(30))
    start = time.monotonic()
    assert _hub_config("org/slow", 0.5) == (None, "hub: no answer within 0.5 s")
    assert time.monotonic() - start < 5

    def gated(*args, **kwargs):
        raise PermissionError("gated repo\nsecond line")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    assert _hub_config("org/gated", 5.0) == (None, "hub: PermissionError: gated repo")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: str(tmp_path / "config.json"))
    config, where = _hub_config("org/ok", 5.0)
    assert where == "the Hugging Face Hub" and config["model_type"] == "llama"


# ---- prompts ------------------------------------------------------------------------------------

def test_prompt_fit_counts_what_plan_counts(tmp_path):
    from raylc.dolce.plan import plan

    cfg = _write(tmp_path / "config.json", QWEN)
    job = _job(cfg, max_model_len=300, tokenizer="default", sampling={"max_tokens": 20})
    fit = prompt_fit(job, evaluation_for(job))
    reference = plan(_job(cfg, max_model_len=10 ** 6, tokenizer="default"), tokenizer="default").spans["prompt_tokens"]
    assert fit.requests == reference.len() and fit.longest_prompt == reference.max()
    assert fit.cut == int((reference + 20 > 300).sum()) > 0 and not fit.estimated
    (report,) = preflight(job, prompts=evaluation_for(job))
    assert f"{fit.cut:,} of {fit.requests:,} requests above it" in "\n".join(report.lines())


def _fit(job):
    return prompt_fit(job, evaluation_for(job))


def test_prompt_fit_on_a_length_suite_and_a_missing_tokenizer(tmp_path):
    cfg = _write(tmp_path / "config.json", QWEN)
    suite = {"kind": "helmet_recall", "lengths": [1024, 2048], "base_lengths": [1024], "samples_per_length": 3}
    fit = _fit(_job(cfg, suite, max_model_len=2048))
    # the 2048-token contexts plus instruction, question and max_tokens exceed 2048; the 1024 ones fit
    assert (fit.requests, fit.cut) == (4 * 2 * 3, 4 * 3) and fit.longest_prompt > 2048
    fit = _fit(_job(cfg, {**suite, "samples_per_length": 12}, max_model_len=4096))
    assert fit.requests == 4 * 2 * 12 and fit.cut == 0 and "counted on 8 of 12 samples" in fit.note
    fit = _fit(_job(cfg, max_model_len=4096, tokenizer=f"hf:{tmp_path / 'no-such-tokenizer'}"))
    assert fit.estimated and fit.tokenizer == "default" and "is not available here" in fit.note


# ---- the command line ---------------------------------------------------------------------------

def _no_mpe_copy(tmp_path) -> Path:
    data = yaml.safe_load((ROOT / "jobs" / "helmet-recall-vllm-128k.yaml").read_text())
    del data["probe"]["hf_overrides"]["max_position_embeddings"]
    data["store"]["path"] = str(tmp_path / "store")
    data["probe"]["hf_config"] = str(ROOT / "jobs" / data["probe"]["hf_config"])
    return _write(tmp_path / "no-mpe.yaml", data)


def test_cli_refuses_the_128k_job_without_max_position_embeddings(tmp_path):
    job = _no_mpe_copy(tmp_path)
    t0 = time.monotonic()
    proc = raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    # hf_config is a file and HF_HUB_OFFLINE is set: no download, so the bound only catches a hang
    # (a busy machine can take 10 s to start the CLI)
    assert proc.returncode == 2 and elapsed < 45, (proc.returncode, elapsed)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    line = lines[0]
    assert line.startswith(f"error: {job}: probe.max_model_len 131072 is above the 32768 tokens")
    assert "add max_position_embeddings: 131072 to probe.hf_overrides" in line
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-mpe.yaml"]  # nothing written
    # with vLLM's switch set it is a warning, as in vLLM
    proc = raylc("check", job, env={**IN_PROCESS_ENV, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, cwd=tmp_path)
    assert proc.returncode == 0 and "warning: probe.max_model_len 131072 is above the 32768" in proc.stderr


def test_cli_check_imports_neither_ray_nor_vllm_nor_torch(tmp_path):
    script = ("import sys; from typer.testing import CliRunner; from raylc.cli import app\n"
              "for job in sys.argv[1:]:\n"
              "    r = CliRunner().invoke(app, ['check', job])\n"
              "    print(r.exit_code, sorted(m for m in ('ray', 'vllm', 'torch', 'transformers') if m in sys.modules))")
    jobs = [str(_no_mpe_copy(tmp_path)), str(ROOT / "jobs" / "dolce-vllm.yaml")]
    proc = subprocess.run([sys.executable, "-c", script, *jobs], capture_output=True, text=True, timeout=120,
                          env=_env(), cwd=ROOT)
    assert proc.stdout.strip().splitlines() == ["2 []", "0 []"], proc.stderr


@pytest.mark.parametrize("name, limit", [("dolce-vllm.yaml", 32768), ("helmet-recall-vllm-128k.yaml", 131072)])
def test_shipped_gpu_jobs_pass(name, limit):
    proc = raylc("check", f"jobs/{name}", "--gpu-memory-gib", "80", env=IN_PROCESS_ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"derived max length (vLLM 0.33.0): {limit} (max_position_embeddings" in proc.stdout
    assert f"probe.max_model_len: {limit}" in proc.stdout and "57,344 bytes/token" in proc.stdout
    assert "sequences per GPU: <= " in proc.stdout and "longest prompt: " in proc.stdout
    assert "warning" not in proc.stderr  # rope_theta kept in the 128K job's override
    job = load_job(ROOT / "jobs" / name)
    assert job.probe.model == "Qwen/Qwen2.5-7B-Instruct"
    assert json.loads((ROOT / "jobs" / job.probe.hf_config).read_text())["max_position_embeddings"] == 32768


def test_cli_non_vllm_job_has_nothing_to_check():
    proc = raylc("check", "jobs/quickstart.yaml", env=IN_PROCESS_ENV, cwd=ROOT)
    assert proc.returncode == 0 and "nothing to check for backend simulated" in proc.stdout


@pytest.mark.parametrize("command", [["run", "--store", "{store}"], ["plan"], ["submit", "--address", "http://127.0.0.1:9",
                                                                                   "--working-dir", "{tmp}"]])
def test_run_plan_and_submit_refuse_before_anything(tmp_path, command):
    job = _no_mpe_copy(tmp_path)
    args = [a.format(store=tmp_path / "store", tmp=tmp_path) for a in command]
    proc = raylc(args[0], job, *args[1:], env=IN_PROCESS_ENV, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "probe.max_model_len 131072 is above the 32768" in lines[0]
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-mpe.yaml"]


def test_plan_warns_when_the_config_is_not_found_locally(tmp_path):
    job = _write(tmp_path / "j.yaml", {"name": "p", "suite": {"problems_per_task": 2, "max_units": 60},
                                       "probe": {"backend": "vllm", "model": "org/nowhere", "max_model_len": 4096}})
    proc = subprocess.run([*CLI, "plan", str(job), "--tokenizer", "default"], capture_output=True, text=True,
                          timeout=120, env=_env(HF_HUB_CACHE=str(tmp_path / "cache")), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(
        "warning: probe not checked before start-up: cannot find the config.json of probe.model"
    )


# ---- OpenAI-compatible endpoints ----------------------------------------------------------------

class _VLLMModels(http.server.BaseHTTPRequestHandler):
    """``vllm serve``'s ``GET /v1/models`` on 127.0.0.1: each entry carries the model's ``max_model_len``."""

    window = 2048

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{
            "id": "simulated", "object": "model", "owned_by": "vllm",
            "root": "org/simulated", "max_model_len": self.window,
        }]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def vllm_models():
    """``(base_url, set_window)`` of a vLLM-like /v1/models endpoint."""
    handler = type("Models", (_VLLMModels,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", lambda window: setattr(handler, "window", window)
    server.shutdown()
    server.server_close()


def _openai_job(tmp_path, base_url, section="probe", name="openai.yaml", **probe) -> Path:
    return _write(tmp_path / name, {
        "name": "o", "suite": {"problems_per_task": 2, "max_units": 60}, "store": {"path": str(tmp_path / "store")},
        section: {"backend": "openai", "base_url": base_url, "model": "simulated", "tokenizer": "default", **probe}})


def _one_line_refusal(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr.strip()


def test_cli_check_reports_an_openai_endpoint(tmp_path):
    """`raylc check` of an OpenAI-compatible probe: the endpoint answers, lists the model, and the
    planned prompts are counted against probe.max_model_len as in the vLLM report."""
    from doubles.openai_server import SimulatedOpenAIServer

    with SimulatedOpenAIServer() as server:
        job = _openai_job(tmp_path, server.base_url, max_model_len=4096)
        proc = raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)
        unknown = raylc(
            "check", _openai_job(tmp_path, server.base_url, name="bare.yaml"), env=IN_PROCESS_ENV, cwd=tmp_path
        )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    fit = prompt_fit(load_job(job), evaluation_for(load_job(job)), 4096)
    assert proc.stdout.splitlines() == [
        f"probe.base_url: {server.base_url} (answered GET /models)",
        "probe.model: simulated (listed by /models)",
        "probe.max_model_len: 4096 (server's window: not reported; prompts are fitted client-side)",
        f"longest prompt: {fit.longest_prompt:,} tokens + 32 max_tokens <= probe.max_model_len 4096: fits "
        f"({fit.requests:,} requests, tokenizer default; chat template tokens not counted)"]
    assert unknown.returncode == 0 and unknown.stdout.splitlines()[2] == (
        "probe.max_model_len: unset; the server reports no window (prompt lengths not checked)")
    assert len(unknown.stdout.splitlines()) == 3
    assert preflight(load_job(job)) == []  # run, plan and submit do not ask the server (the run checks it itself)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.yaml", "openai.yaml"]  # nothing written


def test_cli_check_refuses_an_unreachable_endpoint_or_an_unserved_model_in_one_line(tmp_path):
    from doubles.openai_server import SimulatedOpenAIServer
    from raycluster import free_port

    for bad in ("localhost:8000/v1", "http://[::1/v1", "http://127.0.0.1:99999/v1"):  # a job error, no traceback
        job = _openai_job(tmp_path, bad, name="bad.yaml")
        line = _one_line_refusal(raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path))
        assert line.startswith(f"error: {job}: key 'probe.base_url': ") and "URL" in line, line
    down = f"http://127.0.0.1:{free_port()}/v1"
    for section in ("probe", "judge"):
        job = _openai_job(tmp_path, down, section=section)
        line = _one_line_refusal(raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path))
        assert line.startswith(f"error: {job}: {section}.base_url: OpenAI endpoint {down} is unavailable: "
                               "connection error"), line
    with SimulatedOpenAIServer(stall_models_s=60.0) as server:  # an endpoint that does not answer: a time limit
        t0 = time.monotonic()
        line = _one_line_refusal(raylc("check", _openai_job(tmp_path, server.base_url, timeout_s=2),
                                       env=IN_PROCESS_ENV, cwd=tmp_path))
        # far under the stall, with room for a process that starts slowly on a busy machine
        assert time.monotonic() - t0 < 30 and line.endswith("is unavailable: timed out after 2 s"), line
    with SimulatedOpenAIServer() as server:
        job = _openai_job(tmp_path, server.base_url, model="llama")
        line = _one_line_refusal(raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path))
        assert line == (f"error: {job}: probe.model: OpenAI endpoint {server.base_url} does not serve model 'llama' "
                        "(serves: simulated); set probe.check_model: false if it routes names it does not list")
        unchecked = raylc("check", _openai_job(tmp_path, server.base_url, model="llama", check_model=False),
                          env=IN_PROCESS_ENV, cwd=tmp_path)
        assert unchecked.returncode == 0
        assert "probe.model: llama (not checked: probe.check_model is false)" in unchecked.stdout
        job = _openai_job(tmp_path, server.base_url, api_key_env="RAYLC_NO_SUCH_KEY_VAR")
        line = _one_line_refusal(
            raylc("check", job, env={**IN_PROCESS_ENV, "RAYLC_NO_SUCH_KEY_VAR": None}, cwd=tmp_path)
        )
        assert line == f"error: {job}: probe.api_key_env: environment variable RAYLC_NO_SUCH_KEY_VAR is not set"


def test_cli_check_uses_the_window_the_server_reports(tmp_path, vllm_models):
    """vLLM's /v1/models gives the model's max_model_len: a larger probe.max_model_len is refused; an unset
    one takes the server's window for the prompt count, and prompts above it are a warning (sent whole)."""
    url, set_window = vllm_models
    job = _openai_job(tmp_path, url, max_model_len=4096)
    assert _one_line_refusal(raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)) == (
        f"error: {job}: probe.max_model_len 4096 is above the 2048-token window the server at {url} reports for "
        "simulated (max_model_len in /models), so it would refuse the longest prompts; lower probe.max_model_len "
        "to <= 2048")
    proc = raylc("check", _openai_job(tmp_path, url, max_model_len=1024), env=IN_PROCESS_ENV, cwd=tmp_path)
    assert proc.returncode == 0 and ("probe.max_model_len: 1024 (server's window: 2048; prompts are fitted "
                                     "client-side)") in proc.stdout.splitlines()
    job = _openai_job(tmp_path, url)
    proc = raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert lines[2] == ("probe.max_model_len: unset; server's window: 2048 (max_model_len in /models; prompts are "
                        "sent whole)")
    assert "+ 32 max_tokens <= the server's window 2048: fits" in lines[3]
    set_window(300)
    proc = raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)
    fit = prompt_fit(load_job(job), evaluation_for(load_job(job)), 300)
    assert proc.returncode == 0 and fit.cut > 0
    assert (f"vs the server's window 300: {fit.cut:,} of {fit.requests:,} requests above it: the server will refuse "
            "them") in proc.stdout
    assert proc.stderr == (f"warning: {fit.cut:,} requests do not fit the server's window of 300 tokens and "
                           "probe.max_model_len is unset, so they are sent whole and refused (error rows); set "
                           "probe.max_model_len: 300 to truncate them\n")


# ---- engine arguments, sampling settings and CPU engines (issue 28) -----------------------------

def test_check_refuses_an_unknown_engine_argument_and_an_invalid_sampling_setting_in_one_line(tmp_path):
    """Without vLLM installed, engine arguments are checked against vLLM 0.33.0's EngineArgs
    fields; sampling settings vLLM's SamplingParams refuses are refused when the job loads."""
    job = _write(tmp_path / "j.yaml", {"name": "t", "suite": {"problems_per_task": 2, "max_units": 60}, "probe": {
        "backend": "vllm", "model": "org/model", "hf_config": str(_write(tmp_path / "c.json", QWEN)),
        "max_model_len": 32768, "device": "cpu", "engine_args": {"enforce_eager": True}}})
    ok = raylc("check", job, env=IN_PROCESS_ENV, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "probe.engine_args: enforce_eager=True (known to vLLM 0.33.0's (not installed here) EngineArgs)" in ok.stdout
    cases = {
        "probe.engine_args.enforce_eagr=true": f"error: {job}: probe.engine_args.enforce_eagr is not a vLLM engine "
        "argument (not among vLLM 0.33.0's (not installed here) EngineArgs fields; did you mean 'enforce_eager'?)",
        # refused by the job's own checks: the error names the option (the file alone is valid)
        "probe.engine_args.max_model_len=9": "error: --set probe.engine_args.max_model_len=9: key 'probe.engine_args': "
        "engine_args.max_model_len is set by raylc: use probe.max_model_len",
        "probe.sampling.temperature=3": "error: --set probe.sampling.temperature=3: key 'probe.sampling.temperature': "
        "Input should be less than or equal to 2",
        "probe.sampling.temperature=.nan": "error: --set probe.sampling.temperature=nan: key "
        "'probe.sampling.temperature': Input should be a finite number",
        "probe.sampling.stop=['']": "error: --set probe.sampling.stop=['']: key 'probe.sampling.stop.0': String should "
        "have at least 1 character",
    }
    for setting, line in cases.items():
        proc = raylc("check", job, "--set", setting, env=IN_PROCESS_ENV, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (setting, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(line), (setting, proc.stderr)


def test_cpu_engine_report_and_kv_cache_refusal():
    r = check_probe(_probe(max_model_len=32768, device="cpu", cpu_kv_cache_gib=4), config=QWEN)
    per_seq = 2 * 28 * 4 * 128 * 2 * 32768  # bytes/token x tokens (bf16 KV)
    assert r.sequences_per_gpu == 4 * 2**30 // per_seq == 2
    assert any(
        line.startswith("probe.device: cpu (vLLM's CPU build): KV cache for <= 2 sequences") for line in r.lines()
    )
    with pytest.raises(PreflightError, match=r"probe.cpu_kv_cache_gib is 1, so vLLM cannot start; raise "
                                             r"probe.cpu_kv_cache_gib or lower probe.max_model_len to <= 18720"):
        check_probe(_probe(max_model_len=32768, device="cpu", cpu_kv_cache_gib=1), config=QWEN)
    assert 1 * 2**30 // 57344 // 16 * 16 == 18720


def test_config_keys_the_file_omits_come_from_the_transformers_class(monkeypatch):
    from raylc.backends.preflight import with_class_defaults

    class Config:  # a stand-in for transformers.AutoConfig
        @staticmethod
        def for_model(model_type):
            if model_type != "llama":
                raise ValueError(model_type)
            return type("C", (), {"to_dict": lambda self: {"rope_theta": 10000.0, "num_key_value_heads": None,
                                                           "_private": 1, "max_position_embeddings": 2048}})()

    monkeypatch.setitem(sys.modules, "transformers", type(sys)("transformers"))
    sys.modules["transformers"].AutoConfig = Config
    filled, ok = with_class_defaults({"model_type": "llama", "max_position_embeddings": 8192})
    assert ok and filled == {"rope_theta": 10000.0, "num_key_value_heads": None, "max_position_embeddings": 8192,
                             "model_type": "llama"}  # the file wins; private keys are left out
    assert with_class_defaults({"model_type": "custom"}) == ({"model_type": "custom"}, False)
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert with_class_defaults({"model_type": "llama"}) == ({"model_type": "llama"}, False)
