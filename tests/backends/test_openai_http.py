"""OpenAI-compatible backend against a real local HTTP server serving the simulated probe."""

import json
import pickle
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pytest
from doubles.openai_server import SimulatedOpenAIServer
from in_process import make_backend
from raycluster import free_port

from raylc.backends import openai_http
from raylc.backends.base import BackendUnavailable
from raylc.backends.config import OpenAIProbe
from raylc.backends.openai_http import OpenAIBackend
from raylc.backends.simulated import SimulatedBackend
from raylc.spec import Job
from raylc.suites.planted import build_planted
from raylc.text.prompts import TEMPLATE, render_prompts
from raylc.text.sampling import sample_spans
from raylc.text.tokenize import DefaultTokenizer

JOB = Job(name="t", suite={"problems_per_task": 6, "max_units": 60, "lambdas": [1, 5], "ks": [1, 2]})
SECRET = "sk-test-5f3c9a1e-DO-NOT-LEAK"


@pytest.fixture(scope="module")
def planted():
    problems = build_planted(JOB.suite, seed=2)
    spans = sample_spans(problems, JOB.sampling)
    prompts = render_prompts(spans, problems).to_list()
    sim = make_backend(JOB, problems)
    assert isinstance(sim, SimulatedBackend)
    return sim, prompts[:80]


def probe(url, **kw):
    base = {"backend": "openai", "base_url": url, "model": "simulated", "backoff_s": 0.001, "timeout_s": 5.0,
            "retry_budget_s": 0.0}  # max_retries alone, unless a test gives a budget
    return OpenAIProbe(**{**base, **kw})


def gave_up(attempts: int, retries: int, budget: float = 0) -> str:
    """A regex of the note ending a request's error after its retries: attempts, seconds, the two limits."""
    return (rf"; gave up after {attempts} attempts over \d+(\.\d)? s "
            rf"\(probe\.max_retries {retries}, probe\.retry_budget_s {budget:g}\)")


def matches(error: str, expected: str) -> bool:
    """``error == expected``, where a trailing " after N attempts" in ``expected`` stands for the
    give-up note of N attempts (``max_retries`` N - 1, no budget)."""
    m = re.fullmatch(r"(.*) after (\d+) attempts", expected, re.S)
    if m is None:
        return error == expected
    return re.fullmatch(re.escape(m[1]) + gave_up(int(m[2]), int(m[2]) - 1), error) is not None


