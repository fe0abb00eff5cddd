"""The timed vLLM 0.33.0 double (tests/doubles/vllm): API fidelity against the real wheel's source
(when present) and the behaviours raylc relies on. No Ray; fast."""

from __future__ import annotations

import ast
import asyncio
import glob
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
from doubles import DOUBLES_DIR, vllm_double
from doubles.model_dir import make_model_dir
from raycluster import gone

REAL_VLLM = Path(os.environ.get("RAYLC_VLLM_SRC", "/work/vllm_src/src/vllm"))
DOUBLE_VLLM = Path(DOUBLES_DIR) / "vllm"
FAST = {"prefill_tokens_per_s": 1e6, "decode_step_s": 0.0002}


@pytest.fixture(scope="module")
def vllm():
    with vllm_double() as module:
        yield module


def model(tmp_path, name="m", **kw):
    kw.setdefault("double", FAST)
    return str(make_model_dir(tmp_path / name, **kw))


def ids_of(n, start=100):
    return [start + (i * 7) % 3000 for i in range(n)]


def run_async(engine, jobs):
    """Run ``[(ids, SamplingParams), ...]`` concurrently in a fresh event loop; outputs or
    exceptions, in order."""

    async def one(i, ids, sp):
        final = None
        async for out in engine.generate({"prompt_token_ids": ids}, sp, request_id=f"r{i}"):
            final = out
        return final

    async def main():
        return await asyncio.gather(*(one(i, ids, sp) for i, (ids, sp) in enumerate(jobs)), return_exceptions=True)

    return asyncio.run(main())


# --------------------------------------------------------------------------- API fidelity (AST)


def _top_level_names(tree: ast.Module, *, defined_only: bool) -> set[str]:
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif not defined_only and isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif not defined_only and isinstance(node, ast.If):  # TYPE_CHECKING blocks
                visit(node.body)
                visit(node.orelse)
            elif not defined_only and isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return names


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found")


def _func(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"{cls.name}.{name} not found")


def _params(fn: ast.FunctionDef) -> list[tuple[str, str]]:
    """(name, kind) of every parameter, in order."""
    a = fn.args
    out = [(p.arg, "pos") for p in a.posonlyargs + a.args]
    if a.vararg:
        out.append((a.vararg.arg, "*"))
    out += [(p.arg, "kw") for p in a.kwonlyargs]
    if a.kwarg:
        out.append((a.kwarg.arg, "**"))
    return out


def _literal_defaults(fn: ast.FunctionDef) -> dict[str, object]:
    a = fn.args
    pos = a.posonlyargs + a.args
    out = {}
    for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
        try:
            out[p.arg] = ast.literal_eval(d)
        except ValueError:
            pass
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            try:
                out[p.arg] = ast.literal_eval(d)
            except ValueError:
                pass
    return out


class _Defaults:
    """Resolve a real dataclass field default: a literal, ``Field(default=...)``, or a reference
    ``ConfigClass.attr`` into vllm/config/*.py."""

    def __init__(self, root: Path):
        self.root = root
        self._config_classes: dict[str, ast.ClassDef] = {}
        for f in (root / "config").glob("*.py"):
            tree = ast.parse(f.read_text())
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self._config_classes.setdefault(node.name, node)

    def value(self, node, depth=0):
        if node is None or depth > 3:
            raise ValueError
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Field", "field"):
            for kw in node.keywords:
                if kw.arg == "default":
                    return self.value(kw.value, depth + 1)
            raise ValueError
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            cls = self._config_classes.get(node.value.id)
            if cls is None:
                raise ValueError
            for item in cls.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == node.attr:
                    return self.value(item.value, depth + 1)
                if isinstance(item, ast.Assign) and any(getattr(t, "id", None) == node.attr for t in item.targets):
                    return self.value(item.value, depth + 1)
            raise ValueError
        return ast.literal_eval(node)


