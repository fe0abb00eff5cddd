"""Backend interface, simulated backend, the vLLM engine arguments and the prepare stage's tokenization."""

import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from in_process import make_backend

from raylc.backends.base import GENERATION_COLUMNS, GENERATION_SCHEMA, BackendUnavailable, generation, generations_frame
from raylc.backends.config import GenerationParams, SimulatedProbe, VLLMProbe
from raylc.backends.simulated import SimulatedBackend, prompt_draws
from raylc.backends.stages import PromptTokenizer, tokenize
from raylc.backends.vllm_engine import INSTALL_HINT, VLLMEngine, actor_options, engine_kwargs, sampling_kwargs
from raylc.spec import Job
from raylc.suites.planted import build_planted
from raylc.text.prompts import TEMPLATE, render_prompts
from raylc.text.sampling import sample_spans
from raylc.text.tokenize import DefaultTokenizer, get_tokenizer
from raylc.text.truncation import split_prompt

# Names read from the vllm==0.33.0 wheel (pip download vllm==0.33.0 --no-deps):
# vllm/entrypoints/llm.py  LLM.__init__ (l.177-219): model, tokenizer, tensor_parallel_size, dtype,
#     gpu_memory_utilization, hf_overrides, seed, **kwargs -> EngineArgs (l.275-315);
# vllm/engine/arg_utils.py  EngineArgs (l.489-): max_model_len (l.520), distributed_executor_backend (l.531),
#     tensor_parallel_size (l.548), enable_prefix_caching (l.598), gpu_memory_utilization (l.614),
#     max_num_batched_tokens (l.616), hf_overrides (l.635), enable_chunked_prefill (l.713), dtype (l.517),
#     tokenizer (l.499), model (l.492).
VLLM_ENGINE_ARGS = {
    "model", "tokenizer", "max_model_len", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching",
    "enable_chunked_prefill", "max_num_batched_tokens", "dtype", "hf_overrides", "distributed_executor_backend",
    "disable_log_stats", "max_num_seqs",
    "kv_cache_memory_bytes", "enforce_eager", "block_size",  # l.615, l.648, l.597
}


def test_pinned_engine_arg_names_hold_the_names_raylc_uses():
    from raylc.backends.vllm_fields import ENGINE_ARGS_0_33

    assert VLLM_ENGINE_ARGS <= ENGINE_ARGS_0_33 and len(ENGINE_ARGS_0_33) == 260
    assert "kv_cache_memory_byte" not in ENGINE_ARGS_0_33 and "device" not in ENGINE_ARGS_0_33
# vllm/sampling_params.py  SamplingParams (l.271-): temperature (l.308), top_p (l.315), seed (l.325),
#     stop (l.327), max_tokens (l.337).
VLLM_SAMPLING_PARAMS = {"temperature", "top_p", "max_tokens", "stop", "seed"}

JOB = Job(name="t", suite={"problems_per_task": 4, "max_units": 80, "lambdas": [1, 5], "ks": [1, 2]})


@pytest.fixture(scope="module")
def planted():
    problems = build_planted(JOB.suite, seed=1)
    spans = sample_spans(problems, JOB.sampling)
    return problems, render_prompts(spans, problems).to_list()


# --- interface and simulated backend -----------------------------------------------------------


def test_generations_frame_has_the_schema():
    rows = [generation("42", prompt_tokens=10, generated_tokens=1, finish_reason="stop", latency_s=0.5),
            generation(error="boom", prompt_tokens=3)]
    df = generations_frame(rows)
    assert df.schema == pl.Schema(GENERATION_SCHEMA) and df.columns == list(GENERATION_COLUMNS)
    assert df.row(1, named=True) == {"completion": None, "prompt_tokens": 3, "generated_tokens": 0,
                                     "cached_tokens": None,
                                     "finish_reason": None, "latency_s": 0.0, "error": "boom", "truncated_tokens": 0}
    assert generations_frame([]).schema == pl.Schema(GENERATION_SCHEMA)