def stand_in(backend: OpenAIBackend, handler) -> list[httpx.Request]:
    """Send ``backend``'s requests to ``handler`` (an httpx request -> a response, or raises) instead of
    the network; returns the list the requests are appended to."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return handler(request)

    backend._client = httpx.Client(transport=httpx.MockTransport(handle))
    return sent


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_retries_through_30_percent_503s_and_matches_the_simulated_probe(planted, mode):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, fail_rate=0.3, seed=1) as server:
        backend = OpenAIBackend(probe(server.base_url, mode=mode, concurrency=8, max_retries=12), seed=0)
        results = backend.generate(prompts)
    assert [r["error"] for r in results] == [None] * len(prompts)
    assert [r["completion"] for r in results] == [sim.answer(p) for p in prompts]
    stats = server.stats
    assert stats["injected_failures"] > 0.15 * len(prompts)  # failures did happen ...
    assert stats["requests"] == len(prompts) + stats["injected_failures"]  # ... and each one was retried
    tok = DefaultTokenizer()
    for p, r in zip(prompts, results):
        assert r["prompt_tokens"] == tok.count(p) and r["generated_tokens"] == tok.count(r["completion"])
        assert r["cached_tokens"] == 0 and r["finish_reason"] == "stop" and r["latency_s"] > 0


def test_retries_timeouts(planted):
    sim, prompts = planted
    # a 1 s limit: a busy machine may take 0.5 s to answer a request that does not stall
    with SimulatedOpenAIServer(sim, stall_rate=0.3, stall_s=4.0, seed=4) as server:
        results = OpenAIBackend(probe(server.base_url, timeout_s=1.0, concurrency=8, max_retries=8)).generate(
            prompts[:20]
        )
    assert server.stats["stalled"] > 0
    assert [r["completion"] for r in results] == [sim.answer(p) for p in prompts[:20]]


def test_failure_after_retries_is_a_row_with_an_error(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, fail_rate=1.0) as server:
        results = OpenAIBackend(probe(server.base_url, max_retries=2)).generate(prompts[:4])
    assert server.stats["requests"] == 4 * 3
    for r in results:
        assert r["completion"] is None and r["finish_reason"] is None
        assert matches(r["error"], f"{server.base_url}/chat/completions: HTTP 503 (injected failure) after 3 attempts")


def test_client_errors_are_not_retried(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim) as server:
        (r,) = OpenAIBackend(probe(server.base_url, model="other", max_retries=5)).generate(prompts[:1])
    assert server.stats["requests"] == 1
    assert r["completion"] is None and r["error"].startswith(f"{server.base_url}/chat/completions: HTTP 404")


def test_server_down_gives_backend_unavailable_naming_the_endpoint(planted):
    _, prompts = planted
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend(probe(url, max_retries=1, backoff_s=0.0))
    with pytest.raises(BackendUnavailable) as err:
        backend.check_endpoint()
    msg = str(err.value)
    assert msg.startswith(f"OpenAI endpoint {url} is unavailable: connection error") and "\n" not in msg
    (r,) = backend.generate(prompts[:1])
    assert r["completion"] is None and r["error"].startswith(f"{url}/chat/completions: connection error")
    assert re.search(gave_up(2, 1) + "$", r["error"])


def test_check_endpoint_checks_the_model(planted):
    sim, _ = planted
    with SimulatedOpenAIServer(sim) as server:
        OpenAIBackend(probe(server.base_url)).check_endpoint()
        with pytest.raises(BackendUnavailable, match=r"does not serve model 'llama' \(serves: simulated\)"):
            OpenAIBackend(probe(server.base_url, model="llama")).check_endpoint()


def test_api_key_never_leaks(planted, monkeypatch, capsys, caplog):
    sim, prompts = planted
    monkeypatch.setenv("RAYLC_TEST_KEY", SECRET)
    with SimulatedOpenAIServer(sim, api_key=SECRET, fail_rate=0.2) as server:
        good = OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY", max_retries=10))
        good.check_endpoint()
        ok = good.generate(prompts[:10])
        assert [r["completion"] for r in ok] == [sim.answer(p) for p in prompts[:10]]
        clone = pickle.loads(pickle.dumps(good))  # what a Ray actor receives: the key is re-read there
        assert clone.generate(prompts[:1])[0]["completion"] == sim.answer(prompts[0])

        no_key = OpenAIBackend(probe(server.base_url, max_retries=0))
        denied = no_key.generate(prompts[:2])
        assert all(r["error"].startswith(f"{server.base_url}/chat/completions: HTTP 401") for r in denied)
        with pytest.raises(BackendUnavailable) as err:
            no_key.check_endpoint()
        assert "HTTP 401" in str(err.value)

        monkeypatch.setenv("RAYLC_TEST_KEY", SECRET[::-1])
        wrong = OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY", max_retries=0))
        with pytest.raises(BackendUnavailable) as err2:
            wrong.check_endpoint()
        assert "$RAYLC_TEST_KEY" in str(err2.value)

    monkeypatch.delenv("RAYLC_TEST_KEY")
    with pytest.raises(BackendUnavailable, match="environment variable RAYLC_TEST_KEY .* is not set"):
        OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY"))
    with pytest.raises(BackendUnavailable, match="environment variable RAYLC_TEST_KEY .* is not set"):
        pickle.loads(pickle.dumps(good))

    out = capsys.readouterr()
    everything = [repr(good), str(good.__getstate__()), pickle.dumps(good), json.dumps(ok + denied), str(err.value),
                  str(err2.value), out.out, out.err, caplog.text, repr(server)]
    for item in everything:
        assert (SECRET.encode() not in item) if isinstance(item, bytes) else (SECRET not in item)
        assert (SECRET[::-1].encode() not in item) if isinstance(item, bytes) else (SECRET[::-1] not in item)


def _echoed(url: str, key: str) -> tuple[str, str]:
    """Body and ``X-Echo-Authorization`` header of an error reply of an ``echo_key`` server."""
    req = urllib.request.Request(f"{url}/chat/completions", data=b"{}", headers={"Authorization": f"Bearer {key}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    return err.value.read().decode(), err.value.headers.get("X-Echo-Authorization", "")


@pytest.mark.parametrize("status", [429, 503, 500])
def test_a_key_the_server_echoes_is_scrubbed_from_every_error(planted, monkeypatch, capsys, caplog, status):
    """Servers and proxies repeat the Authorization header in error bodies and headers: every
    error text raylc keeps or prints has the key replaced by ``***``."""
    sim, prompts = planted
    monkeypatch.setenv("RAYLC_TEST_KEY", SECRET)
    texts = []
    with SimulatedOpenAIServer(sim, api_key=SECRET, echo_key=True, fail_rate=1.0, fail_status=status) as server:
        body, header = _echoed(server.base_url, SECRET)
        assert SECRET in body and header == f"Bearer {SECRET}"  # the server does echo it
        retried = OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY", max_retries=1))
        texts += [r["error"] for r in retried.generate(prompts[:3])]
    with SimulatedOpenAIServer(sim, api_key=SECRET, echo_key=True, model="other") as server:
        unserved = OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY", max_retries=0))
        texts += [r["error"] for r in unserved.generate(prompts[:2])]  # HTTP 404, not retried
    monkeypatch.setenv("RAYLC_TEST_KEY", SECRET[::-1])
    with SimulatedOpenAIServer(sim, api_key=SECRET, echo_key=True, auth_status=400) as server:
        wrong = OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY", max_retries=0))
        texts += [r["error"] for r in wrong.generate(prompts[:2])]
        with pytest.raises(BackendUnavailable) as err:
            wrong.check_endpoint()
        texts.append(str(err.value))
    assert len(texts) == 8 and all("Authorization: Bearer ***; key ***" in t for t in texts), texts
    assert texts[0].startswith(f"HTTP {status}") or f": HTTP {status}" in texts[0]
    out = capsys.readouterr()
    for text in [*texts, out.out, out.err, caplog.text]:
        assert SECRET not in text and SECRET[::-1] not in text


def test_concurrency_bound_is_respected(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, delay_s=0.05) as server:  # a long timeout: no retry overlaps its timed-out try
        results = OpenAIBackend(probe(server.base_url, concurrency=3, timeout_s=120.0)).generate(prompts[:24])
    assert all(r["error"] is None for r in results)
    assert server.stats["requests"] == 24
    assert 2 <= server.stats["max_in_flight"] <= 3


def test_backoff_is_exponential_with_seeded_jitter(planted, monkeypatch):
    sim, prompts = planted
    sleeps: list[float] = []
    lock = threading.Lock()

    def record(s):
        with lock:
            sleeps.append(s)

    monkeypatch.setattr(openai_http.time, "sleep", record)
    runs = []
    for _ in range(2):
        sleeps.clear()
        with SimulatedOpenAIServer(sim, fail_rate=1.0) as server:
            OpenAIBackend(probe(server.base_url, backoff_s=1.0, max_retries=4, concurrency=1), seed=7).generate(
                prompts[:1]
            )
        runs.append(list(sleeps))
    assert runs[0] == runs[1] and len(runs[0]) == 4
    for attempt, s in enumerate(runs[0]):
        assert 0.5 * 2**attempt <= s <= 2**attempt


def test_client_side_truncation(planted):
    sim, _ = planted
    question = "What is the code of vault V-9?"
    long = TEMPLATE.format(context=" ".join(["filler"] * 3000), question=question)
    with SimulatedOpenAIServer(sim) as server:
        (r,) = OpenAIBackend(probe(server.base_url, max_model_len=500, mode="completions")).generate([long])
        (refused,) = OpenAIBackend(probe(server.base_url, max_model_len=500, truncation="refuse")).generate([long])
    assert r["error"] is None and r["truncated_tokens"] > 2500 and r["prompt_tokens"] + 32 <= 500
    assert refused["completion"] is None and refused["error"].startswith("prompt too long")
    assert server.stats["requests"] == 1


def test_prompt_parts_and_per_request_max_tokens(planted):
    """(head, context, tail) prompts: only the context is cut, each request's own max_tokens is budgeted and sent."""
    sim, _ = planted
    head, tail = "Read the passages.\n\n", "\n\nQuestion: which passage mentions the lighthouse?\nAnswer:"
    context = " ".join(f"Passage {i}: filler words here." for i in range(600))
    sent = []
    original = openai_http.OpenAIBackend._body

    def spy(self, prompt, max_tokens, *chat):
        sent.append(max_tokens)
        return original(self, prompt, max_tokens, *chat)

    with SimulatedOpenAIServer(sim) as server:
        backend = OpenAIBackend(probe(server.base_url, max_model_len=800, mode="completions", concurrency=1))
        openai_http.OpenAIBackend._body = spy
        try:
            short, long = backend.generate([(head, context, tail)] * 2, max_tokens=[None, 300])
        finally:
            openai_http.OpenAIBackend._body = original
    assert sent == [32, 300]
    assert short["error"] is None and short["prompt_tokens"] + 32 <= 800 < short["prompt_tokens"] + 300
    assert long["error"] is None and long["prompt_tokens"] + 300 <= 800
    assert long["truncated_tokens"] > short["truncated_tokens"] > 0


def test_usage_parsing_fallbacks():
    backend = OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="completions"))
    full = {"choices": [{"text": "12", "finish_reason": "length"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 64}}}
    r = backend._parse(full, "p q r", 0.25, 3)
    assert (r["completion"], r["prompt_tokens"], r["generated_tokens"], r["cached_tokens"], r["finish_reason"],
            r["latency_s"], r["truncated_tokens"]) == ("12", 100, 4, 64, "length", 0.25, 3)
    bare = backend._parse({"choices": [{"text": "a b"}]}, "p q r", 0.1, 0)
    assert (bare["prompt_tokens"], bare["generated_tokens"], bare["cached_tokens"]) == (3, 2, None)
    bad = backend._parse({"error": "x"}, "p", 0.1, 0)
    assert bad["completion"] is None and "unexpected response" in bad["error"]


