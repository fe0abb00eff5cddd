"""Backend interface, simulated backend, and the vLLM backend against a fake ``vllm`` module."""

import sys
import types
from dataclasses import dataclass, field

import polars as pl
import pytest

from raylc.backends import make_backend
from raylc.backends.base import GENERATION_COLUMNS, GENERATION_SCHEMA, BackendUnavailable, generation, generations_frame
from raylc.backends.simulated import SimulatedBackend
from raylc.backends.vllm_engine import INSTALL_HINT, VLLMBackend, actor_options, engine_kwargs, sampling_kwargs
from raylc.prompts import TEMPLATE, render_prompts
from raylc.sampling import sample_spans
from raylc.spec import GenerationParams, Job, SimulatedProbe, VLLMProbe
from raylc.suites.planted import build_planted
from raylc.tokenize import DefaultTokenizer, get_tokenizer

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
}
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
    assert df.row(1, named=True) == {"completion": None, "prompt_tokens": 3, "generated_tokens": 0, "cached_tokens": None,
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


def test_make_backend_builds_every_backend_without_importing_vllm(planted, monkeypatch):
    problems, _ = planted
    monkeypatch.setitem(sys.modules, "vllm", None)  # "not installed"
    vjob = Job(name="v", probe={"backend": "vllm", "model": "m"})
    backend = make_backend(vjob, problems)
    assert isinstance(backend, VLLMBackend)
    with pytest.raises(BackendUnavailable) as err:
        backend.generate(["x"])
    assert str(err.value) == INSTALL_HINT == "vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine"
    with pytest.raises(BackendUnavailable, match="vLLM is not installed"):
        backend.check_endpoint()
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
        "distributed_executor_backend": "mp",
    }
    minimal = engine_kwargs(VLLMProbe(backend="vllm", model="m"))
    assert set(minimal) <= VLLM_ENGINE_ARGS and set(engine_kwargs(probe)) <= VLLM_ENGINE_ARGS
    assert "tokenizer" not in minimal and "max_num_batched_tokens" not in minimal and "hf_overrides" not in minimal
    assert minimal["max_model_len"] == 131072 and minimal["tensor_parallel_size"] == 1
    assert minimal["distributed_executor_backend"] == "uni"
    assert actor_options(probe) == {"num_gpus": 2} and actor_options(VLLMProbe(backend="vllm", model="m")) == {"num_gpus": 1}


def test_sampling_kwargs_use_exact_vllm_names():
    full = sampling_kwargs(GenerationParams(temperature=0.7, top_p=0.9, max_tokens=64, stop=["\n"], seed=5))
    assert full == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "stop": ["\n"], "seed": 5}
    assert set(full) == VLLM_SAMPLING_PARAMS
    assert sampling_kwargs(GenerationParams()) == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 32}


# --- VLLMBackend against a fake vllm -----------------------------------------------------------


class FakeHFTokenizer:
    """Enough of a HF tokenizer: BOS on encode by default, a toy chat template."""

    BOS = 1

    def __init__(self, chat: bool = True):
        self.inner = DefaultTokenizer()
        self.chat = chat
        self.chat_calls: list[tuple] = []

    def encode(self, text, add_special_tokens=True):
        return ([self.BOS] if add_special_tokens else []) + self.inner.encode(text)

    def decode(self, ids):
        return self.inner.decode([i for i in ids if i != self.BOS])

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        if not self.chat:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set\nmore")
        self.chat_calls.append((messages, tokenize, add_generation_prompt))
        return "<s>[USER] " + messages[-1]["content"] + " [ASSISTANT]"


@dataclass
class FakeCompletion:
    text: str
    token_ids: list
    finish_reason: str = "stop"


@dataclass
class FakeMetrics:
    queued_ts: float = 10.0
    last_token_ts: float = 12.5


@dataclass
class FakeRequestOutput:
    prompt_token_ids: list
    outputs: list
    num_cached_tokens: int | None = None
    metrics: FakeMetrics | None = None
    prompt: str | None = None


@dataclass
class FakeEngineState:
    constructed: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    finish_reason: str = "stop"
    chat: bool = True


def fake_vllm(state: FakeEngineState) -> types.ModuleType:
    mod = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kw):
            unknown = set(kw) - VLLM_SAMPLING_PARAMS
            assert not unknown, unknown
            self.kw = kw

    class LLM:
        def __init__(self, model, **kw):
            state.constructed.append({"model": model, **kw})
            self.tok = FakeHFTokenizer(chat=state.chat)

        def get_tokenizer(self):
            return self.tok

        def generate(self, prompts, sampling_params=None, *, use_tqdm=True):
            state.calls.append((prompts, sampling_params, use_tqdm))
            out = []
            for i, p in enumerate(prompts):
                ids = p["prompt_token_ids"]
                metrics = FakeMetrics() if i == 0 else None
                out.append(FakeRequestOutput(ids, [FakeCompletion(f"answer {len(ids)}", [7, 8, 9], state.finish_reason)],
                                             num_cached_tokens=16 * i, metrics=metrics))
            return out

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    mod.TokensPrompt = dict  # vllm.TokensPrompt is a TypedDict
    return mod


