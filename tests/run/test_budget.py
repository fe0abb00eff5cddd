"""The run-time cap on prompt tokens (:mod:`raylc.run.budget`): the arithmetic of which requests
go, in the scheduler's order; then the quickstart stopped part-way by a cap, reported as
stopped, resumed with a higher cap, its tables equal to an uncapped run's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_runner import raylc
from hypothesis import given
from hypothesis import strategies as st

from raylc.run.budget import TokenBudget, first_fit
from raylc.run.folder import RunFolder
from raylc.run.status import run_status

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
from table_hashes import hashes  # noqa: E402

counts = st.lists(st.integers(0, 5_000), max_size=60)


@given(counts, st.integers(-1_000, 100_000))
def test_the_requests_sent_fit_the_cap_and_none_left_out_would(tokens, room):
    """In the scheduler's order: the kept requests sum to at most the room; each one left out
    did not fit what the requests before it left, so adding it to the kept ones would pass the
    room; what is left is the room less the kept tokens."""
    tokens = np.array(tokens, dtype=np.int64)
    take, left = first_fit(tokens, room)
    kept = int(tokens[take].sum())
    assert kept <= max(room, 0) and left == room - kept
    for i in np.flatnonzero(~take):
        assert int(tokens[:i][take[:i]].sum()) + tokens[i] > room
        assert kept + tokens[i] > room
    if tokens.sum() <= room:
        assert take.all()


@given(counts, st.lists(st.integers(0, 60), max_size=4), st.integers(0, 60_000), st.integers(0, 30_000))
def test_chunk_by_chunk_is_the_same_as_all_at_once(tokens, cuts, cap, sent):
    """The infer stage streams its pending requests in chunks: the budget keeps the same rows as
    one pass over them all, and counts what it left out."""
    frame = pl.DataFrame({"i": np.arange(len(tokens)), "n": pl.Series(tokens, dtype=pl.Int64)})
    bounds = sorted({0, len(tokens), *(min(c, len(tokens)) for c in cuts)})
    chunks = [frame.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
    budget = TokenBudget(cap, sent)
    kept = pl.concat([c for c in budget.select(chunks, lambda c: c["n"].to_numpy())] or [frame.clear()])
    take, left = first_fit(np.array(tokens, dtype=np.int64), cap - sent)
    assert kept["i"].to_list() == np.flatnonzero(take).tolist() and budget.left == left
    assert budget.kept == kept.height and budget.left_out == len(tokens) - kept.height
    assert budget.left_out_tokens == sum(tokens) - int(kept["n"].sum())
    stop = budget.reached(sent + int(kept["n"].sum()), 7, "infer", "r")
    assert stop.exit_code == 3 and stop.budget.left == budget.left_out and "\n" not in str(stop)
    assert str(stop).startswith(f"stopped at its budget during infer: {sent + int(kept['n'].sum()):,} of {cap:,} ")


@pytest.mark.parametrize("value", ["-5", "0", "1.5", "1e6", "lots", "", "٣"])
def test_a_bad_cap_is_one_line_and_exit_2(tmp_path, value):
    out = raylc("run", ROOT / "jobs" / "quickstart.yaml", "--store", tmp_path, f"--max-prompt-tokens={value}")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"error: --max-prompt-tokens {value!r}: expected a whole number of tokens >= 1 "
                                  "(e.g. 2000000)")
    assert not list(tmp_path.iterdir())
    bad = raylc("run", ROOT / "jobs" / "quickstart.yaml", "--store", tmp_path, "--set",
                f"inference.max_prompt_tokens={value}")  # the job key takes an integer >= 1 (or null: no cap)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "key 'inference.max_prompt_tokens'" in bad.stderr and not list(tmp_path.iterdir())


#: the quickstart, small: 3 problems per task of 50 to 60 units (1,390 requests, 217,187 prompt tokens)
SMALL = ("--set", "suite.problems_per_task=3", "--set", "suite.max_units=60", "--set", "ray.actor_num_cpus=0.25",
         "--set", "ray.no_progress_timeout_s=300")
PLANNED = 217_187


def _run(store: Path, *args: str):
    return raylc("run", ROOT / "jobs" / "quickstart.yaml", "--store", store, "--run-id", "r", *SMALL, *args)


def _sent(run_dir: Path, shards: str = "infer") -> tuple[int, int]:
    shards = pl.read_parquet(run_dir / shards / "**" / "*.parquet", hive_partitioning=True)
    return int(shards["prompt_tokens"].sum()), shards["request_id"].n_unique()


@pytest.mark.ray
def test_a_capped_run_stops_at_its_cap_says_so_and_resumes_to_the_uncapped_tables(tmp_path, ray_session):
    capped, uncapped = tmp_path / "capped", tmp_path / "uncapped"
    plan = raylc("plan", ROOT / "jobs" / "quickstart.yaml", *SMALL[:4])
    assert plan.returncode == 0 and f"{PLANNED:,}" in plan.stdout

    first = _run(capped, "--max-prompt-tokens", "80000")
    assert first.returncode == 3, first.stderr
    sent, stored = _sent(capped / "r")
    assert 0 < sent <= 80_000 and stored < 1_390
    line = first.stderr.strip().splitlines()[-1]
    assert line.startswith(f"stopped at its budget during infer: {sent:,} of 80,000 prompt tokens sent") and (
        f"{stored:,} requests stored, {1_390 - stored:,} not sent (about {PLANNED - sent:,} prompt tokens more)"
        in line and "--run-id r" in line)
    assert "Traceback" not in first.stderr

    manifest = json.loads((capped / "r" / "manifest.json").read_text())
    infer = manifest["stages"]["infer"]
    assert manifest["version"] == 3 and infer["status"] == "stopped" and "score" not in manifest["stages"]
    assert infer["budget"] == {"max_prompt_tokens": 80_000, "sent": sent, "stored": stored, "left": 1_390 - stored,
                               "left_tokens": PLANNED - sent}
    st_ = run_status(RunFolder(str(capped), "r"))
    assert st_["state"] == "stopped" and st_["stages"]["infer"] == "stopped"
    status = raylc("status", capped / "r", env={"COLUMNS": "250"})
    assert status.returncode == 0 and "stopped" in status.stdout.splitlines()[0]
    assert f"stopped at its budget: {sent:,} of 80,000 prompt tokens sent" in status.stdout
    assert "a higher --max-prompt-tokens" in status.stdout
    report = raylc("report", capped / "r")
    assert report.returncode == 2 and "stopped at its budget during infer" in report.stderr

    again = _run(capped, "--set", "inference.max_prompt_tokens=150000")  # the job key, through --set
    assert again.returncode == 3, again.stderr
    sent_2, stored_2 = _sent(capped / "r")
    assert sent < sent_2 <= 150_000 and stored < stored_2 < 1_390
    assert f"{stored} completions kept from earlier attempts" in again.stderr

    last = _run(capped, "--max-prompt-tokens", str(PLANNED))  # exactly enough
    assert last.returncode == 0, last.stderr
    assert f"{stored_2} completions kept from earlier attempts" in last.stderr
    assert _sent(capped / "r") == (PLANNED, 1_390)  # no request sent twice
    shards = pl.read_parquet(capped / "r" / "infer" / "**" / "*.parquet", hive_partitioning=True)
    assert shards.height == 1_390

    plain = _run(uncapped)
    assert plain.returncode == 0, plain.stderr
    assert hashes(capped / "r") == hashes(uncapped / "r")
    status = raylc("status", capped / "r", env={"COLUMNS": "250"})
    assert status.returncode == 0 and ": done;" in status.stdout.splitlines()[0]


@pytest.mark.ray
def test_a_sweep_planned_within_a_budget_sends_at_most_it(tmp_path, ray_session):
    """`raylc plan --budget-tokens N --write` on a length sweep, then `raylc run` of the planned
    job: the prompt tokens sent are at most N (the planned job carries N as its cap)."""
    budget = 60_000
    sets = ("--set", "suite.tasks=[json_kv, mk_needle_number]", "--set", "suite.lengths=[2048, 4096]",
            "--set", "suite.base_lengths=[2048]", "--set", "suite.samples_per_length=6", "--set", "suite.depths=3",
            "--set", "ray.actor_num_cpus=0.25")
    planned = tmp_path / "planned.yaml"
    plan = raylc("plan", ROOT / "jobs" / "helmet-recall.yaml", *sets, "--budget-tokens", budget, "--write", planned)
    assert plan.returncode == 0, plan.stderr
    assert "suite.samples_per_length (budget)" in plan.stdout
    run = raylc("run", planned, "--store", tmp_path / "store", "--run-id", "s")
    assert run.returncode == 0, run.stderr
    sent, _ = _sent(tmp_path / "store" / "s")
    assert 0 < sent <= budget


def _transformers_stand_in(monkeypatch, vllm) -> None:
    """``transformers.AutoTokenizer`` as the vLLM double's tokenizer (a model folder's
    ``tokenizer.json`` and its chat template, rendered with Jinja2): nothing is downloaded."""
    from vllm._double.model import DoubleTokenizer

    module = type(sys)("transformers")
    module.AutoTokenizer = type("AutoTokenizer", (), {"from_pretrained": staticmethod(DoubleTokenizer)})
    monkeypatch.setitem(sys.modules, "transformers", module)


def _in_process(monkeypatch) -> None:
    """The run's inference path without Ray: each request file through the backend's stages in
    this process (prepare with the engine's tokenizer, then the engine double), into the shards."""
    import pyarrow as pa
    from in_process import infer_frame

    from raylc.run import pipeline

    def stream(source, job, ledger=None, stages=None):
        problems = source.folder.read(source.table)
        for f in source.files:
            yield infer_frame(source.rows(pa.table({pipeline.FILE: [f]})), problems, job)

    monkeypatch.setattr(pipeline, "stream", stream)
    monkeypatch.setattr(pipeline, "ensure_ray", lambda job: None)


def test_a_chat_template_is_counted_so_a_capped_run_stays_at_or_under_its_cap(tmp_path, monkeypatch):
    """A vLLM probe whose engine renders each prompt through a chat template (the engine double,
    ChatML): the capped DOLCE run's prompt tokens sent (the backend's count, as `raylc status`
    shows it) stay at or under the cap: counted exactly by the backend's own prepare stage, or
    else estimated with the template's tokens added; counted without them (no exact count, the
    backend's ``added_tokens`` as 0) the same run passes the cap."""
    from doubles import vllm_double
    from doubles.model_dir import make_model_dir

    from raylc.backends.builtin import VLLM
    from raylc.dolce.plan import plan
    from raylc.evaluate import evaluate
    from raylc.run.errors import BudgetReached
    from raylc.spec import Job

    model = make_model_dir(tmp_path / "m", chat_template=True, double={"prefill_tokens_per_s": 1e7,
                                                                        "decode_step_s": 0.0001})
    job = Job(name="chat", suite={"kind": "planted", "problems_per_task": 2, "min_units": 20, "max_units": 30},
              sampling={"lengths": [0, 1, 5, "L"]},
              probe={"backend": "vllm", "model": str(model), "max_model_len": 8192, "device": "cpu",
                     "sampling": {"max_tokens": 4}},
              store={"path": str(tmp_path / "s")}, ray={"batch_size": 4096})
    with vllm_double() as vllm:
        _transformers_stand_in(monkeypatch, vllm)
        _in_process(monkeypatch)
        added = VLLM().added_tokens(job.probe)
        assert added >= 12 and VLLM().added_tokens(job.probe, raw=True) == 0  # ChatML's tokens; no BOS
        planned = plan(job)
        assert plan(job, overhead_tokens=0).prompt_tokens + added * planned.requests == planned.prompt_tokens
        cap = planned.prompt_tokens // 2

        def capped_run(run_id: str) -> tuple[int, int]:
            with pytest.raises(BudgetReached) as stop:
                evaluate(job.model_copy(update={"inference": job.inference.model_copy(
                    update={"max_prompt_tokens": cap})}), run_id, log=lambda m: None)
            sent = _sent(tmp_path / "s" / run_id)
            assert stop.value.budget.sent == sent[0] == run_status(RunFolder(str(tmp_path / "s"), run_id))[
                "budget"][1].sent
            return sent

        sent, stored = capped_run("counted")
        assert 0.99 * cap < sent <= cap and 0 < stored < planned.requests  # exact: first fit leaves little
        # the plan's estimate plus the template's measured tokens (a backend that cannot count exactly)
        monkeypatch.setattr(VLLM, "prompt_counter", lambda self, job, problems: None)
        estimated, _ = capped_run("estimated")
        assert 0.95 * cap < estimated <= cap  # the margin: 2 tokens a request
        monkeypatch.setattr(VLLM, "added_tokens", lambda self, probe, raw=False: 0)
        blind, blind_stored = capped_run("blind")
        assert blind > cap and blind_stored > stored


def test_an_openai_chat_endpoint_adds_its_tokenizers_template_when_it_has_one(tmp_path, monkeypatch):
    """The server applies the template: counted with ``probe.tokenizer``'s (``hf:``) when it has
    one; a `/completions` request, a raw one, or a probe without such a tokenizer adds none."""
    from doubles import vllm_double
    from doubles.model_dir import make_model_dir

    from raylc.backends.builtin import VLLM, OpenAI
    from raylc.backends.config import OpenAIProbe, VLLMProbe

    chat, base = make_model_dir(tmp_path / "chat", chat_template=True), make_model_dir(tmp_path / "base")

    def probe(**kw):
        return OpenAIProbe(backend="openai", base_url="http://127.0.0.1:9/v1", model="m", **kw)

    with vllm_double() as vllm:
        _transformers_stand_in(monkeypatch, vllm)
        added = VLLM().added_tokens(VLLMProbe(backend="vllm", model=str(chat)))
        assert OpenAI().added_tokens(probe(tokenizer=f"hf:{chat}")) == added > 0
        assert OpenAI().added_tokens(probe(tokenizer=f"hf:{chat}"), raw=True) == 0
        assert OpenAI().added_tokens(probe(tokenizer=f"hf:{chat}", mode="completions")) == 0
        assert OpenAI().added_tokens(probe(tokenizer=f"hf:{base}")) == 0  # no template: not known here
        assert OpenAI().added_tokens(probe()) == 0


@pytest.mark.ray  # the report stage's LongScore maps over Ray tasks
def test_a_capped_length_sweep_on_a_chat_template_engine_stays_at_or_under_its_cap(tmp_path, monkeypatch,
                                                                                    ray_session):
    """The same for a length sweep (HELMET recall, chat prompts, the engine double in process):
    the backend's exact count keeps the prompt tokens sent at or under the cap, and a higher cap
    resumes to every request, none sent twice."""
    from doubles import vllm_double
    from doubles.model_dir import make_model_dir

    from raylc.evaluate import evaluate
    from raylc.run.errors import BudgetReached
    from raylc.spec import load_job

    model = make_model_dir(tmp_path / "m", chat_template=True, double={"prefill_tokens_per_s": 1e7,
                                                                        "decode_step_s": 0.0001})
    settings = {"suite.tasks": ["json_kv"], "suite.lengths": [2048, 4096], "suite.base_lengths": [2048],
                "suite.samples_per_length": 4, "suite.depths": 2, "suite.chat_template": "probe",
                "probe": {"backend": "vllm", "model": str(model), "max_model_len": 8192, "device": "cpu",
                          "sampling": {"max_tokens": 8}},
                "store.path": str(tmp_path / "s")}
    with vllm_double() as vllm:
        _transformers_stand_in(monkeypatch, vllm)
        _in_process(monkeypatch)
        full = load_job(ROOT / "jobs" / "helmet-recall.yaml", settings)
        evaluate(full, "full", log=lambda m: None)
        total, requests = _sent(tmp_path / "s" / "full")
        cap = total // 2
        capped = full.model_copy(update={"inference": full.inference.model_copy(update={"max_prompt_tokens": cap})})
        with pytest.raises(BudgetReached):
            evaluate(capped, "capped", log=lambda m: None)
        sent, stored = _sent(tmp_path / "s" / "capped")
        assert 0.8 * cap < sent <= cap and 0 < stored < requests
        evaluate(full, "capped", log=lambda m: None)  # no cap: the rest
        assert _sent(tmp_path / "s" / "capped") == (total, requests)


def test_a_failure_the_server_answered_counts_against_the_cap_on_resume(tmp_path, monkeypatch):
    """Half the first attempt's requests come back empty (a content filter: the server processed
    the prompt and said why it stopped); the run fails on its error budget. Resumed with the cap
    at the tokens the first attempt sent, the run has no room left: the failed requests' first
    sends count, so over both attempts the server is sent at most the cap (the resume used to
    send them all again, counting only stored successes)."""
    import pyarrow as pa
    from in_process import infer_frame

    from raylc.evaluate import evaluate
    from raylc.run import pipeline
    from raylc.run.errors import BudgetReached, InferenceFailed
    from raylc.spec import load_job

    filtered = {"on": True}

    def stream(source, job, ledger=None, stages=None):
        problems = source.folder.read(source.table)
        for f in source.files:
            rows = infer_frame(source.rows(pa.table({pipeline.FILE: [f]})), problems, job)
            empty = (pl.int_range(pl.len()) % 2 == 0) & filtered["on"]
            yield rows.with_columns(
                completion=pl.when(empty).then(None).otherwise(pl.col("completion")),
                finish_reason=pl.when(empty).then(pl.lit("content_filter")).otherwise(pl.col("finish_reason")),
                error=pl.when(empty).then(pl.lit("empty completion (content null)")).otherwise(pl.col("error")))

    monkeypatch.setattr(pipeline, "stream", stream)
    monkeypatch.setattr(pipeline, "ensure_ray", lambda job: None)
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"suite.problems_per_task": 2, "suite.min_units": 20,
                                                        "suite.max_units": 40, "store.path": str(tmp_path / "s")})
    with pytest.raises(InferenceFailed):
        evaluate(job, "r", log=lambda m: None)
    first, requests = _sent(tmp_path / "s" / "r")  # every request once, about half of them failed
    failed = pl.read_parquet(tmp_path / "s" / "r" / "infer" / "**" / "*.parquet")["error"].is_not_null().sum()
    assert first > 0 and 0.3 * requests < failed < 0.7 * requests
    filtered["on"] = False
    capped = job.model_copy(update={"inference": job.inference.model_copy(update={"max_prompt_tokens": first})})
    with pytest.raises(BudgetReached) as stop:
        evaluate(capped, "r", log=lambda m: None)
    assert stop.value.budget.sent == first == _sent(tmp_path / "s" / "r")[0]  # nothing more sent
    assert stop.value.budget.left == failed and stop.value.budget.stored == requests - failed