# --- OpenAI-compatible servers in the wild (issue 14) ----------------------------------------


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_null_content_is_an_error_row_naming_the_endpoint_and_finish_reason(planted, mode):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, null_rate=0.5, seed=2) as server:
        results = OpenAIBackend(probe(server.base_url, mode=mode, concurrency=4, max_retries=3)).generate(prompts[:40])
    nulls = server.stats["null_replies"]
    assert 8 <= nulls <= 32 and server.stats["requests"] == 40  # an empty reply is not retried at once
    failed = [r for r in results if r["error"] is not None]
    assert len(failed) == nulls
    endpoint = f"{server.base_url}/{'chat/completions' if mode == 'chat' else 'completions'}"
    for r in failed:
        assert r["completion"] is None and r["finish_reason"] == "content_filter"
        assert r["error"] == (f"{endpoint}: empty completion (content null, finish_reason content_filter; "
                              "probe.empty_ok: true accepts empty answers)")
    assert all(r["completion"] == sim.answer(p) for p, r in zip(prompts, results) if r["error"] is None)


def test_empty_completions_every_reply_and_empty_ok(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, null_rate=1.0, null_content="", null_finish_reason="length") as server:
        strict = OpenAIBackend(probe(server.base_url)).generate(prompts[:5])
        lenient = OpenAIBackend(probe(server.base_url, empty_ok=True)).generate(prompts[:5])
    for r in strict:
        assert r["completion"] is None and r["error"].endswith(
            "empty completion (content empty, finish_reason length; max_tokens ran out first)")
    assert [(r["completion"], r["error"], r["finish_reason"]) for r in lenient] == [("", None, "length")] * 5
    with SimulatedOpenAIServer(sim, null_rate=1.0) as server:  # null content: an empty answer when empty_ok
        (r,) = OpenAIBackend(probe(server.base_url, empty_ok=True)).generate(prompts[:1])
    assert r["completion"] == "" and r["error"] is None


def test_http_400_on_a_bad_key_names_the_key_variable(planted, monkeypatch):
    sim, prompts = planted
    monkeypatch.setenv("MY_KEY_VAR", SECRET[::-1])
    with SimulatedOpenAIServer(sim, api_key=SECRET, auth_status=400) as server:
        wrong = OpenAIBackend(probe(server.base_url, api_key_env="MY_KEY_VAR", max_retries=3))
        with pytest.raises(BackendUnavailable) as err:
            wrong.check_endpoint()
        (row,) = wrong.generate(prompts[:1])
        with pytest.raises(BackendUnavailable) as err_none:
            OpenAIBackend(probe(server.base_url)).check_endpoint()
        assert server.stats["requests"] == 1  # not retried
    msg = str(err.value)
    assert msg == (f"OpenAI endpoint {server.base_url} rejected the request: HTTP 400 (invalid API key?): check the "
                   "key in $MY_KEY_VAR; server said (Authentication Error, Invalid proxy server token passed.)")
    assert row["completion"] is None and row["error"].startswith(
        f"{server.base_url}/chat/completions: HTTP 400 (invalid API key?): check the key in $MY_KEY_VAR")
    assert "HTTP 400 (invalid API key?): no key was sent; set probe.api_key_env" in str(err_none.value)
    for text in (msg, row["error"], str(err_none.value)):
        assert SECRET not in text and SECRET[::-1] not in text and "\n" not in text


def test_a_plain_http_400_is_not_called_an_auth_problem(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim) as server:  # a body the server cannot parse: 400 "malformed request"
        backend = OpenAIBackend(probe(server.base_url, api_key_env=None))
        backend._body = lambda prompt, max_tokens, chat=None: b'{"model": "simulated"}'  # type: ignore[method-assign]
        (r,) = backend.generate(prompts[:1])
    assert r["error"] == f"{server.base_url}/chat/completions: HTTP 400 (malformed request)"


def test_wildcard_routes_and_check_model(planted):
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, model="local/*") as server:  # lists only local/*, serves local/<anything>
        OpenAIBackend(probe(server.base_url, model="local/qwen")).check_endpoint()  # the listed wildcard matches
        (r,) = OpenAIBackend(probe(server.base_url, model="local/qwen")).generate(prompts[:1])
        assert r["error"] is None and r["completion"] == sim.answer(prompts[0])
        with pytest.raises(BackendUnavailable, match=r"does not serve model 'remote/qwen' \(serves: local/\*\); "
                                                     r"set probe\.check_model: false"):
            OpenAIBackend(probe(server.base_url, model="remote/qwen")).check_endpoint()
    with SimulatedOpenAIServer(sim, model="local/*", listed_models=["local/default"]) as server:
        with pytest.raises(BackendUnavailable, match="does not serve model 'local/qwen'"):
            OpenAIBackend(probe(server.base_url, model="local/qwen")).check_endpoint()
        unchecked = OpenAIBackend(probe(server.base_url, model="local/qwen", check_model=False))
        unchecked.check_endpoint()
        assert unchecked.generate(prompts[:1])[0]["error"] is None
    # the endpoint itself is still checked
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(BackendUnavailable, match=f"OpenAI endpoint {url} is unavailable: connection error"):
        OpenAIBackend(probe(url, model="local/qwen", check_model=False)).check_endpoint()


def test_under_reported_usage_is_flagged_once(planted, capsys):
    sim, _ = planted
    question = "What is the code of vault V-9?"
    long = [TEMPLATE.format(context=" ".join([f"filler{i}"] * 3000), question=question) for i in range(12)]
    ours = DefaultTokenizer().count(long[0])
    with SimulatedOpenAIServer(sim, usage_scale=10 / ours) as server:
        flagged = OpenAIBackend(probe(server.base_url, concurrency=4))
        results = flagged.generate(long)
        assert all(r["error"] is None and r["prompt_tokens"] < 20 for r in results)  # stored as the server said
        assert flagged.usage_mismatch is not None and flagged.usage_mismatch[1] > 3000
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("warning:")]
        assert len(lines) == 1, err
        assert lines[0].startswith(f"warning: {server.base_url}/chat/completions reported ")
        assert "probe.usage_check_factor = 4x" in lines[0]
        flagged.generate(long[:3])  # once per backend instance
        assert "warning" not in capsys.readouterr().err

        off = OpenAIBackend(probe(server.base_url, usage_check_factor=None))
        off.generate(long[:2])
        assert off.usage_mismatch is None and "warning" not in capsys.readouterr().err
    with SimulatedOpenAIServer(sim, usage_scale=1.5) as server:  # within the factor
        honest = OpenAIBackend(probe(server.base_url))
        honest.generate(long[:2])
    assert honest.usage_mismatch is None and "warning" not in capsys.readouterr().err
    short = OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="completions"))
    short._parse({"choices": [{"text": "1"}], "usage": {"prompt_tokens": 40}}, "a b c", 0.1, 0)  # chat template slack
    assert short.usage_mismatch is None