def _fields(cls: ast.ClassDef) -> dict[str, ast.AST | None]:
    return {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


@pytest.mark.skipif(not REAL_VLLM.is_dir(), reason="the vLLM 0.33.0 source is not on this machine")
def test_names_and_signatures_match_the_real_wheel():
    parse = lambda root, rel: ast.parse((root / rel).read_text())  # noqa: E731
    # every public name the double defines exists at the same module path in the real package
    for path in sorted(DOUBLE_VLLM.rglob("*.py")):
        rel = path.relative_to(DOUBLE_VLLM)
        if rel.parts[0] == "_double":
            continue
        real_file = REAL_VLLM / rel
        assert real_file.is_file(), f"vllm/{rel} has no counterpart in the real wheel"
        ours = {n for n in _top_level_names(ast.parse(path.read_text()), defined_only=True)
                if not n.startswith("_") or n in ("__version__", "__version_tuple__")}
        ours -= {"IS_DOUBLE"}  # the double's marker
        real = _top_level_names(ast.parse(real_file.read_text()), defined_only=False)
        if rel == Path("__init__.py"):
            real |= set(ast.literal_eval(next(
                n.value for n in ast.parse(real_file.read_text()).body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "MODULE_ATTRS")))
        missing = ours - real
        assert not missing, f"vllm/{rel}: {sorted(missing)} not in the real module"

    defaults = _Defaults(REAL_VLLM)

    def check_fields(rel, cls_name, *, equal=False):
        ours = _fields(_class(parse(DOUBLE_VLLM, rel), cls_name))
        real = _fields(_class(parse(REAL_VLLM, rel), cls_name))
        public = {k: v for k, v in ours.items() if not k.startswith("_")}
        assert set(public) <= set(real), f"{cls_name}: {sorted(set(public) - set(real))} not real fields"
        if equal:
            assert set(ours) == set(real), f"{cls_name}: fields differ"
        checked = 0
        for name, node in public.items():
            try:
                want = defaults.value(real[name])
            except (ValueError, SyntaxError):
                continue
            got = ast.literal_eval(ours[name]) if node is not None and not isinstance(node, ast.Call) else None
            if isinstance(node, ast.Call):
                continue
            assert got == want, f"{cls_name}.{name}: default {got!r} != real {want!r}"
            checked += 1
        return checked

    assert check_fields("engine/arg_utils.py", "EngineArgs") >= 25
    assert check_fields("engine/arg_utils.py", "AsyncEngineArgs") == 1
    assert check_fields("sampling_params.py", "SamplingParams") >= 20
    check_fields("v1/metrics/stats.py", "RequestStateStats", equal=True)
    check_fields("outputs.py", "CompletionOutput")
    # the first fields of SamplingParams keep the real (positional) order
    sp_ours = list(_fields(_class(parse(DOUBLE_VLLM, "sampling_params.py"), "SamplingParams")))
    sp_real = list(_fields(_class(parse(REAL_VLLM, "sampling_params.py"), "SamplingParams")))
    assert sp_ours[:16] == sp_real[:16]

    def same_signature(rel, cls_name, fn_name, *, exact=True):
        ours = _func(_class(parse(DOUBLE_VLLM, rel), cls_name), fn_name)
        real = _func(_class(parse(REAL_VLLM, rel), cls_name), fn_name)
        if exact:
            assert _params(ours) == _params(real), f"{cls_name}.{fn_name}: parameters differ"
        else:
            assert set(_params(real)) <= set(_params(ours)), f"{cls_name}.{fn_name}: parameters missing"
        real_defaults = _literal_defaults(real)
        for k, v in _literal_defaults(ours).items():
            if k in real_defaults:
                assert real_defaults[k] == v, f"{cls_name}.{fn_name}({k}=...): {v!r} != {real_defaults[k]!r}"

    same_signature("entrypoints/llm.py", "LLM", "__init__")
    same_signature("entrypoints/llm.py", "LLM", "generate")
    same_signature("entrypoints/llm.py", "LLM", "get_tokenizer")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "__init__")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "from_engine_args")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "generate")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "add_request")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "shutdown")
    same_signature("v1/engine/async_llm.py", "AsyncLLM", "abort")
    same_signature("v1/engine/llm_engine.py", "LLMEngine", "from_engine_args")
    same_signature("v1/engine/llm_engine.py", "LLMEngine", "add_request")
    same_signature("outputs.py", "RequestOutput", "__init__")
    same_signature("v1/engine/exceptions.py", "EngineDeadError", "__init__")
    # AsyncLLM.errored / is_running are properties in both
    real_async = _class(parse(REAL_VLLM, "v1/engine/async_llm.py"), "AsyncLLM")
    for prop in ("errored", "is_running", "is_stopped", "dead_error"):
        assert any(getattr(d, "id", None) == "property" for d in _func(real_async, prop).decorator_list)