def test_the_judges_calls_share_the_cap(tmp_path, monkeypatch):
    """A length run with an LLM judge (100-LongBench's QA and summaries; the simulated probe and
    judge, in process): the cap counts the judge's calls with the probe's. A cap between the
    probe's prompt tokens and the run's total stops the run in its score stage with both at or
    under it; a resume without the cap sends the rest, no call twice, to an uncapped run's tables."""
    from raylc.evaluate import evaluate
    from raylc.run.errors import BudgetReached
    from raylc.spec import load_job

    settings = {"suite.tasks": ["single_doc_qa", "single_doc_sum"], "suite.lengths": [2048],
                "suite.base_lengths": [2048], "suite.samples_per_length": 4, "store.path": str(tmp_path / "s")}
    _in_process(monkeypatch)
    full = load_job(ROOT / "jobs" / "longbench100.yaml", settings)
    evaluate(full, "full", log=lambda m: None)
    probe, judge = _sent(tmp_path / "s" / "full"), _sent(tmp_path / "s" / "full", "judge")
    assert probe[0] > 0 and judge[1] >= 4
    cap = probe[0] + judge[0] // 2
    capped = full.model_copy(update={"inference": full.inference.model_copy(update={"max_prompt_tokens": cap})})
    with pytest.raises(BudgetReached) as stop:
        evaluate(capped, "capped", log=lambda m: None)
    sent = _sent(tmp_path / "s" / "capped"), _sent(tmp_path / "s" / "capped", "judge")
    assert sent[0] == probe and 0 < sent[1][1] < judge[1]  # every probe request, some judge calls
    assert stop.value.budget.sent == sent[0][0] + sent[1][0] <= cap and "during score" in str(stop.value)
    manifest = json.loads((tmp_path / "s" / "capped" / "manifest.json").read_text())
    assert manifest["stages"]["score"]["status"] == "stopped"
    evaluate(full, "capped", log=lambda m: None)  # no cap: the rest
    assert (_sent(tmp_path / "s" / "capped"), _sent(tmp_path / "s" / "capped", "judge")) == (probe, judge)
    assert hashes(tmp_path / "s" / "capped") == hashes(tmp_path / "s" / "full")
    # room for the probe only: the stop counts every judge call left, the QA judge's and the summaries'
    # (each metric's calls were offered the cap in turn, and the stop counted only the first metric's)
    smallest = int(pl.read_parquet(tmp_path / "s" / "full" / "judge" / "**" / "*.parquet")["prompt_tokens"].min())
    room = probe[0] + smallest // 2
    tight = full.model_copy(update={"inference": full.inference.model_copy(update={"max_prompt_tokens": room})})
    with pytest.raises(BudgetReached) as stop:
        evaluate(tight, "tight", log=lambda m: None)
    assert (stop.value.budget.left, stop.value.budget.stored) == (judge[1], probe[1])
    assert stop.value.budget.left_tokens >= judge[0]  # as the plan counts them: at most, never fewer