def test_retry_after_keeps_seeded_jitter(planted, monkeypatch):
    sim, prompts = planted
    sleeps: dict[int, list[float]] = {}
    lock = threading.Lock()

    def record(s):
        with lock:
            sleeps.setdefault(threading.get_ident(), []).append(s)

    monkeypatch.setattr(openai_http.time, "sleep", record)
    runs = []
    for _ in range(2):
        sleeps.clear()
        with SimulatedOpenAIServer(sim, fail_rate=1.0, fail_status=429, retry_after=2) as server:
            results = OpenAIBackend(probe(server.base_url, backoff_s=0.1, max_retries=3, concurrency=1),
                                    seed=7).generate(prompts[:6])
        assert all(re.search(r"HTTP 429 \(injected failure\)" + gave_up(4, 3) + "$", r["error"]) for r in results)
        runs.append(sorted(s for v in sleeps.values() for s in v))
    assert runs[0] == runs[1] and len(runs[0]) == 6 * 3  # deterministic per seed
    assert all(2.0 <= s <= 2.0 * openai_http.RETRY_AFTER_SPREAD for s in runs[0])  # never before Retry-After
    assert len(set(runs[0])) == len(runs[0])  # ... but not all at the same moment
    assert max(runs[0]) - min(runs[0]) > 0.2


def test_retry_after_header_forms():
    import email.utils
    import time as _time

    assert openai_http._retry_after({"Retry-After": "3"}) == 3.0
    assert openai_http._retry_after({"Retry-After": "junk"}) is None and openai_http._retry_after({}) is None
    when = openai_http._retry_after({"Retry-After": email.utils.formatdate(_time.time() + 30, usegmt=True)})
    assert 25 < when <= 30


def test_malformed_usage_falls_back_to_our_counts():
    backend = OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="completions"))
    r = backend._parse({"choices": [{"text": "a b"}], "usage": {"prompt_tokens": "many", "completion_tokens": -1,
                                                                "prompt_tokens_details": [64]}}, "p q r", 0.1, 0)
    assert (r["completion"], r["prompt_tokens"], r["generated_tokens"], r["cached_tokens"]) == ("a b", 3, 2, None)


def test_a_raw_request_goes_to_completions_without_the_chat_template(planted):
    """LongBench v1 pred.py sends trec, triviaqa, samsum, lsht, lcc and repobench-p without the
    chat template: in chat mode a raw request is a plain completion of the prompt as it is."""
    sim, _ = planted
    with SimulatedOpenAIServer(sim) as server:
        backend = OpenAIBackend(probe(server.base_url, mode="chat", concurrency=1))
        out = backend.generate(["Q: one?\nA:", "Q: two?\nA:", "Q: three?\nA:"], raw=[False, True, None])
        assert server.routes == ["/v1/chat/completions", "/v1/completions", "/v1/chat/completions"]
        completions = OpenAIBackend(probe(server.base_url, mode="completions", concurrency=1))
        completions.generate(["Q: four?\nA:"], raw=[False])
        assert server.routes[-1] == "/v1/completions"
    assert all(r["error"] is None and r["completion"] for r in out)
    with pytest.raises(ValueError, match="2 prompts but 1 raw flags"):
        backend.generate(["a", "b"], raw=[True])


# --- exact behaviour pinned by the mutation run (docs/testing.md, "Mutation testing") --------------------


def test_error_detail_forms():
    """The message of every error body form servers send; the text (for the auth test) is the first 4000 bytes."""
    ed = openai_http._error_detail
    assert ed(b'{"error": {"message": "bad thing", "type": "x"}}') == (
        "bad thing",
        '{"error": {"message": "bad thing", "type": "x"}}',
    )
    assert ed(b'{"error": "plain string"}')[0] == "plain string"
    assert ed(b'{"message": "top level"}')[0] == "top level"  # no "error" key
    assert ed(b'{"error": {"message": "inner"}, "message": "outer"}')[0] == "inner"
    for body in (b'{"error": {"code": 5}}', b'{"error": null}', b"[1, 2]", b"{}", b"not json", b""):
        assert ed(body) == ("", body.decode()), body
    bad = b'\xff{"error": "after a bad byte"}'  # not UTF-8: the text has a replacement character
    assert ed(bad) == ("", '\ufffd{"error": "after a bad byte"}')
    assert ed(b'{"error": "x", "pad": "' + b"a" * 5000 + b'"}') == (
        "x",
        ('{"error": "x", "pad": "' + "a" * 5000)[:4000],
    )


def test_one_line_collapses_whitespace_and_cuts_at_160():
    one = openai_http._one_line
    assert one("a\n  b\tc ") == "a b c"
    assert one("x" * 160) == "x" * 160
    assert one("x" * 161) == "x" * 157 + "..."
    assert one("abcdefgh", limit=6) == "abc..."


def test_retry_after_edges():
    import datetime
    import email.utils
    import time as _time

    ra = openai_http._retry_after
    assert ra(None) is None and ra({"Retry-After": ""}) is None
    assert ra({"Retry-After": "0"}) == 0.0 and ra({"Retry-After": "-5"}) == 0.0 and ra({"Retry-After": "1.5"}) == 1.5
    assert ra({"Retry-After": email.utils.formatdate(_time.time() - 100, usegmt=True)}) == 0.0  # in the past
    plus2 = datetime.timezone(datetime.timedelta(hours=2))  # a date with its own offset is not read as UTC
    when = ra({"Retry-After": email.utils.format_datetime(datetime.datetime.fromtimestamp(_time.time() + 30, plus2))})
    assert 25 < when <= 30
    minus0 = ra({"Retry-After": email.utils.formatdate(_time.time() + 30)})  # "-0000": UTC
    assert 25 < minus0 <= 30


def _usage_backend(**kw):
    return OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="completions", **kw))


@pytest.mark.parametrize("ours, reported, factor, flagged", [
    (3, 67, 4.0, False),  # 64 tokens apart: chat template slack
    (3, 68, 4.0, True),
    (10, 70, 4.0, False),  # more than 4x, but within the slack
    (100, 400, 4.0, False),  # exactly 4x
    (100, 401, 4.0, True),
    (400, 100, 4.0, False),  # under-counting either way
    (401, 100, 4.0, True),
    (65, 0, 40.0, True),  # a count of 0 is compared as 1
])
def test_usage_check_boundaries(capsys, ours, reported, factor, flagged):
    backend = _usage_backend(usage_check_factor=factor)
    prompt = " ".join(["w"] * ours)
    r = backend._parse({"choices": [{"text": "1"}], "usage": {"prompt_tokens": reported}}, prompt, 0.1, 0)
    assert r["prompt_tokens"] == reported
    err = capsys.readouterr().err
    if not flagged:
        assert backend.usage_mismatch is None and err == ""
        return
    assert backend.usage_mismatch == (reported, ours)
    assert err == (
        f"warning: http://127.0.0.1:9/v1/completions reported {reported} prompt tokens "
        f"for a prompt of {ours} tokens by "
        f"raylc's count (tokenizer default), more than probe.usage_check_factor = {factor:g}x apart: the prompt_tokens "
        "stored in infer/ are the server's and may be wrong (check the server and probe.tokenizer; reported once per "
        "actor)\n")