def test_top_level_names_and_types(vllm):
    assert vllm.__version__ == "0.33.0"
    assert vllm.AsyncLLMEngine is __import__("vllm.v1.engine.async_llm", fromlist=["AsyncLLM"]).AsyncLLM
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    assert str(EngineDeadError()) == "EngineCore encountered an issue. See stack trace (above) for the root cause."
    assert issubclass(EngineGenerateError, Exception)
    assert vllm.TokensPrompt(prompt_token_ids=[1, 2]) == {"prompt_token_ids": [1, 2]}
    assert vllm.EngineArgs().disable_log_stats is False
    assert vllm.EngineArgs().max_num_seqs is None
    with pytest.raises(TypeError):
        vllm.AsyncEngineArgs(model="x", swap_space=4)  # not an EngineArgs field in 0.33.0
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=r"max_tokens must be at least 1, got 0. \(parameter=max_tokens"):
        vllm.SamplingParams(max_tokens=0)
    with pytest.raises(VLLMValidationError, match="top_p must be in"):
        vllm.SamplingParams(top_p=0.0)
    sp = vllm.SamplingParams(temperature=0.0, top_p=0.5, stop="x")
    assert sp.top_p == 1.0 and sp.stop == ["x"]  # greedy resets top_p; stop becomes a list


# --------------------------------------------------------------------------- LLM (offline)


def test_llm_metrics_order_and_tokenizer(vllm, tmp_path):
    path = model(tmp_path)
    llm = vllm.LLM(model=path, max_model_len=2048)
    tok = llm.get_tokenizer()
    text = "The quick brown fox jumps over the lazy dog."
    ids = tok.encode(text, add_special_tokens=True)
    assert tok.decode(ids, skip_special_tokens=True) == text
    with pytest.raises(ValueError, match="chat_template is not set"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)

    prompts = [vllm.TokensPrompt(prompt_token_ids=ids_of(20 + 10 * i, start=50 + i)) for i in range(6)]
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=12)
    outs = llm.generate(prompts, sp, use_tqdm=False)
    assert [o.prompt_token_ids for o in outs] == [p["prompt_token_ids"] for p in prompts]  # input order
    for o in outs:
        c = o.outputs[0]
        assert o.finished and o.metrics is None  # LLM: disable_log_stats=True by default
        assert 1 <= len(c.token_ids) <= 12 and c.finish_reason in ("stop", "length")
        assert (c.finish_reason == "length") == (len(c.token_ids) == 12)
        assert c.text == tok.decode(list(c.token_ids), skip_special_tokens=True)
        assert isinstance(o.num_cached_tokens, int)
    again = llm.generate(prompts[:2], vllm.SamplingParams(temperature=0.0, max_tokens=12), use_tqdm=False)
    assert [o.outputs[0].text for o in again] == [o.outputs[0].text for o in outs[:2]]  # deterministic
    assert [o.request_id for o in again] == ["6", "7"]  # ids count up over the LLM's life

    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=r"The lengths of prompts \(2\) and params \(3\) must be the same"):
        llm.generate(prompts[:2], [sp, sp, sp], use_tqdm=False)

    stats_llm = vllm.LLM(model=path, max_model_len=2048, disable_log_stats=False)
    out = stats_llm.generate(prompts[0], sp, use_tqdm=False)[0]
    m = out.metrics
    assert type(m).__name__ == "RequestStateStats"
    assert m.arrival_time > 1e9 and 0 < m.queued_ts <= m.scheduled_ts <= m.first_token_ts <= m.last_token_ts
    assert m.num_generation_tokens == len(out.outputs[0].token_ids)


def test_stop_strings_and_finish_reasons(vllm, tmp_path):
    llm = vllm.LLM(model=model(tmp_path), max_model_len=512)
    prompts = [vllm.TokensPrompt(prompt_token_ids=ids_of(30, start=s)) for s in range(200, 230)]
    outs = llm.generate(prompts, vllm.SamplingParams(temperature=0.0, max_tokens=40), use_tqdm=False)
    short = llm.generate(prompts, vllm.SamplingParams(temperature=0.0, max_tokens=6), use_tqdm=False)
    assert {o.outputs[0].finish_reason for o in short} == {"stop", "length"}
    eos = llm.get_tokenizer().eos_token_id
    for o in outs:
        c = o.outputs[0]
        assert (c.token_ids[-1] == eos) == (c.finish_reason == "stop")  # EOS ends a "stop" completion
    long = next(o for o in outs if len(o.outputs[0].text) > 20)
    stop = long.outputs[0].text[8:12]
    cut = llm.generate(vllm.TokensPrompt(prompt_token_ids=long.prompt_token_ids),
                       vllm.SamplingParams(temperature=0.0, max_tokens=40, stop=[stop]), use_tqdm=False)[0]
    c = cut.outputs[0]
    assert c.finish_reason == "stop" and c.stop_reason == stop
    assert stop not in c.text and long.outputs[0].text.startswith(c.text)
    assert len(c.token_ids) < len(long.outputs[0].token_ids)
    # max_tokens=None: up to max_model_len, finishing with "length" there at the latest
    near = llm.generate(vllm.TokensPrompt(prompt_token_ids=ids_of(510)),
                        vllm.SamplingParams(temperature=0.0, max_tokens=None, ignore_eos=True), use_tqdm=False)[0]
    assert near.outputs[0].finish_reason == "length" and len(near.outputs[0].token_ids) == 2