def test_a_plan_counts_the_judges_calls_as_the_cap_does(tmp_path):
    """`raylc plan` of a job with judge metrics gives the judge's calls and their prompt tokens,
    at most (each answer at its max_tokens), and a budget counts them; a job without a judge
    metric plans none."""
    from raylc.io.plans import PlanError
    from raylc.spec import load_job
    from raylc.sweep.plan import plan_sweep

    settings = {"suite.tasks": ["single_doc_qa", "kv_retrieval"], "suite.lengths": [2048],
                "suite.base_lengths": [2048], "suite.samples_per_length": 3}
    job = load_job(ROOT / "jobs" / "longbench100.yaml", settings)
    planned = plan_sweep(job)
    per_task = dict(zip(planned.lengths["task"], planned.lengths["judge_calls"]))
    assert per_task["kv_retrieval"] == 0 and per_task["single_doc_qa"] >= 3  # a call per gold answer
    assert planned.judge_prompt_tokens > per_task["single_doc_qa"] * job.max_tokens()
    assert planned.capped_tokens == planned.prompt_tokens + planned.judge_prompt_tokens
    summary = dict(planned.summary().iter_rows())
    assert summary["judge prompt tokens (at most; the cap counts them)"] == f"{planned.judge_prompt_tokens:,}"
    within = plan_sweep(job, planned.prompt_tokens)  # enough for the probe's requests, not for the judge's too
    assert within.job.suite.samples_per_point() < 3 and within.capped_tokens <= planned.prompt_tokens
    assert within.job.inference.max_prompt_tokens == planned.prompt_tokens
    assert "judge_calls" not in plan_sweep(load_job(ROOT / "jobs" / "longbench100.yaml", {
        **settings, "suite.tasks": ["kv_retrieval"]})).lengths.columns
    unloadable = {"backend": "vllm", "model": str(tmp_path / "no-model"), "max_model_len": 8192}
    with pytest.raises(PlanError, match=r"set judge\.tokenizer$"):  # the judge's, not the probe's
        plan_sweep(load_job(ROOT / "jobs" / "longbench100.yaml", {**settings, "judge": unloadable}))