def test_parse_reply_forms():
    chat = OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="chat"))
    parts = [{"type": "text", "text": "4"}, "junk", {"type": "image"}, {"type": "text", "text": "2"}]
    r = chat._parse({"choices": [{"message": {"content": parts}, "finish_reason": "stop"}]}, "a b c", 0.5, 7)
    assert (r["completion"], r["generated_tokens"], r["prompt_tokens"], r["truncated_tokens"]) == ("42", 1, 3, 7)
    assert chat._parse({"choices": [{"message": {"content": 42}}]}, "p", 0.1, 0)["completion"] == "42"
    blank = chat._parse({"choices": [{"message": {"content": " \n"}, "finish_reason": "stop"}]}, "p", 0.1, 0)
    assert blank["completion"] is None and blank["error"] == (
        "http://127.0.0.1:9/v1/chat/completions: empty completion (content empty, finish_reason stop; "
        "probe.empty_ok: true accepts empty answers)")
    null = chat._parse({"choices": [{"message": {"content": None}}], "usage": "n/a"}, "p q", 0.1, 0)
    assert (null["completion"], null["generated_tokens"], null["prompt_tokens"]) == (None, 0, 2)
    raw = chat._parse({"choices": [{"text": "7"}]}, "p", 0.1, 0, False)  # a raw request: a completions reply
    assert raw["completion"] == "7" and raw["error"] is None
    bad = chat._parse({"choices": []}, "p q r", 0.25, 5)
    assert bad == openai_http.generation(
        prompt_tokens=3, latency_s=0.25, truncated_tokens=5,
        error="http://127.0.0.1:9/v1/chat/completions: unexpected response (no choices)")
    unchecked = _usage_backend(usage_check_factor=None)
    r = unchecked._parse({"choices": [{"text": "a b"}], "usage": {"completion_tokens": 5}}, "p q r", 0.1, 0)
    assert (r["prompt_tokens"], r["generated_tokens"], r["cached_tokens"]) == (3, 5, None)


def test_requests_on_the_wire(planted, monkeypatch):
    """Method, path, headers and JSON body of every request, as the server receives them."""
    sim, prompts = planted
    monkeypatch.setenv("RAYLC_TEST_KEY", SECRET)
    sampling = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 16, "stop": ["\n\n", "###"], "seed": 3}
    with SimulatedOpenAIServer(sim, api_key=SECRET, record=True) as server:
        backend = OpenAIBackend(probe(server.base_url + "/", api_key_env="RAYLC_TEST_KEY", sampling=sampling,
                                      concurrency=1))
        assert backend.endpoint == f"{server.base_url}/chat/completions"
        backend.check_endpoint()
        out = backend.generate(prompts[:2], max_tokens=[None, 8], raw=[False, True])
        OpenAIBackend(probe(server.base_url, api_key_env="RAYLC_TEST_KEY")).generate(prompts[:1])
    assert all(r["error"] is None for r in out)
    reqs = server.requests
    assert [(q["method"], q["path"]) for q in reqs] == [
        ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions")]
    for q in reqs:
        assert q["headers"]["Content-Type"] == "application/json" and q["headers"]["Accept"] == "application/json"
        assert q["headers"]["Authorization"] == f"Bearer {SECRET}"
    common = {"model": "simulated", "temperature": 0.7, "top_p": 0.9}
    assert reqs[0]["body"] is None
    assert reqs[1]["body"] == {**common, "messages": [{"role": "user", "content": prompts[0]}], "max_tokens": 16,
                               "stop": ["\n\n", "###"], "seed": 3}
    assert reqs[2]["body"] == {**common, "prompt": prompts[1], "max_tokens": 8, "stop": ["\n\n", "###"], "seed": 3}
    assert reqs[3]["body"] == {"model": "simulated", "messages": [{"role": "user", "content": prompts[0]}],
                               "temperature": 0.0, "top_p": 1.0, "max_tokens": 32}  # no stop, no seed: not sent


def test_exact_error_texts(planted):
    """Every failure path, as the row's error reads."""
    sim, prompts = planted
    forbidden = b'{"error": {"message": "Forbidden"}}'
    cases = [  # server options, probe options, the error after the endpoint
        ({"fail_rate": 1.0, "error_body": b""}, {"max_retries": 0}, "HTTP 503"),
        ({"fail_rate": 1.0, "error_body": b"<html>Bad Gateway</html>", "fail_status": 502}, {"max_retries": 1},
         "HTTP 502 after 2 attempts"),
        ({"fail_rate": 1.0, "error_body": b'{"message": "overloaded"}'}, {"max_retries": 1},
         "HTTP 503 (overloaded) after 2 attempts"),
        ({"fail_rate": 1.0, "error_body": json.dumps({"error": "x " * 100}).encode()}, {"max_retries": 0},
         "HTTP 503 (" + ("x " * 100)[:157] + "...)"),
        ({"api_key": SECRET, "auth_status": 403, "error_body": forbidden}, {"max_retries": 3},
         "HTTP 403 (invalid API key?): no key was sent; set probe.api_key_env to the environment variable holding it; "
         "server said (Forbidden)"),
        ({"api_key": SECRET, "auth_status": 401, "error_body": b'{"error": "denied"}'}, {},
         "HTTP 401 (invalid API key?): no key was sent; set probe.api_key_env to the environment variable holding it; "
         "server said (denied)"),
        ({"api_key": SECRET, "auth_status": 401, "error_body": b""}, {},
         "HTTP 401 (invalid API key?): no key was sent; set probe.api_key_env to the environment variable holding it"),
        ({"fail_rate": 1.0, "fail_status": 422, "error_body": b'{"error": {"message": "unprocessable"}}'},
         {"max_retries": 3}, "HTTP 422 (unprocessable)"),
        ({"bad_json_rate": 1.0}, {"max_retries": 3}, "response is not JSON"),
        ({"drop_rate": 1.0}, {"max_retries": 1},
         "connection error (Server disconnected without sending a response.) after 2 attempts"),
        # a read that waits past its limit; the whole (twice that) is 1 s later, room for a busy machine
        ({"stall_rate": 1.0, "stall_s": 3.0}, {"max_retries": 0, "timeout_s": 1.0}, "timed out after 1 s"),
        # a body that trickles (each read quick, the whole about 20 s): given up at twice the read limit
        ({"trickle_s": 0.05}, {"max_retries": 0, "timeout_s": 0.5}, "no complete answer within 1 s"),
    ]
    for server_kw, probe_kw, error in cases:
        with SimulatedOpenAIServer(sim, **server_kw) as server:
            (r,) = OpenAIBackend(probe(server.base_url, **probe_kw)).generate(prompts[:1])
        assert matches(r["error"], f"{server.base_url}/chat/completions: {error}"), (server_kw, r["error"])
        assert r["completion"] is None and r["prompt_tokens"] == DefaultTokenizer().count(prompts[0])
        assert r["truncated_tokens"] == 0 and 0 <= r["latency_s"] < 30


def test_headers_that_trickle_are_given_up_at_twice_the_read_limit(planted):
    """A server (a broken proxy) that sends its status line and headers a byte every 0.3 s: each
    read is quick (the read limit is 2 s), so only the request's total limit (twice
    ``timeout_s``) ends it, at 4 s rather than after the headers' ~40 s."""
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, trickle_s=0.3, trickle_headers=True) as server:
        t0 = time.monotonic()
        (r,) = OpenAIBackend(probe(server.base_url, max_retries=0, timeout_s=2)).generate(prompts[:1])
        took = time.monotonic() - t0
    assert matches(r["error"], f"{server.base_url}/chat/completions: no complete answer within 4 s"), r["error"]
    assert took < 20, took