# --------------------------------------------------------------------------- refusals


def test_max_model_len_checked_against_the_config(vllm, tmp_path, monkeypatch):
    path = model(tmp_path)
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    with pytest.raises(ValueError) as err:
        vllm.LLM(model=path, max_model_len=40000)
    msg = str(err.value)
    assert "1 validation error for ModelConfig" in msg
    assert ("User-specified max_model_len (40000) is greater than the derived max_model_len "
            "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json)") in msg
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in msg
    with pytest.raises(ValueError, match="validation error for ModelConfig"):
        vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=40000))
    # default: the derived length
    assert vllm.LLM(model=path).llm_engine.model_config.max_model_len == 32768
    # YaRN's factor is not applied; max_position_embeddings must be overridden too
    yarn = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    with pytest.raises(ValueError, match=r"max_model_len \(131072\) is greater"):
        vllm.LLM(model=path, max_model_len=131072, hf_overrides=yarn)
    ok = vllm.LLM(model=path, max_model_len=131072, hf_overrides={**yarn, "max_position_embeddings": 131072})
    assert ok.llm_engine.model_config.max_model_len == 131072
    # a linear factor is applied
    lin = vllm.LLM(model=path, hf_overrides={"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    assert lin.llm_engine.model_config.max_model_len == 65536
    # Llama 3.1: llama3 rope type, factor not applied to 131072
    llama = model(tmp_path, "llama", config="llama-3.1-8b")
    with pytest.raises(ValueError, match=r"max_position_embeddings=131072.0 or"):
        vllm.LLM(model=llama, max_model_len=131073)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert vllm.LLM(model=path, max_model_len=40000).llm_engine.model_config.max_model_len == 40000
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    # other construction-time checks
    with pytest.raises(ValueError,
                       match=r"Total number of attention heads \(28\) must be divisible by tensor parallel size \(8\)"):
        vllm.LLM(model=path, max_model_len=4096, tensor_parallel_size=8)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        vllm.LLM(model=path, max_model_len=4096, gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(1024\) is smaller than max_model_len \(4096\)"):
        vllm.LLM(model=path, max_model_len=4096, enable_chunked_prefill=False, max_num_batched_tokens=1024)
    with pytest.raises(ValueError, match="Invalid repository ID or local directory"):
        vllm.LLM(model=str(tmp_path / "nowhere"))


def test_prompt_longer_than_max_model_len_is_refused(vllm, tmp_path):
    from vllm.exceptions import VLLMValidationError

    path = model(tmp_path)
    llm = vllm.LLM(model=path, max_model_len=256)
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=4)
    with pytest.raises(VLLMValidationError) as err:
        llm.generate([vllm.TokensPrompt(prompt_token_ids=ids_of(10)), vllm.TokensPrompt(prompt_token_ids=ids_of(300))],
                     sp, use_tqdm=False)
    assert str(err.value) == (
        "This model's maximum context length is 256 tokens. However, your prompt contains 300 input tokens, "
        "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. "
        "(parameter=input_tokens, value=300)")
    assert not isinstance(err.value, ValueError)
    with pytest.raises(VLLMValidationError, match=r"The decoder prompt \(length 256\) plus the number of requested"):
        llm.generate(vllm.TokensPrompt(prompt_token_ids=ids_of(256)), sp, use_tqdm=False)
    with pytest.raises(VLLMValidationError, match="Token id 999999 is out of vocabulary"):
        llm.generate(vllm.TokensPrompt(prompt_token_ids=[999999]), sp, use_tqdm=False)
    assert llm.llm_engine.get_num_unfinished_requests() == 0  # the first, valid one was aborted
    assert len(llm.generate(vllm.TokensPrompt(prompt_token_ids=ids_of(255)), sp, use_tqdm=False)) == 1

    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=256))
    res = run_async(engine, [(ids_of(300), sp), (ids_of(20), sp)])
    assert isinstance(res[0], VLLMValidationError) and "maximum context length is 256" in str(res[0])
    assert res[1].finished
    engine.shutdown()


# --------------------------------------------------------------------------- prefix cache, timing