def test_simulated_backend_returns_dicts_with_unchanged_answers(planted):
    problems, prompts = planted
    backend = make_backend(JOB, problems)
    assert isinstance(backend, SimulatedBackend)
    results = backend.generate(prompts)
    tok = DefaultTokenizer()
    assert [r["completion"] for r in results] == [backend.answer(p) for p in prompts]
    for p, r in zip(prompts, results):
        assert set(r) == set(GENERATION_COLUMNS)
        assert r["prompt_tokens"] == tok.count(p) and r["generated_tokens"] == tok.count(r["completion"])
        assert r["cached_tokens"] is None and r["finish_reason"] == "stop" and r["error"] is None
        assert r["latency_s"] is None and r["truncated_tokens"] == 0  # no model, nothing timed
    again = SimulatedBackend(SimulatedProbe(), dict(zip(problems["problem_id"], problems["answer"])), seed=0)
    assert [r["completion"] for r in again.generate(prompts)] == [r["completion"] for r in results]


def test_make_backend_builds_text_backends_and_vllm_needs_vllm(planted, monkeypatch):
    problems, _ = planted
    monkeypatch.setitem(sys.modules, "vllm", None)  # "not installed"
    with pytest.raises(BackendUnavailable) as err:
        VLLMEngine(VLLMProbe(backend="vllm", model="m"))
    assert str(err.value) == INSTALL_HINT == ("vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine, "
                                              "or vLLM's CPU build for probe.device: cpu (README, 'Real model on CPU')")
    ojob = Job(name="o", probe={"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert type(make_backend(ojob, problems)).__name__ == "OpenAIBackend"


# --- vLLM config translation -------------------------------------------------------------------


def test_engine_kwargs_use_exact_vllm_names():
    probe = VLLMProbe(
        backend="vllm", model="meta-llama/Llama-3.1-8B-Instruct", tokenizer="hf:meta-llama/Llama-3.1-8B-Instruct",
        max_model_len=65536, tensor_parallel_size=2, gpu_memory_utilization=0.85, enable_prefix_caching=False,
        enable_chunked_prefill=True, max_num_batched_tokens=8192, dtype="bfloat16",
        hf_overrides={"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    )
    assert engine_kwargs(probe) == {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer": "meta-llama/Llama-3.1-8B-Instruct",
        "max_model_len": 65536, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False, "enable_chunked_prefill": True, "max_num_batched_tokens": 8192,
        "dtype": "bfloat16", "hf_overrides": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        "distributed_executor_backend": "mp", "disable_log_stats": False,
    }
    minimal = engine_kwargs(VLLMProbe(backend="vllm", model="m"))
    assert set(minimal) <= VLLM_ENGINE_ARGS and set(engine_kwargs(probe)) <= VLLM_ENGINE_ARGS
    assert "tokenizer" not in minimal and "max_num_batched_tokens" not in minimal and "hf_overrides" not in minimal
    assert minimal["max_model_len"] == 131072 and minimal["tensor_parallel_size"] == 1
    assert minimal["distributed_executor_backend"] == "uni"
    assert actor_options(probe, verbose=True) == {"num_gpus": 2}
    quiet = {"runtime_env": {"env_vars": {"VLLM_LOGGING_LEVEL": "ERROR"}}}  # vLLM's info lines off the console
    assert actor_options(VLLMProbe(backend="vllm", model="m")) == {"num_gpus": 1, **quiet}
    cpu = VLLMProbe(backend="vllm", model="m", device="cpu", engine_num_cpus=1.5, cpu_kv_cache_gib=3,
                    env={"VLLM_LOGGING_LEVEL": "INFO", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
                    engine_args={"enforce_eager": True, "block_size": 64}, accelerator_type="H100")
    assert actor_options(cpu) == {"num_cpus": 1.5, "runtime_env": {"env_vars": {
        "VLLM_LOGGING_LEVEL": "INFO", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}}}  # no GPU, no accelerator type
    kw = engine_kwargs(cpu)
    assert kw["kv_cache_memory_bytes"] == 3 * 2**30 and kw["enforce_eager"] is True and kw["block_size"] == 64
    assert set(kw) <= VLLM_ENGINE_ARGS and "kv_cache_memory_bytes" not in minimal
    assert engine_kwargs(VLLMProbe(backend="vllm", model="m", max_num_seqs=64))["max_num_seqs"] == 64


def test_sampling_kwargs_use_exact_vllm_names():
    full = sampling_kwargs(GenerationParams(temperature=0.7, top_p=0.9, max_tokens=64, stop=["\n"], seed=5))
    assert full == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "stop": ["\n"], "seed": 5}
    assert set(full) == VLLM_SAMPLING_PARAMS
    assert sampling_kwargs(GenerationParams()) == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 32}


# --- the prepare stage for vLLM: fit and tokenize with the engine's tokenizer ----------------------


class FakeHFTokenizer:
    """Enough of a HF tokenizer: BOS on encode by default, a toy chat template."""

    BOS = 1

    def __init__(self, chat: bool = True):
        self.inner = DefaultTokenizer()
        self.small: dict[int, int] = {}
        self.big: dict[int, int] = {}
        self.chat = chat
        self.chat_calls: list[tuple] = []

    def encode(self, text, add_special_tokens=True):  # small ids, as a real vocabulary's
        ids = [self.small.setdefault(i, len(self.small) + 2) for i in self.inner.encode(text)]
        self.big.update({v: k for k, v in self.small.items()})
        return ([self.BOS] if add_special_tokens else []) + ids

    def decode(self, ids, skip_special_tokens=False):
        return self.inner.decode([self.big[i] for i in ids if i != self.BOS])

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        if not self.chat:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set\nmore")
        self.chat_calls.append((messages, tokenize, add_generation_prompt))
        return "<s>[USER] " + messages[-1]["content"] + " [ASSISTANT]"


def _rows(prompts, max_tokens=None):
    parts = [p if isinstance(p, tuple) else ("", p, "") for p in prompts]
    frame = pl.DataFrame({"request_id": [f"r{i}" for i in range(len(parts))], "head": [p[0] for p in parts],
                          "context": [p[1] for p in parts], "tail": [p[2] for p in parts]})
    return frame if max_tokens is None else frame.with_columns(pl.Series("max_tokens", max_tokens, dtype=pl.Int64))


def test_tokenize_sends_chat_rendered_token_ids():
    hf = FakeHFTokenizer()
    tok = PromptTokenizer(hf, chat_template=True)
    prompts = [TEMPLATE.format(context="some context here", question=f"Q{i}?") for i in range(3)]
    out = tokenize(_rows(prompts), tok, 1000, 8, "middle")
    assert out.columns == ["request_id", "prompt_token_ids", "prompt_tokens", "truncated_tokens", "error"]
    for p, ids, n in zip(prompts, out["prompt_token_ids"].to_list(), out["prompt_tokens"]):
        assert ids == hf.encode(f"<s>[USER] {p} [ASSISTANT]", add_special_tokens=False) and n == len(ids)
    assert hf.chat_calls[-1] == ([{"role": "user", "content": prompts[-1]}], False, True)
    assert out["truncated_tokens"].to_list() == [0, 0, 0] and out["error"].null_count() == 3


def test_tokenize_without_chat_template_encodes_with_specials():
    hf = FakeHFTokenizer()
    out = tokenize(_rows(["plain prompt"]), PromptTokenizer(hf, chat_template=False), 1000, 8, "middle")
    ids = out["prompt_token_ids"][0].to_list()
    assert ids[0] == FakeHFTokenizer.BOS and hf.decode(ids) == "plain prompt"


def test_a_raw_prompt_row_skips_the_chat_template_and_keeps_bos():
    """LongBench v1 pred.py: trec, triviaqa, samsum, lsht, lcc and repobench-p are tokenized as
    they are (the tokenizer's BOS, no chat turn); the other rows of the batch keep the template."""
    hf = FakeHFTokenizer()
    rows = _rows(["few-shot prompt", "chat prompt"]).with_columns(raw_prompt=pl.Series([True, None]))
    out = tokenize(rows, PromptTokenizer(hf, chat_template=True), 1000, 8, "middle")
    raw, chat = (r.to_list() for r in out["prompt_token_ids"])
    assert raw == hf.encode("few-shot prompt") and raw[0] == FakeHFTokenizer.BOS
    assert chat == hf.encode("<s>[USER] chat prompt [ASSISTANT]", add_special_tokens=False)
    assert out["prompt_tokens"].to_list() == [len(raw), len(chat)]
    assert [m[0][0]["content"] for m in hf.chat_calls] == ["", "chat prompt"]  # "": the constructor's check


def test_tokenize_truncates_context_and_records_refusals():
    question = "What is the code of vault V-1?"
    long = TEMPLATE.format(context=" ".join(["filler"] * 5000), question=question)
    short = TEMPLATE.format(context="tiny", question=question)
    hf = FakeHFTokenizer()
    rows = _rows([split_prompt(long), split_prompt(short)])
    cut, ok = tokenize(rows, PromptTokenizer(hf, True), 400, 16, "middle").iter_rows(named=True)
    assert len(cut["prompt_token_ids"]) + 16 <= 400 and cut["prompt_tokens"] == len(cut["prompt_token_ids"])
    assert cut["truncated_tokens"] > 4000 and cut["error"] is None
    assert hf.decode(cut["prompt_token_ids"]).endswith(f"Question: {question}\nAnswer: [ASSISTANT]")
    assert ok["truncated_tokens"] == 0 and ok["error"] is None
    refused, ok = tokenize(rows, PromptTokenizer(hf, True), 400, 16, "refuse").iter_rows(named=True)
    assert refused["prompt_token_ids"] is None and refused["error"].startswith("prompt too long")
    assert refused["prompt_tokens"] > 5000 and ok["prompt_token_ids"] is not None


def test_tokenize_per_request_max_tokens_keep_the_tail():
    head, tail = "Instruction.\n\n", "\n\nQuestion: which one?\nAnswer:"
    parts = (head, " ".join(["filler"] * 3000), tail)
    hf = FakeHFTokenizer()
    a, b = tokenize(_rows([parts, parts], [None, 100]),
                    PromptTokenizer(hf, True), 400, 16, "middle").iter_rows(named=True)
    assert len(a["prompt_token_ids"]) + 16 <= 400 and len(b["prompt_token_ids"]) + 100 <= 400
    assert b["truncated_tokens"] > a["truncated_tokens"] > 2000
    assert hf.decode(b["prompt_token_ids"]).endswith(f"{tail} [ASSISTANT]")


def test_tokenizer_without_chat_template_is_one_clear_error():
    with pytest.raises(BackendUnavailable) as err:
        PromptTokenizer(FakeHFTokenizer(chat=False), chat_template=True, name="org/base-model")
    assert "set probe.chat_template: false" in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("org/base-model: cannot apply the chat template")


def test_real_vllm_accepts_our_names():
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed (needs CUDA): pip install 'raylc[vllm]'")
    import dataclasses
    import inspect

    from vllm.engine.arg_utils import EngineArgs

    assert vllm.__version__ == "0.33.0"
    assert "num_cached_tokens" in inspect.signature(vllm.RequestOutput.__init__).parameters
    assert vllm.TokensPrompt(prompt_token_ids=[1, 2]) == {"prompt_token_ids": [1, 2]}
    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert VLLM_ENGINE_ARGS <= fields
    params = vllm.SamplingParams(**sampling_kwargs(GenerationParams(stop=["\n"], seed=1)))
    assert params.max_tokens == 32 and params.stop == ["\n"] and params.seed == 1


def test_default_tokenizer_is_shared():
    assert get_tokenizer(None) is get_tokenizer("default")


def _numpy_draws(seed: int) -> tuple:
    g = np.random.default_rng(seed)
    return g.random(), g.random(), g.random(), int(g.integers(0, 1000))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 2**32),
                          st.sampled_from([0, 1, 2**32 - 1, 2**64 - 1])), min_size=1, max_size=40))
def test_prompt_draws_equal_numpys_default_rng(seeds):
    """The simulated probe's draws for many prompts at once equal ``np.random.default_rng(seed)``'s
    first draws, bit for bit (one- and two-word seeds)."""
    got = prompt_draws(np.array(seeds, dtype=np.uint64))
    assert [(a, b, c, int(d)) for a, b, c, d in got] == [_numpy_draws(s) for s in seeds]


def test_prompt_draws_where_lemires_method_draws_again():
    """Seeds whose bounded integer numpy draws twice (its first 32 bits rejected; about one seed
    in 14 million, found by search): 715 and 952, where the first draw alone gives 500 and 959."""
    seeds = [12724282, 26740687]
    got = prompt_draws(np.array(seeds * 2 + [5], dtype=np.uint64))
    assert [int(d) for d in got[:, 3]] == [715, 952, 715, 952, _numpy_draws(5)[3]]
    assert [tuple(r[:3]) for r in got[:2]] == [_numpy_draws(s)[:3] for s in seeds]