def test_connection_errors_and_connect_timeouts_are_retried():
    url = f"http://127.0.0.1:{free_port()}/v1"
    (r,) = OpenAIBackend(probe(url, max_retries=1)).generate(["p"])
    assert matches(r["error"], f"{url}/chat/completions: connection error (Connection refused) after 2 attempts")

    def no_answer(request):  # a connect timeout (a remote host that does not answer)
        raise httpx.ConnectTimeout("timed out", request=request)

    backend = OpenAIBackend(probe(url, max_retries=2, timeout_s=1.5))
    sent = stand_in(backend, no_answer)
    (r,) = backend.generate(["p"])
    assert matches(r["error"], f"{url}/chat/completions: timed out after 1.5 s after 3 attempts") and len(sent) == 3


def test_error_rows_keep_the_truncation(planted):
    sim, _ = planted
    long = TEMPLATE.format(context=" ".join(["filler"] * 3000), question="What is the code of vault V-9?")
    with SimulatedOpenAIServer(sim, fail_rate=1.0) as server:
        (r,) = OpenAIBackend(probe(server.base_url, max_model_len=500, max_retries=0)).generate([long])
    assert r["error"].endswith("HTTP 503 (injected failure)") and r["truncated_tokens"] > 2500
    assert r["prompt_tokens"] + 32 <= 500
    with SimulatedOpenAIServer(sim) as server:
        (refused,) = OpenAIBackend(probe(server.base_url, max_model_len=500, truncation="refuse")).generate([long])
        (whole,) = OpenAIBackend(probe(server.base_url)).generate([long])
    assert refused["prompt_tokens"] == DefaultTokenizer().count(long) and refused["latency_s"] is None
    assert whole["error"] is None and whole["truncated_tokens"] == 0


def test_backoff_and_retry_after_sleeps_exactly(planted, monkeypatch):
    """The documented sleeps, to the value: b = min(60, backoff_s * 2**(n-1)) * U(0.5, 1) from a RNG seeded by
    "<seed>:<index>", and max(min(60, Retry-After), b) * U(1, 1.25) when the reply has a Retry-After."""
    import random

    sim, prompts = planted
    sleeps: list[float] = []
    monkeypatch.setattr(openai_http.time, "sleep", sleeps.append)

    def expected(seed, index, backoff, retries, retry_after=None):
        rng, out = random.Random(f"{seed}:{index}"), []
        for n in range(1, retries + 1):
            b = min(60.0, backoff * 2 ** (n - 1)) * rng.uniform(0.5, 1.0)
            out.append(b if retry_after is None else max(b, min(60.0, retry_after)) * rng.uniform(1.0, 1.25))
        return out

    for server_kw, backoff, retry_after in [({}, 1.0, None), ({}, 40.0, None),
                                            ({"fail_status": 429, "retry_after": 2}, 0.5, 2.0),
                                            ({"fail_status": 429, "retry_after": 1000}, 0.5, 1000.0),
                                            ({"fail_status": 429, "retry_after": 1}, 4.0, 1.0)]:
        sleeps.clear()
        with SimulatedOpenAIServer(sim, fail_rate=1.0, **server_kw) as server:
            OpenAIBackend(probe(server.base_url, backoff_s=backoff, max_retries=3, concurrency=1),
                          seed=5).generate(prompts[:2])
        assert sleeps == expected(5, 0, backoff, 3, retry_after) + expected(5, 1, backoff, 3, retry_after)


def test_check_endpoint_edges(planted, monkeypatch):
    sim, _ = planted
    with SimulatedOpenAIServer(sim, listed_models=[f"m{i}" for i in range(12)]) as server:
        with pytest.raises(BackendUnavailable) as err:
            OpenAIBackend(probe(server.base_url)).check_endpoint()
        assert str(err.value) == (
            f"OpenAI endpoint {server.base_url} does not serve model 'simulated' (serves: m0, m1, m2, m3, m4, m5, m6, "
            "m7, m8, m9); set probe.check_model: false if it routes names it does not list")
    with SimulatedOpenAIServer(sim, listed_models=["simulate?", "simul[a]ted"]) as server:  # only * is a wildcard
        with pytest.raises(BackendUnavailable, match=r"\(serves: simulate\?, simul\[a\]ted\)"):
            OpenAIBackend(probe(server.base_url)).check_endpoint()
    with SimulatedOpenAIServer(sim, listed_models=[]) as server:  # lists nothing: cannot tell
        OpenAIBackend(probe(server.base_url)).check_endpoint()
        # no /models route (404): reachable, the model cannot be checked
        OpenAIBackend(probe(server.base_url.replace("/v1", "/v2"))).check_endpoint()
    with SimulatedOpenAIServer(sim, stall_models_s=3.0) as server:
        with pytest.raises(BackendUnavailable) as err:
            OpenAIBackend(probe(server.base_url, timeout_s=1.0)).check_endpoint()
        assert str(err.value) == f"OpenAI endpoint {server.base_url} is unavailable: timed out after 1 s"
    backend = OpenAIBackend(probe("http://127.0.0.1:9/v1", timeout_s=300.0))
    timeouts = []
    for reply in ({"data": [{"id": None}, "x"]}, {}, ["not", "a", "dict"]):
        backend._send = lambda url, body, timeout, reply=reply: timeouts.append(timeout) or reply  # type: ignore
        backend.check_endpoint()  # nothing listed: passes
    assert timeouts == [10.0] * 3  # at most 10 s for the check


def test_loopback_bypasses_proxies_and_the_probe_tokenizer_is_used(planted, monkeypatch):
    sim, prompts = planted
    dead = f"http://127.0.0.1:{free_port()}"
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, dead)
    with SimulatedOpenAIServer(sim) as server:
        for host in ("127.0.0.1", "localhost"):
            backend = OpenAIBackend(probe(server.base_url.replace("127.0.0.1", host)))
            assert backend.generate(prompts[:1])[0]["error"] is None, host
    # elsewhere the environment's proxy is used: the request goes to the (dead) proxy, not to the host
    (r,) = OpenAIBackend(probe("http://api.example.invalid/v1", max_retries=0)).generate(["p"])
    assert r["error"] == "http://api.example.invalid/v1/chat/completions: connection error (Connection refused)"
    seen = []
    monkeypatch.setattr(openai_http, "get_tokenizer", lambda spec: seen.append(spec) or DefaultTokenizer())
    OpenAIBackend(probe("http://127.0.0.1:9/v1", tokenizer="hf:some-org/some-model"))
    assert seen == ["hf:some-org/some-model"]


def test_a_runs_client_counts_with_the_tokenizer_check_and_plan_count_with(monkeypatch):
    """The shipped endpoint job names a tokenizer for its suite, none for its probe: the run's
    client fits prompts into probe.max_model_len with the suite's tokenizer, as `raylc check`
    and `raylc plan` count them, not with the offline default."""
    from raylc.backends.builtin import openai_backend
    from raylc.spec import load_job

    seen = []
    monkeypatch.setattr(openai_http, "get_tokenizer", lambda spec: seen.append(spec) or DefaultTokenizer())
    job = load_job(Path(__file__).resolve().parents[2] / "jobs" / "openai-endpoint.yaml")
    assert job.probe.tokenizer is None and job.count_tokenizer() == "hf:Qwen/Qwen2.5-7B-Instruct"
    with openai_backend(job):
        pass
    assert seen == ["hf:Qwen/Qwen2.5-7B-Instruct"]
    with openai_backend(job.model_copy(update={"probe": job.probe.model_copy(update={"tokenizer": "hf:other"})})):
        pass
    assert seen[-1] == "hf:other"