def test_prefix_cache_counts_whole_blocks(vllm, tmp_path):
    llm = vllm.LLM(model=model(tmp_path), max_model_len=4096)
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=2)
    base = ids_of(100)

    def cached(ids):
        return llm.generate(vllm.TokensPrompt(prompt_token_ids=ids), sp, use_tqdm=False)[0].num_cached_tokens

    assert cached(base) == 0
    assert cached(base[:70] + ids_of(40, start=2000)) == 64  # 4 whole shared blocks of 16
    assert cached(base) == 96  # all blocks but the one holding the last token: (100 - 1) // 16 * 16
    assert cached(base[:64]) == 48  # a fully cached 64-token prompt recomputes its whole last block
    assert cached(base[:65]) == 64
    assert cached(ids_of(15, start=7)) == 0  # shorter than a block
    assert cached([1] + base[1:]) == 0  # the key is the prefix chain: a different first token misses
    assert llm.reset_prefix_cache() and cached(base) == 0

    off = vllm.LLM(model=model(tmp_path, "off"), max_model_len=4096, enable_prefix_caching=False)
    for _ in range(2):
        assert off.generate(vllm.TokensPrompt(prompt_token_ids=base), sp, use_tqdm=False)[0].num_cached_tokens == 0


def test_time_grows_with_uncached_prompt_tokens(vllm, tmp_path):
    """The engine thread waits (prefill tokens scheduled) / prefill_tokens_per_s per step. The
    waits it asks for are recorded (a spy on its stop event's ``wait``), so the check does not
    depend on the machine's load; each generate takes at least the time it was charged."""
    path = model(tmp_path, double={"prefill_tokens_per_s": 40000, "decode_step_s": 0.0005})
    llm = vllm.LLM(model=path, max_model_len=16384, max_num_batched_tokens=2048)
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=1)
    stop = llm.llm_engine.engine_core._stop
    waits, wait = [], stop.wait
    stop.wait = lambda timeout=None: (waits.append(timeout), wait(timeout))[1]

    def timed(ids):
        waits.clear()
        t = time.perf_counter()
        out = llm.generate(vllm.TokensPrompt(prompt_token_ids=ids), sp, use_tqdm=False)[0]
        charged = sum(waits)
        assert time.perf_counter() - t >= charged
        return charged, out

    small, _ = timed(ids_of(1000, start=11))  # 0.025 s of prefill
    big, _ = timed(ids_of(16000, start=12))  # 0.4 s, in 8 chunks of 2048
    assert big > 4 * small, (small, big)  # coarse: 16x nominal
    assert big > 0.35
    again, out = timed(ids_of(16000, start=12))
    assert out.num_cached_tokens == 15984 and again < big / 4, (big, again)  # only 16 tokens recomputed


def test_async_concurrency_is_capped_by_max_num_seqs(vllm, tmp_path):
    # 20 decode steps of 0.02 s: a batch holds its four slots for 0.4 s, far longer than a loaded
    # machine takes to queue the twelve requests (at 0.002 s per step, CI once saw only 5 wait)
    path = model(tmp_path, double={"prefill_tokens_per_s": 1e6, "decode_step_s": 0.02})
    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(
        model=path, max_model_len=2048, max_num_seqs=4, disable_log_stats=False))
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    jobs = [(ids_of(50, start=300 + i), sp) for i in range(12)]
    result: dict = {}

    def in_other_thread():  # Ray Data runs async UDFs in its own loop, maybe off the main thread
        result["outs"] = run_async(engine, jobs)

    t = threading.Thread(target=in_other_thread)
    t.start()
    t.join(30)
    outs = result["outs"]
    assert all(o.finished and len(o.outputs[0].token_ids) == 20 for o in outs), outs
    spans = [(o.metrics.scheduled_ts, o.metrics.last_token_ts) for o in outs]
    peak = max(sum(1 for s, e in spans if s <= t0 < e) for t0, _ in spans)
    assert peak == 4
    waited = [o for o in outs if o.metrics.scheduled_ts - o.metrics.queued_ts > 0.2]
    assert len(waited) >= 6  # the others queued
    for o in waited:  # and each started once a slot came free: another request ended while it waited
        assert any(o.metrics.queued_ts <= e <= o.metrics.scheduled_ts for _, e in spans), (o.metrics, spans)
    assert [o.prompt_token_ids for o in outs] == [j[0] for j in jobs]

    engine.shutdown()

    # streaming (CUMULATIVE): intermediate outputs, then the finished one; a request id may be reused
    fresh = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=2048))

    async def stream_on(eng):
        seen = []
        async for out in eng.generate({"prompt_token_ids": ids_of(40, start=900)}, sp, "same-id"):
            seen.append((len(out.outputs[0].token_ids), out.finished, out.request_id))
        return seen

    async def two_streams():
        return await asyncio.gather(stream_on(fresh), stream_on(fresh))

    for seen in asyncio.run(two_streams()):
        assert len(seen) > 1 and seen[-1][:2] == (20, True) and not any(f for _, f, _ in seen[:-1])
        assert [n for n, _, _ in seen] == sorted(n for n, _, _ in seen)
        assert all(rid == "same-id" for _, _, rid in seen)
    # the engine's output handler lives in the first event loop: a second asyncio.run finds it
    # gone and the engine errored, as with the real AsyncLLM
    from vllm.v1.engine.exceptions import EngineDeadError

    assert fresh.errored
    with pytest.raises(EngineDeadError):
        asyncio.run(stream_on(fresh))
    fresh.shutdown()