@pytest.fixture
def engine(monkeypatch):
    state = FakeEngineState()
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(state))
    return state


def _probe(**kw):
    return VLLMProbe(backend="vllm", model="org/model", **kw)


def test_vllm_backend_builds_engine_once_and_sends_token_ids(engine):
    probe = _probe(sampling={"max_tokens": 8, "seed": 3})
    backend = VLLMBackend(probe)
    prompts = [TEMPLATE.format(context="some context here", question=f"Q{i}?") for i in range(3)]
    first = backend.generate(prompts)
    backend.generate(prompts[:1])
    assert engine.constructed == [engine_kwargs(probe)]  # one engine, exact kwargs
    sent, params, use_tqdm = engine.calls[0]
    assert params.kw == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "seed": 3} and use_tqdm is False
    tok = backend.llm.get_tokenizer()
    for p, req in zip(prompts, sent):
        assert set(req) == {"prompt_token_ids"}
        assert req["prompt_token_ids"] == tok.encode(f"<s>[USER] {p} [ASSISTANT]", add_special_tokens=False)
    assert tok.chat_calls[-1] == ([{"role": "user", "content": prompts[0]}], False, True)
    n0 = len(sent[0]["prompt_token_ids"])
    assert first[0] == {"completion": f"answer {n0}", "prompt_tokens": n0, "generated_tokens": 3, "cached_tokens": 0,
                        "finish_reason": "stop", "latency_s": 2.5, "error": None, "truncated_tokens": 0}
    assert first[1]["cached_tokens"] == 16 and first[2]["cached_tokens"] == 32
    assert 0 <= first[1]["latency_s"] < 5  # no metrics: the batch's wall time


def test_vllm_backend_without_chat_template_encodes_with_specials(engine):
    backend = VLLMBackend(_probe(chat_template=False))
    backend.generate(["plain prompt"])
    ids = engine.calls[0][0][0]["prompt_token_ids"]
    assert ids[0] == FakeHFTokenizer.BOS and backend.llm.get_tokenizer().decode(ids) == "plain prompt"


def test_vllm_backend_truncates_context_and_records_refusals(engine):
    question = "What is the code of vault V-1?"
    long = TEMPLATE.format(context=" ".join(["filler"] * 5000), question=question)
    short = TEMPLATE.format(context="tiny", question=question)
    backend = VLLMBackend(_probe(max_model_len=400, sampling={"max_tokens": 16}))
    cut, ok = backend.generate([long, short])
    ids = engine.calls[0][0][0]["prompt_token_ids"]
    assert len(ids) + 16 <= 400 and cut["prompt_tokens"] == len(ids) and cut["truncated_tokens"] > 4000
    assert backend.llm.get_tokenizer().decode(ids).endswith(f"Question: {question}\nAnswer: [ASSISTANT]")
    assert ok["truncated_tokens"] == 0 and ok["error"] is None

    engine.calls.clear()
    refuse = VLLMBackend(_probe(max_model_len=400, sampling={"max_tokens": 16}, truncation="refuse"))
    refused, ok = refuse.generate([long, short])
    assert len(engine.calls[0][0]) == 1  # the refused prompt never reaches the engine
    assert refused["completion"] is None and refused["error"].startswith("prompt too long")
    assert refused["prompt_tokens"] > 5000 and ok["completion"] is not None


def test_vllm_backend_prompt_parts_and_per_request_max_tokens(engine):
    """(head, context, tail) prompts keep the tail; differing max_tokens -> one SamplingParams per request."""
    head, tail = "Instruction.\n\n", "\n\nQuestion: which one?\nAnswer:"
    parts = (head, " ".join(["filler"] * 3000), tail)
    backend = VLLMBackend(_probe(max_model_len=400, sampling={"max_tokens": 16}))
    a, b = backend.generate([parts, parts], max_tokens=[None, 100])
    sent, params, _ = engine.calls[0]
    assert [p.kw["max_tokens"] for p in params] == [16, 100]
    assert len(sent[0]["prompt_token_ids"]) + 16 <= 400 and len(sent[1]["prompt_token_ids"]) + 100 <= 400
    assert b["truncated_tokens"] > a["truncated_tokens"] > 2000
    assert backend.llm.get_tokenizer().decode(sent[1]["prompt_token_ids"]).endswith(f"{tail} [ASSISTANT]")
    backend.generate([parts], max_tokens=[50])
    assert engine.calls[1][1].kw["max_tokens"] == 50  # one value: a single SamplingParams


def test_vllm_backend_flags_aborted_requests(engine):
    engine.finish_reason = "abort"
    (r,) = VLLMBackend(_probe()).generate(["x"])
    assert r["finish_reason"] == "abort" and "abort" in r["error"]


def test_vllm_backend_without_chat_template_in_tokenizer_is_one_clear_error(engine):
    engine.chat = False
    with pytest.raises(BackendUnavailable) as err:
        VLLMBackend(_probe()).generate(["x"])
    assert "set probe.chat_template: false" in str(err.value) and "\n" not in str(err.value)


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