def test_pickled_backend_keeps_its_endpoint_and_seed():
    backend = OpenAIBackend(probe("http://127.0.0.1:9/v1", mode="completions"), seed=11)
    clone = pickle.loads(pickle.dumps(backend))
    assert (clone.endpoint, clone.seed, clone.base_url) == ("http://127.0.0.1:9/v1/completions", 11,
                                                            "http://127.0.0.1:9/v1")
    assert OpenAIBackend(probe("http://127.0.0.1:9/v1")).seed == 0  # the default seed: the same jitter as seed 0
    odd = OpenAIBackend(probe("http://127.0.0.1:9/X//"))  # only trailing slashes are dropped
    assert (odd.base_url, odd.endpoint) == ("http://127.0.0.1:9/X", "http://127.0.0.1:9/X/chat/completions")


def test_a_retry_after_date_in_utc_is_read_as_utc_whatever_the_local_zone():
    """An HTTP date with "-0000" (no zone: UTC by RFC 5322) is not read in the machine's zone (here 9 h east)."""
    import email.utils
    import os
    import time as _time

    old = os.environ.get("TZ")
    os.environ["TZ"] = "JST-9"
    _time.tzset()
    try:
        when = openai_http._retry_after({"Retry-After": email.utils.formatdate(_time.time() + 30)})
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        _time.tzset()
    assert 25 < when <= 30