# --------------------------------------------------------------------------- faults and stats


def test_engine_death(vllm, tmp_path):
    from vllm.v1.engine.exceptions import EngineDeadError

    path = model(tmp_path, double={"prefill_tokens_per_s": 1e6, "decode_step_s": 0.002, "die_after_requests": 3})
    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=2048, max_num_seqs=2))
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    res = run_async(engine, [(ids_of(30, start=400 + i), sp) for i in range(8)])
    ok = [r for r in res if not isinstance(r, BaseException)]
    dead = [r for r in res if isinstance(r, EngineDeadError)]
    assert len(ok) == 3 and len(dead) == 5, res
    assert engine.errored
    assert isinstance(run_async(engine, [(ids_of(30), sp)])[0], EngineDeadError)  # later calls too
    engine.shutdown()

    llm = vllm.LLM(model=path, max_model_len=2048, max_num_seqs=2)
    with pytest.raises(EngineDeadError):
        llm.generate([vllm.TokensPrompt(prompt_token_ids=ids_of(30, start=500 + i)) for i in range(6)], sp,
                     use_tqdm=False)


# --------------------------------------------------------------------------- the engine core process

STARTUP_FAILED = ("Engine core initialization failed. See root cause above. "
                  "Failed core proc(s): {'EngineCore': 1}")
# vLLM's log prefix (logger.py _FORMAT; logging_utils/formatter.py NewLineFormatter)
LOG_PREFIX = re.compile(r"^\(EngineCore pid=(\d+)\) ERROR \d\d-\d\d \d\d:\d\d:\d\d \[core\.py:\d+\] ")
KV_REASON = (
    "ValueError: To serve at least one request with the model's max seq len (2048), (0.11 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (0.05 GiB). Based on the available memory, "
    "the estimated maximum model length is 1000. Try increasing `gpu_memory_utilization` (which also controls "
    "CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def core_process(engine):
    """The engine core process, where vLLM keeps it: ``engine_core.resources.engine_manager``."""
    procs = engine.engine_core.resources.engine_manager.processes
    assert len(procs) == 1 and procs[0].name == "EngineCore"
    return procs[0]


def wait_for(cond, timeout=30.0):  # returns as soon as cond holds; long for a busy machine
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def check_core_log(out, err, last_line, message="EngineCore failed to start."):
    """What vLLM's engine core process prints when it fails: its logger's lines (stdout by default,
    every line prefixed, joined by CR LF), then multiprocessing's "Process EngineCore:" and the
    traceback on stderr. Returns the core's pid."""
    lines = [ln.rstrip("\r") for ln in out.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.endswith("] " + message))
    m = LOG_PREFIX.match(lines[start])
    assert m, lines[start]
    pid = int(m.group(1))
    assert pid != os.getpid()
    prefix = lines[start][: m.end()]
    logged = []
    for ln in lines[start:]:
        if not ln.startswith(prefix):
            break
        logged.append(ln[len(prefix):])
    assert logged[1] == "Traceback (most recent call last):"
    assert logged[2].startswith("  File ") and "in run_engine_core" in logged[2]
    assert logged[-1] == last_line
    assert "\r\n" in out  # NewLineFormatter joins the lines with CR LF
    err_lines = err.splitlines()
    i = err_lines.index("Process EngineCore:")
    assert err_lines[i + 1] == "Traceback (most recent call last):"
    assert err_lines[i + 2].startswith("  File ")
    end = next(j for j in range(i + 2, len(err_lines)) if not err_lines[j].startswith(" "))
    assert err_lines[end] == last_line
    return pid


def test_startup_failure_raises_vllms_error_and_the_core_prints_the_reason(vllm, tmp_path, capfd):
    reason = "CUDA out of memory. Tried to allocate 2.00 GiB"
    bad = model(tmp_path, "bad", double={"fail_on_init": reason})
    builds = (lambda: vllm.LLM(model=bad, max_model_len=1024),
              lambda: vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=bad, max_model_len=1024)))
    for build in builds:
        capfd.readouterr()
        with pytest.raises(RuntimeError) as err:
            build()
        assert str(err.value) == STARTUP_FAILED  # as vLLM: the reason is not in the message
        out, err_text = capfd.readouterr()
        check_core_log(out, err_text, f"RuntimeError: {reason}")

    # "Type: message" picks the exception type
    oom = model(tmp_path, "oom", double={"fail_on_init": "torch.OutOfMemoryError: CUDA out of memory."})
    with pytest.raises(RuntimeError, match="^Engine core initialization failed"):
        vllm.LLM(model=oom, max_model_len=1024)
    out, err_text = capfd.readouterr()
    check_core_log(out, err_text, "torch.OutOfMemoryError: CUDA out of memory.")

    # KV cache smaller than max_model_len: vLLM's ValueError, in the core process
    small_kv = model(tmp_path, "kv", double={"kv_cache_tokens": 1000})
    with pytest.raises(RuntimeError) as err:
        vllm.LLM(model=small_kv, max_model_len=2048)
    assert str(err.value) == STARTUP_FAILED
    out, err_text = capfd.readouterr()
    check_core_log(out, err_text, KV_REASON)
    assert KV_REASON not in str(err.value)


