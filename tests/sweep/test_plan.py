"""``raylc plan`` of a length sweep (:mod:`raylc.sweep.plan`): the samples that do not fit the
probe's window are counted and warned about; a token budget picks the samples per length that
fit; the run's cap counts a request as the plan does."""

from pathlib import Path

import polars as pl
import pytest
from cli_runner import raylc
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.io.plans import PlanError
from raylc.spec import load_job
from raylc.sweep.plan import plan_sweep, request_tokens, sent_tokens
from raylc.sweep.stages import build_samples, requests
from raylc.text.tokenize import get_tokenizer

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "helmet-recall-vllm-128k.yaml"
SMALL = {"suite.tokenizer": None, "probe.tokenizer": None, "suite.tasks": ["json_kv"], "suite.lengths": [1024, 4096],
         "suite.base_lengths": [1024], "suite.samples_per_length": 3, "suite.depths": 3}


def test_samples_over_the_window_are_counted_and_warned():
    fits = plan_sweep(load_job(JOB, {**SMALL, "probe.max_model_len": 8192}))
    assert fits.lengths["truncated"].to_list() == [0, 0] and fits.warnings() == []
    cut = plan_sweep(load_job(JOB, {**SMALL, "probe.max_model_len": 4096}))  # 4096-token contexts + instruction
    assert cut.lengths.select("length", "truncated").rows() == [(1024, 0), (4096, 3)]
    assert cut.warnings() == [
        "3 of 6 samples (at lengths 4096) do not fit probe.max_model_len 4,096 with their max_tokens: truncation "
        "'end' cuts their contexts, so the model sees less than the target length (scores.parquet flags them: "
        "truncated, visible_tokens)"]


def test_raylc_plan_prints_the_warning():
    sets = [a for k, v in {**SMALL, "probe.max_model_len": 4096}.items()
            for a in ("--set", f"{k}={'null' if v is None else v}")]
    out = raylc("plan", JOB, *sets, cwd=ROOT)  # the job's hf_config is relative to the repository
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("warning: 3 of 6 samples (at lengths 4096) do not fit")


HELMET = ROOT / "jobs" / "helmet-recall.yaml"
BUDGETED = {"suite.tasks": ["json_kv", "mv_needle"], "suite.lengths": [1024, 2048], "suite.base_lengths": [1024],
            "suite.samples_per_length": 9, "suite.depths": 3}


@pytest.fixture(scope="module")
def by_samples():
    """Planned prompt tokens of the small HELMET job at each samples_per_length 1..9."""
    job = load_job(HELMET, BUDGETED)
    return {n: plan_sweep(job.model_copy(update={"suite": job.suite.with_samples(n)})).prompt_tokens
            for n in range(1, 10)}


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_a_budget_plans_at_most_n_prompt_tokens_and_as_many_samples_as_fit(by_samples, data):
    """Planned <= N, never above; one more sample per length (up to the job's 9) would pass N;
    the planned job asks for those samples and carries N as its run-time cap."""
    budget = data.draw(st.integers(by_samples[1], by_samples[9] + 5_000))
    planned = plan_sweep(load_job(HELMET, BUDGETED), budget)
    k = planned.job.suite.samples_per_length
    assert planned.prompt_tokens == by_samples[k] <= budget
    assert k == 9 or by_samples[k + 1] > budget
    assert planned.job.inference.max_prompt_tokens == budget and planned.samples_asked == 9
    assert f"(budget {budget:,})" in planned.to_yaml().splitlines()[0]
    summary = dict(planned.summary().rows())
    assert summary["suite.samples_per_length (budget)"] == f"{k} of the job's 9"
    assert summary["budget (prompt tokens)"].startswith(f"{budget:,} (")


def test_a_budget_that_cannot_be_planned_is_one_line(by_samples):
    with pytest.raises(PlanError, match=r"below the cheapest plan \(.* one sample per task and length\)"):
        plan_sweep(load_job(HELMET, BUDGETED), by_samples[1] - 1)
    out = raylc("plan", ROOT / "jobs" / "longbench.yaml", "--budget-tokens", "5000")
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: suite kind 'longbench' runs every record of its data: --budget-tokens chooses samples per length, "
        "which it has none of; narrow its data, or cap the run with --max-prompt-tokens"]


def test_a_pending_request_is_counted_as_the_plan_counts_it():
    """The run's cap counts each request as the plan does: round-one requests of every sample sum
    to the plan's prompt tokens (windows included)."""
    job = load_job(JOB, {**SMALL, "probe.max_model_len": 4096})
    samples = build_samples(job)
    tokens = sent_tokens(requests(samples, job), samples, get_tokenizer(None), job)
    assert int(tokens.sum()) == plan_sweep(job, overhead_tokens=0).prompt_tokens


def test_the_cap_adds_what_the_backend_adds_to_each_request():
    """A chat template's tokens on every request, a raw one's (no template: special tokens) on a
    ``raw_prompt`` request, in the plan and in the run's count alike."""
    job = load_job(JOB, {**SMALL, "probe.max_model_len": 131072})
    samples = build_samples(job)
    samples = samples.with_columns(raw_prompt=pl.int_range(pl.len()) % 2 == 0)
    reqs, tok = requests(samples, job), get_tokenizer(None)
    added = sent_tokens(reqs, samples, tok, job, 7, 1) - sent_tokens(reqs, samples, tok, job)
    assert added.tolist() == [1 if raw else 7 for raw in reqs["raw_prompt"]]
    first, *_ = request_tokens(samples, tok, job.max_tokens(), 7, raw_overhead=1)
    assert (first - request_tokens(samples, tok, job.max_tokens())[0]).tolist() == added.tolist()