def test_our_prompt_count_is_skipped_when_the_server_reports_usage_and_nothing_is_checked(monkeypatch, capsys):
    """raylc's own (possibly slow, hf:) count runs only when the server gives no prompt_tokens or the usage check
    still has to look at it: not with the check off, and not after this backend flagged a mismatch."""
    counted = []

    class Counting(DefaultTokenizer):
        def count(self, text):
            counted.append(text)
            return super().count(text)

    monkeypatch.setattr(openai_http, "get_tokenizer", lambda spec: Counting())
    reply = {"choices": [{"text": "1"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    _usage_backend(usage_check_factor=None)._parse(reply, "a b c", 0.1, 0)
    assert counted == []
    checked = _usage_backend()
    checked._parse(reply, "a b c", 0.1, 0)
    assert counted == ["a b c"] and checked.usage_mismatch is None
    off = {"choices": [{"text": "1"}], "usage": {"prompt_tokens": 1000, "completion_tokens": 1}}
    checked._parse(off, "a b c", 0.1, 0)
    assert checked.usage_mismatch == (1000, 3) and counted == ["a b c"] * 2
    assert checked._parse(reply, "a b c", 0.1, 0)["prompt_tokens"] == 3 and counted == ["a b c"] * 2
    bare = checked._parse({"choices": [{"text": "1"}]}, "d e", 0.1, 0)  # no usage: our counts
    assert (bare["prompt_tokens"], bare["generated_tokens"]) == (2, 1) and counted == ["a b c"] * 2 + ["d e", "1"]
    assert capsys.readouterr().err.count("warning:") == 1


def test_failures_raised_inside_the_http_client_read_as_documented():
    """Failures a live server rarely shows, from a stand-in transport: an error body that cannot be read, a proxy
    that refuses the tunnel, a timeout or a broken reply while reading the body, an OS error."""

    class Unreadable(httpx.SyncByteStream):
        def __iter__(self):
            raise httpx.ReadError("reset while reading the error body")

    def http_error(status):
        return lambda request: httpx.Response(status, stream=Unreadable())

    def raises(exc_type, message):
        def handler(request):
            raise exc_type(message, request=request) if issubclass(exc_type, httpx.RequestError) else exc_type(message)
        return handler

    url = "http://127.0.0.1:9/v1"
    cases = [
        (http_error(503), {"max_retries": 1}, "HTTP 503 after 2 attempts"),
        (http_error(401), {"max_retries": 1},
         "HTTP 401 (invalid API key?): no key was sent; set probe.api_key_env to the environment variable holding it"),
        (http_error(418), {"max_retries": 1}, "HTTP 418"),
        (raises(httpx.ProxyError, "407 Proxy Authentication Required"), {"max_retries": 0},
         "connection error (407 Proxy Authentication Required)"),
        (raises(httpx.ReadTimeout, "timed out"), {"max_retries": 0, "timeout_s": 2.5}, "timed out after 2.5 s"),
        (raises(httpx.PoolTimeout, "timed out"), {"max_retries": 0, "timeout_s": 2.5}, "timed out after 2.5 s"),
        (raises(httpx.RemoteProtocolError, "peer closed connection without sending complete message body"),
         {"max_retries": 0}, "connection error (peer closed connection without sending complete message body)"),
        (raises(httpx.ReadError, ""), {"max_retries": 0}, "connection error (ReadError)"),
        (raises(OSError, "bad descriptor"), {"max_retries": 0}, "connection error (bad descriptor)"),
        (raises(httpx.TooManyRedirects, "Exceeded maximum allowed redirects."), {"max_retries": 3},
         "too many redirects"),
        (raises(httpx.DecodingError, "Error -3 while decompressing data"), {"max_retries": 3},
         "response is not readable (Error -3 while decompressing data)"),
    ]
    for handler, probe_kw, error in cases:
        backend = OpenAIBackend(probe(url, backoff_s=0.0, **probe_kw))
        sent = stand_in(backend, handler)
        (r,) = backend.generate(["p"])
        assert matches(r["error"], f"{url}/chat/completions: {error}"), (error, r["error"])
        assert len(sent) == (2 if "after 2 attempts" in error else 1), error


def test_connections_are_kept_and_reused(planted):
    """HTTP keep-alive: N requests at concurrency c open at most c connections to the server, across generate
    calls; close() closes them, and the next request opens a new one."""
    sim, prompts = planted
    with SimulatedOpenAIServer(sim) as server:
        with OpenAIBackend(probe(server.base_url, concurrency=4)) as backend:
            backend.check_endpoint()
            assert [r["error"] for r in backend.generate(prompts[:40])] == [None] * 40
            assert [r["error"] for r in backend.generate(prompts[40:60])] == [None] * 20
            assert server.stats["requests"] == 60 and 1 <= server.stats["connections"] <= 4
            opened = server.stats["connections"]
            backend.close()
            assert backend.generate(prompts[:1])[0]["error"] is None  # closed: a new connection
            assert server.stats["connections"] == opened + 1
        assert backend._client.is_closed  # the context manager closed it


def test_latency_is_the_time_of_the_request_and_workers_are_named(planted):
    """latency_s of an answer and of a failed row is the time from the first try to the end (here at least the
    server's 0.02 s delay); requests go out from threads named raylc-openai (stack dumps, profilers)."""
    sim, prompts = planted
    with SimulatedOpenAIServer(sim, delay_s=0.02) as server:
        backend = OpenAIBackend(probe(server.base_url))
        threads = []
        send = backend._send
        backend._send = lambda *a: threads.append(threading.current_thread().name) or send(*a)  # type: ignore
        (r,) = backend.generate(prompts[:1])
    assert r["error"] is None and 0.02 <= r["latency_s"] < 30
    assert len(threads) == 1 and threads[0].startswith("raylc-openai")
    with SimulatedOpenAIServer(sim, fail_rate=1.0, stall_rate=1.0, stall_s=0.02) as server:
        (failed,) = OpenAIBackend(probe(server.base_url, max_retries=0)).generate(prompts[:1])
    assert failed["error"].endswith("HTTP 503 (injected failure)") and 0.02 <= failed["latency_s"] < 30


# --- retry budget, usage warning endpoint, the served window (issue #28, item 7) ---------------


def test_retries_outlast_a_server_restart_within_retry_budget_s(planted, monkeypatch):
    """A server that goes away and comes back on the same port (vLLM takes ~30 s): with
    max_retries 1 the requests would give up at once; retry_budget_s keeps them retrying. The
    server comes back only once each of the 4 requests (a thread each) has been retried past
    max_retries, so every one of them waited for it, however loaded the machine is."""
    sim, prompts = planted
    port = free_port()
    first = SimulatedOpenAIServer(sim, port=port).start()
    backend = OpenAIBackend(probe(first.base_url, max_retries=1, backoff_s=0.05, retry_budget_s=20.0, concurrency=4))
    assert backend.generate(prompts[:1])[0]["error"] is None
    first.stop()
    second = SimulatedOpenAIServer(sim, port=port)
    past_max, lock, all_past = set(), threading.Lock(), threading.Event()
    retry = backend._retry

    def counted(attempts: int, elapsed: float) -> bool:
        if attempts > 1:  # a retry that only retry_budget_s allows
            with lock:
                past_max.add(threading.get_ident())
                if len(past_max) == 4:
                    all_past.set()
        return retry(attempts, elapsed)

    monkeypatch.setattr(backend, "_retry", counted)
    restart = threading.Thread(target=lambda: all_past.wait(20) and second.start())
    restart.start()
    try:
        results = backend.generate(prompts[1:5])
    finally:
        restart.join()
        second.stop()
    assert all_past.is_set(), f"{len(past_max)} of 4 requests were retried past max_retries"
    assert [r["error"] for r in results] == [None] * 4
    assert [r["completion"] for r in results] == [sim.answer(p) for p in prompts[1:5]]


def test_retry_budget_gives_up_naming_it_and_a_long_outage_costs_later_requests_max_retries():
    """The rule: retried while attempts remain, or while the request and the outage are younger than
    retry_budget_s. On an endpoint that stays down the first request retries for the budget, the next
    ones (the outage already older than it) only max_retries times; every wait is bounded."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend(probe(url, max_retries=1, backoff_s=0.05, retry_budget_s=0.6, concurrency=1))
    t0 = time.monotonic()
    first, *later = backend.generate(["p", "q", "r"])
    assert time.monotonic() - t0 < 8.0  # about 1 s; a busy machine slows the refused connects
    head = re.escape(f"{url}/chat/completions: connection error (Connection refused)")
    m = re.fullmatch(head + r"; gave up after (\d+) attempts over (\d+\.\d) s "
                     r"\(probe\.max_retries 1, probe\.retry_budget_s 0\.6\)", first["error"])
    assert m and int(m[1]) > 2 and 0.6 <= float(m[2]) < 2.0, first["error"]
    assert 0.6 <= first["latency_s"] < 2.0
    for r in later:
        assert re.fullmatch(head + gave_up(2, 1, 0.6), r["error"]), r["error"]
    backend.probe = backend.probe.model_copy(update={"max_retries": 0})  # no retry at all: still says why
    (r,) = backend.generate(["s"])
    assert re.fullmatch(
        head + r"; gave up after 1 attempt over \d\.\d s "
        r"\(probe\.max_retries 0, probe\.retry_budget_s 0\.6\)",
        r["error"],
    ), r["error"]
    # a reply ends the outage: the budget applies afresh
    assert backend._outage(False) == 0.0 and backend._failing_since is None


def test_retry_budget_is_operational_and_bounded():
    from raylc.spec import probe_settings

    a, b = OpenAIProbe(**{**probe("http://h/v1").model_dump(), "retry_budget_s": 300.0}), probe("http://h/v1")
    assert "retry_budget_s" in OpenAIProbe.OPERATIONAL and probe_settings(a) == probe_settings(b)
    assert OpenAIProbe(backend="openai", base_url="http://h/v1", model="m").retry_budget_s == 300.0
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            probe("http://h/v1", retry_budget_s=bad)


def test_usage_warning_names_the_endpoint_the_request_went_to(planted, capsys):
    """In chat mode a raw request goes to /completions: the usage warning names /completions."""
    sim, _ = planted
    long = TEMPLATE.format(context=" ".join(["filler"] * 3000), question="What is the code of vault V-9?")
    with SimulatedOpenAIServer(sim, usage_scale=0.003) as server:
        backend = OpenAIBackend(probe(server.base_url, mode="chat"))
        (r,) = backend.generate([long], raw=[True])
        assert server.routes == ["/v1/completions"] and r["error"] is None
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and warning[0].startswith(f"warning: {server.base_url}/completions reported "), warning


def test_check_endpoint_returns_the_listed_models_and_the_served_window(planted):
    sim, _ = planted
    with SimulatedOpenAIServer(sim, listed_models=["simulated", "other"]) as server:
        info = OpenAIBackend(probe(server.base_url)).check_endpoint()
        assert (info.models, info.max_model_len) == (("simulated", "other"), None)
        assert OpenAIBackend(probe(server.base_url.replace("/v1", "/v2"))).check_endpoint().models is None  # no route
    backend = OpenAIBackend(probe("http://127.0.0.1:9/v1"))
    vllm_models = {"object": "list", "data": [  # vLLM's /v1/models: each entry carries max_model_len
        {"id": "other", "object": "model", "max_model_len": 4096},
        {"id": "simulated", "object": "model", "owned_by": "vllm", "max_model_len": 32768}]}
    backend._send = lambda url, body, timeout: vllm_models  # type: ignore[assignment]
    assert backend.check_endpoint().max_model_len == 32768
    for bad in (None, 0, -5, "32768", True):
        vllm_models["data"][1]["max_model_len"] = bad
        assert backend.check_endpoint().max_model_len is None, bad
    for reply in ({"data": None}, {"data": {"id": "x"}}, {"data": "simulated"}):  # no list: nothing listed
        backend._send = lambda url, body, timeout, reply=reply: reply  # type: ignore[assignment]
        assert backend.check_endpoint() == openai_http.EndpointInfo((), None), reply
    with SimulatedOpenAIServer(sim) as server:
        with pytest.raises(BackendUnavailable, match=r"set judge\.check_model: false") as err:
            OpenAIBackend(probe(server.base_url, model="llama")).check_endpoint("judge")
    assert err.value.key == "model"  # type: ignore[attr-defined]
    with pytest.raises(BackendUnavailable) as err:
        OpenAIBackend(probe(f"http://127.0.0.1:{free_port()}/v1")).check_endpoint()
    assert err.value.key == "base_url"  # type: ignore[attr-defined]