def test_core_log_stream_follows_vllm_logging_stream(vllm, tmp_path, capfd, monkeypatch):
    bad = model(tmp_path, "bad", double={"fail_on_init": "ValueError: no GPU"})
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    capfd.readouterr()
    with pytest.raises(RuntimeError, match="^Engine core initialization failed"):
        vllm.LLM(model=bad, max_model_len=1024)
    out, err = capfd.readouterr()
    assert out == ""
    assert LOG_PREFIX.match(err.splitlines()[0]) and err.splitlines()[0].endswith("EngineCore failed to start.")
    assert err.count("ValueError: no GPU") == 2 and "Process EngineCore:" in err


_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from doubles import vllm_double
with vllm_double() as vllm:
    try:
        vllm.LLM(model={model!r}, max_model_len=2048)
    except RuntimeError as e:
        print("RAISED", e, flush=True)
    llm = vllm.LLM(model={good!r}, max_model_len=2048)
    print("CORE", llm.llm_engine.engine_core.resources.engine_manager.processes[0].pid, flush=True)
    import os
    os._exit(0)  # no shutdown, no finalizers: the core process sees its control pipe close
"""


def test_core_process_writes_to_inherited_fds_and_never_outlives_its_frontend(tmp_path):
    """Outside pytest's capture: the core process writes to the frontend's own fd 1 / fd 2 (here
    pipes), and a frontend that exits abruptly (``os._exit``) leaves no process behind."""
    import subprocess
    import sys

    tests_dir = str(Path(__file__).resolve().parents[1])
    script = _SCRIPT.format(tests=tests_dir, model=model(tmp_path, "kv", double={"kv_cache_tokens": 1000}),
                            good=model(tmp_path))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    out, err = res.stdout.decode(), res.stderr.decode()  # bytes: keep the CR LF
    assert res.returncode == 0, err
    assert f"RAISED {STARTUP_FAILED}" in out
    check_core_log(out, err, KV_REASON)
    core_pid = int(out.split("CORE ")[1].split()[0])
    assert wait_for(lambda: gone(core_pid))
    assert err.count("Process EngineCore:") == 1  # the good engine's core stopped quietly


def test_killing_the_core_process_kills_the_engine(vllm, tmp_path):
    import signal

    from vllm.v1.engine.exceptions import EngineDeadError

    path = model(tmp_path, double={"prefill_tokens_per_s": 1e6, "decode_step_s": 0.05})
    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=2048))
    proc = core_process(engine)
    assert proc.pid != os.getpid() and proc.is_alive() and proc.exitcode is None and not engine.errored
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=1000, ignore_eos=True)

    async def main():
        jobs = [asyncio.ensure_future(collect(engine, ids_of(30, start=800 + i), sp, f"k{i}")) for i in range(3)]
        await asyncio.sleep(0.2)
        assert not any(j.done() for j in jobs)
        os.kill(proc.pid, signal.SIGKILL)
        return await asyncio.gather(*jobs, return_exceptions=True)

    t0 = time.monotonic()
    res = asyncio.run(main())
    assert time.monotonic() - t0 < 25  # unnoticed, the requests would end at 50 s (1,000 tokens x 0.05 s)
    assert all(isinstance(r, EngineDeadError) for r in res), res
    assert engine.errored and proc.exitcode == -signal.SIGKILL
    assert isinstance(run_async(engine, [(ids_of(10), sp)])[0], EngineDeadError)  # later requests too
    engine.shutdown()

    llm = vllm.LLM(model=path, max_model_len=2048)
    proc = core_process(llm.llm_engine)
    os.kill(proc.pid, signal.SIGKILL)
    assert wait_for(lambda: llm.llm_engine.engine_core.dead)
    with pytest.raises(EngineDeadError):
        llm.generate(vllm.TokensPrompt(prompt_token_ids=ids_of(10)), vllm.SamplingParams(max_tokens=2), use_tqdm=False)


async def collect(engine, ids, sp, rid):
    final = None
    async for out in engine.generate({"prompt_token_ids": ids}, sp, request_id=rid):
        final = out
    return final


def test_engine_death_stops_the_core_process_as_vllms_does(vllm, tmp_path, capfd):
    path = model(tmp_path, double={"prefill_tokens_per_s": 1e6, "decode_step_s": 0.002, "die_after_requests": 1})
    llm = vllm.LLM(model=path, max_model_len=2048)
    proc = core_process(llm.llm_engine)
    from vllm.v1.engine.exceptions import EngineDeadError

    capfd.readouterr()
    with pytest.raises(EngineDeadError):
        llm.generate([vllm.TokensPrompt(prompt_token_ids=ids_of(20, start=i)) for i in range(3)],
                     vllm.SamplingParams(max_tokens=4), use_tqdm=False)
    assert wait_for(lambda: proc.exitcode is not None)
    assert proc.exitcode == 1
    out, err = capfd.readouterr()
    check_core_log(out, err, "RuntimeError: vLLM double: die_after_requests=1 reached",
                   message="EngineCore encountered a fatal error.")


def test_shutdown_stops_the_core_process_quietly(vllm, tmp_path, capfd):
    import gc

    path = model(tmp_path)
    capfd.readouterr()
    t0 = time.monotonic()
    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=2048))
    llm = vllm.LLM(model=path, max_model_len=2048)
    assert time.monotonic() - t0 < 30  # a core process starts in well under a second: no hang, even on a busy machine
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=4)
    assert run_async(engine, [(ids_of(20), sp)])[0].finished
    assert llm.generate(vllm.TokensPrompt(prompt_token_ids=ids_of(20)), sp, use_tqdm=False)[0].finished
    procs = [core_process(engine), core_process(llm.llm_engine)]
    pids = [p.pid for p in procs]
    assert len(set(pids + [os.getpid()])) == 3 and all(p.is_alive() for p in procs)

    engine.shutdown()
    assert procs[0].exitcode == 0 and gone(pids[0]) and engine.errored
    del llm  # no LLM.shutdown() in vLLM 0.33: collecting the LLM stops its engine
    gc.collect()
    assert wait_for(lambda: procs[1].exitcode is not None) and procs[1].exitcode == 0 and gone(pids[1])
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_stats_file(vllm, tmp_path):
    stats_dir = tmp_path / "stats"
    path = model(tmp_path, double={"prefill_tokens_per_s": 50000, "decode_step_s": 0.001,
                                   "stats_dir": str(stats_dir), "stats_interval_s": 0.2})
    engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=path, max_model_len=4096))
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    prompts = [ids_of(1000, start=600)] * 2 + [ids_of(500, start=700)]
    t0 = time.time()
    res = run_async(engine, [(p, sp) for p in prompts])
    wall = time.time() - t0
    assert all(r.finished for r in res)
    deadline = time.monotonic() + 30  # written every 0.2 s (atomically), later on a loaded machine
    while True:
        files = glob.glob(str(stats_dir / f"stats-{os.getpid()}*.json"))
        stats = [json.loads(Path(f).read_text()) for f in files]
        if any(d["requests"] == 3 for d in stats) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert files
    s = next(d for d in stats if d["requests"] == 3)
    assert s["state"] == "running" and s["prompt_tokens"] == 2500
    assert s["cached_tokens"] == sum(r.num_cached_tokens for r in res) > 0
    assert 0.02 < s["busy_s"] <= wall + 0.05
    assert s["first_request_t"] <= s["last_finish_t"] and s["peak_rss_bytes"] > 10 * 2**20
    assert s["pid"] == os.getpid() and s["core_pid"] == core_process(engine).pid != os.getpid()
    engine.shutdown()
    s = json.loads(Path(files[stats.index(s)]).read_text())
    assert s["state"] == "shutdown"
    assert engine.errored
