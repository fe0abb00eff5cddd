"""raylc plan: token counts, the budget search (acceptance item 1), the planned job file and
the prefix-reuse model (acceptance item 4)."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from in_process import infer_frame
from typer.testing import CliRunner

from raylc.cli import app
from raylc.dolce import stages
from raylc.dolce.plan import PlanError, plan, prefill_tokens, prefix_order, prompt_pieces, prompt_tokens
from raylc.spec import load_job
from raylc.text.prompts import render_prompts
from raylc.text.sampling import Sampling, sample_spans
from raylc.text.tokenize import get_tokenizer

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "jobs" / "quickstart.yaml"


def _job(problems_per_task=25, max_units=400, **sampling):
    job = load_job(QUICKSTART, {"suite.problems_per_task": problems_per_task, "suite.max_units": max_units,
                                "suite.min_units": min(50, max_units)})
    if not sampling:
        return job
    return job.model_copy(update={"sampling": Sampling(**{**job.sampling.model_dump(), **sampling})})


@pytest.fixture(scope="module")
def quick():
    """A reduced quickstart (2 x 25 problems, L in [50, 400]): job, problems, their pieces, cheapest and full plans."""
    job = _job()
    problems = stages.build(job)
    pieces = prompt_pieces(problems, get_tokenizer(None))
    full = plan(job.model_copy(update={"sampling": Sampling(strategy="enumerate")}), problems=problems,
                pieces=pieces).prompt_tokens
    cheapest = plan(_job(every=401, stride_fraction=0.0), problems=problems, pieces=pieces).prompt_tokens
    return job, (problems, pieces), cheapest, full


def _plan(job, n, built):
    return plan(job, n, problems=built[0], pieces=built[1])


def _bpe(pre: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if pre == "bytelevel":
        tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer, tok.decoder, alphabet = pre_tokenizers.Metaspace(), decoders.Metaspace(), []
    problems = stages.build(_job(problems_per_task=10))
    texts = [" ".join(u) for u in problems["units"].to_list()] + render_prompts(
        problems.select("task", "problem_id", "L", C=pl.lit(0), start=pl.lit(0)), problems).to_list()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=800, show_progress=False, initial_alphabet=alphabet))
    return tok


@pytest.mark.parametrize("tokenizer", ["default", "bytelevel", "metaspace"])
def test_prompt_tokens_match_rendered_prompts(tmp_path, tokenizer):
    """Every span of a small job: the per-piece estimate equals the exact count of the rendered
    prompt (default tokenizer: an upper bound, exact on the planted suite; BPE: at most +1)."""
    job = _job(problems_per_task=3, max_units=60, strategy="enumerate")
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    if tokenizer == "default":
        spec = None
    else:
        _bpe(tokenizer).save(str(tmp_path / "tokenizer.json"))
        spec = f"hf:{tmp_path / 'tokenizer.json'}"
    tok = get_tokenizer(spec)
    estimate = prompt_tokens(spans, prompt_pieces(problems, tok))
    exact = np.array([tok.count(p) for p in render_prompts(spans, problems).to_list()])
    assert spans.height > 1000
    excess = estimate - exact
    assert excess.min() >= 0 and excess.max() <= (0 if tokenizer == "default" else 1)


@settings(max_examples=200, deadline=None)
@given(a=st.text(max_size=30), b=st.text(max_size=30))
def test_default_tokenizer_is_subadditive(a, b):
    """Why the per-piece sum never underestimates with the default tokenizer."""
    tok = get_tokenizer(None)
    assert tok.count(a + b) <= tok.count(a) + tok.count(b)


def test_a_run_sends_exactly_the_planned_prompt_tokens():
    job = _job(problems_per_task=4, max_units=120)
    problems = stages.build(job)
    planned = plan(job, problems=problems)
    sent = infer_frame(planned.spans.drop("prompt_tokens"), problems, job)  # simulated probe, in-process
    assert sent["prompt_tokens"].to_list() == planned.spans["prompt_tokens"].to_list()
    assert planned.generated_tokens == planned.requests * 32 >= sent["generated_tokens"].sum()


def test_budget_fits_and_uses_at_least_90_percent(quick):
    """Acceptance item 1: planned <= N, and >= 0.9 N for N between the cheapest plan and full enumeration."""
    job, built, cheapest, full = quick
    budgets = [cheapest, full, *np.geomspace(cheapest, full, 9).astype(int)[1:-1], full - 1, cheapest + 1]
    for n in budgets:
        p = _plan(job, int(n), built)
        assert 0.9 * n <= p.prompt_tokens <= n, (n, p.prompt_tokens)
        assert p.job.sampling.strategy == "take_every" and p.job.sampling.stride_fraction == 0.0
        assert p.lengths.filter(pl.col("stride").is_not_null())["stride"].min() >= 1


@settings(max_examples=12, deadline=None)
@given(fraction=st.floats(0.0, 1.0))
def test_budget_search_property(quick, fraction):
    job, built, cheapest, full = quick
    n = int(cheapest + fraction * (full - cheapest))
    p = _plan(job, n, built)
    assert 0.9 * n <= p.prompt_tokens <= n


def test_budget_above_full_enumeration_gives_full_enumeration(quick):
    job, built, _, full = quick
    p = _plan(job, 10 * full, built)
    assert p.prompt_tokens == full and p.job.sampling.every == 1
    assert p.spans.sort("problem_id", "C", "start").select("problem_id", "C", "start").equals(
        sample_spans(built[0], Sampling(strategy="enumerate")).sort("problem_id", "C", "start").select(
            "problem_id", "C", "start"))


def test_budget_below_cheapest_plan_is_a_clear_error(quick, tmp_path):
    job, built, cheapest, _ = quick
    with pytest.raises(PlanError, match=f"below the cheapest plan \\({cheapest:,} tokens"):
        _plan(job, cheapest - 1, built)
    small = tmp_path / "small.yaml"
    small.write_text(QUICKSTART.read_text().replace("problems_per_task: 100", "problems_per_task: 3"))
    out = tmp_path / "planned.yaml"
    result = CliRunner().invoke(app, ["plan", str(small), "--budget-tokens", "1000", "--write", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: budget of 1,000 prompt tokens is below the cheapest plan")
    assert result.output.count("\n") == 1 and not out.exists() and list(tmp_path.iterdir()) == [small]


def test_written_plan_runs_exactly_the_planned_spans(quick, tmp_path):
    """The --write file loads as a job whose sample stage gives the planned spans and tokens, and
    whose run-time cap is the budget (the job's own cap when lower)."""
    job, built, _, full = quick
    p = _plan(job, int(0.3 * full), built)
    assert isinstance(p.job.sampling.every, dict)  # per-length strides
    out = tmp_path / "planned.yaml"
    p.write(out)
    loaded = load_job(out)
    assert loaded.fingerprint() == p.job.fingerprint()
    assert loaded.inference.max_prompt_tokens == int(0.3 * full) >= p.prompt_tokens
    lower = job.model_copy(update={"inference": job.inference.model_copy(update={"max_prompt_tokens": 1000})})
    assert _plan(lower, int(0.3 * full), built).job.inference.max_prompt_tokens == 1000
    rebuilt = stages.build(loaded)
    assert rebuilt.equals(built[0])
    spans = stages.sample(rebuilt, loaded)
    assert spans.height == p.requests
    assert int(prompt_tokens(spans, prompt_pieces(rebuilt, get_tokenizer(None))).sum()) == p.prompt_tokens
    assert prefix_order(spans).equals(p.spans.drop("prompt_tokens"))


def test_cli_plan_prints_the_table_and_writes(tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text(QUICKSTART.read_text().replace("problems_per_task: 100", "problems_per_task: 5"))
    out = tmp_path / "planned.yaml"
    result = CliRunner().invoke(app, ["plan", str(small), "--budget-tokens", "400000", "--price-per-mtok", "2",
                                      "--tokens-per-s-per-gpu", "1000", "--write", str(out)])
    assert result.exit_code == 0, result.output
    for text in ("prompt tokens (planned)", "prefill with prefix reuse", "prefix reuse saving", "GPU-hours", "cost",
                 "stride", f"wrote {out}"):
        assert text in result.output
    assert load_job(out).sampling.strategy == "take_every"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsampling:\n  every: {5: 0}\n")
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2 and result.output.startswith(f"error: {bad}: key 'sampling.every'")
    result = CliRunner().invoke(app, ["plan", str(small), "--tokens-per-s-per-gpu", "0"])
    assert result.exit_code == 2 and "--tokens-per-s-per-gpu '0': expected a number > 0" in result.output


def test_costs_and_generated_tokens():
    job = _job(problems_per_task=2, max_units=80)
    p = plan(job, price_per_mtok=1.5, tokens_per_s_per_gpu=2000.0)
    assert p.generated_tokens == 32 * p.requests
    assert p.dollars == pytest.approx(1.5 * (p.prompt_tokens + p.generated_tokens) / 1e6)
    assert p.gpu_hours(False) == pytest.approx((p.prefill_without_reuse + p.generated_tokens) / 2000 / 3600)
    assert p.gpu_hours(True) < p.gpu_hours(False)
    assert p.lengths["observations"].sum() == p.requests and p.lengths["prompt_tokens"].sum() == p.prompt_tokens


def test_vllm_probe_caps_prompts_at_the_truncation_window():
    job = load_job(QUICKSTART, {"suite.problems_per_task": 2, "suite.max_units": 120,
                                "probe": {"backend": "vllm", "model": "m", "max_model_len": 600,
                                          "sampling": {"max_tokens": 100}}})
    p = plan(job, tokenizer="default")
    assert p.spans["prompt_tokens"].max() == 500 and p.max_tokens == 100
    assert p.tokenizer == "default"


# ---- prefix sharing -------------------------------------------------------------------------

def _true_prefill(spans, problems, block=16):
    """Reference: actual token ids of each rendered prompt, longest common prefix with any earlier one."""
    tok = get_tokenizer(None)
    ids = [np.array(tok.encode(p), dtype=np.uint64) for p in render_prompts(spans, problems).to_list()]
    total = 0
    for i, a in enumerate(ids):
        best = 0
        for b in ids[:i]:
            m = min(len(a), len(b))
            diff = np.flatnonzero(a[:m] != b[:m])
            best = max(best, int(diff[0]) if len(diff) else m)
        total += len(a) - min(best, len(a) - 1) // block * block
    return total


def _distinct_units(problems, seed=0):
    """The problems with every unit replaced by a sentence of random letters: no two units share a first word."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    def sentence():
        return " ".join("".join(rng.choice(letters, 7)) for _ in range(rng.integers(3, 12))).capitalize() + "."
    return problems.with_columns(units=pl.Series([[sentence() for _ in range(L)] for L in problems["L"]]))


@pytest.mark.parametrize("block", [1, 16])
def test_prefill_model_against_actual_token_prefixes(block):
    """Exact when units are distinct; on the planted suite it never overstates the reuse (it ignores
    repeated evidence copies and filler sentences that open with the same words)."""
    job = _job(problems_per_task=1, max_units=50, every=3)
    planted = stages.build(job)
    spans = prefix_order(stages.sample(planted, job))
    distinct = _distinct_units(planted)
    without, with_reuse = prefill_tokens(spans, distinct, block_size=block)
    assert without == int(prompt_tokens(spans, prompt_pieces(distinct, get_tokenizer(None))).sum())
    assert 0 <= with_reuse - _true_prefill(spans, distinct, block) <= (1 if block == 1 else 0)  # one C = 0 token
    assert with_reuse < without
    assert _true_prefill(spans, planted, block) <= prefill_tokens(spans, planted, block_size=block)[1]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), every=st.integers(1, 6), block=st.sampled_from([1, 4, 16]))
def test_prefix_order_groups_shared_prefixes(seed, every, block):
    job = _job(problems_per_task=2, max_units=60, every=every)
    problems = stages.build(job)
    spans = stages.sample(problems, job).sample(fraction=1.0, shuffle=True, seed=seed)
    ordered = prefix_order(spans)
    assert ordered.sort(ordered.columns).equals(spans.sort(spans.columns))  # a permutation
    assert ordered.head(problems.height)["C"].to_list() == [0] * problems.height  # no-context prompts first
    rest = ordered.slice(problems.height)
    runs = rest.select(key=pl.concat_str("problem_id", pl.col("start").cast(pl.String)))["key"]
    assert runs.rle().len() == runs.n_unique()  # each (problem, start) is one contiguous run
    assert rest.group_by("problem_id", "start", maintain_order=True).agg(ok=pl.col("C").diff().drop_nulls().min() > 0)[
        "ok"].fill_null(True).all()  # C ascending within a run
    unbounded = prefill_tokens(spans, problems, block_size=block)
    # an unbounded cache does not care about the order; in prefix order one request back suffices
    assert prefill_tokens(ordered, problems, block_size=block) == unbounded
    assert prefill_tokens(ordered, problems, block_size=block, lookback=1) == unbounded
    shuffled = prefill_tokens(spans, problems, block_size=block, lookback=1)
    assert shuffled[0] == unbounded[0] and shuffled[1] >= unbounded[1]
    assert unbounded[1] <= unbounded[0]


def test_prefix_reuse_saves_on_aligned_exponential_ladder():
    """Take-every alignment: every length starts at the same starts, so a start's prompts nest."""
    job = _job(problems_per_task=3, every=4)
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    without, with_reuse = prefill_tokens(prefix_order(spans), problems)
    assert 0.3 < 1 - with_reuse / without < 0.7
    assert prefill_tokens(spans, problems, lookback=1)[1] > with_reuse  # stage order: neighbours share little


def test_length_sweep_plan_counts_every_request_without_inference():
    from raylc.evaluate import evaluation_for
    from raylc.sweep.plan import SweepPlan
    from raylc.sweep.stages import build_samples
    from raylc.text.tokenize import get_tokenizer

    job = load_job(ROOT / "jobs" / "helmet-recall.yaml", {"suite.lengths": [2048, 4096], "suite.base_lengths": [2048],
                                                          "suite.samples_per_length": 3})
    sweep = evaluation_for(job)
    planned = sweep.plan(job, price_per_mtok=1.0)
    assert isinstance(planned, SweepPlan)
    samples = build_samples(job)
    tok = get_tokenizer(None)
    sent = sum(tok.count(h + c + t) for h, c, t in samples.select("head", "context", "tail").iter_rows())
    assert sent <= planned.prompt_tokens <= sent + samples.height  # pieces may split one merge per boundary
    assert planned.requests == samples.height == int(planned.lengths["samples"].sum())
    assert planned.summary().filter(pl.col("item") == "cost")["value"][0].startswith("$")
    whole = sweep.plan(job, budget_tokens=10**6)  # above the whole job: the whole job, with the budget as its cap
    assert whole.requests == planned.requests and whole.job.inference.max_prompt_tokens == 10**6
    with pytest.raises(PlanError, match="runs every record of its data"):
        sweep.plan(load_job(ROOT / "jobs" / "longbench-v2.yaml"), budget_tokens=10**6)
    cot = sweep.plan(load_job(ROOT / "jobs" / "longbench-v2.yaml"))
    assert cot.requests == 2 * int(cot.lengths["samples"].sum())  # reasoning call + answer call


def test_plan_of_a_documents_job_counts_its_prompts():
    """Document suites render contexts from the document text; the plan counts units joined by
    the separator, which differs only in whitespace between units."""
    job = load_job(ROOT / "jobs" / "dolce-documents.yaml")
    problems = stages.build(job)
    planned = plan(job, problems=problems)
    tok = get_tokenizer(None)
    exact = np.array([tok.count(p) for p in render_prompts(planned.spans, problems).to_list()])
    estimate = planned.spans["prompt_tokens"].to_numpy()
    assert planned.requests == planned.spans.height > 0
    assert np.all(np.abs(estimate - exact) <= 0.02 * exact + 2), (estimate - exact)


SHORT_JOB = "name: s\nsuite: {kind: layouts, kinds: [lookup], problems_per_kind: 3, paragraphs: 7}\n"


def test_short_documents_on_the_exponential_ladder_get_one_warning_line(tmp_path):
    """Problems of 4-12 units on the exponential ladder (C = 1, 2, 5, 10): `raylc plan` and the
    run's sample stage say so in one line, naming the count; nothing with the lengths listed,
    below 4 units (the ladder skips no length) or above 12."""
    from raylc.dolce import evaluation
    from raylc.dolce.plan import short_documents_warning
    from raylc.run.folder import RunFolder
    from raylc.run.manifest import Manifest
    from raylc.run.runner import Run

    L = pl.Series("L", [3, 4, 12, 13, 50])
    assert short_documents_warning(L, Sampling()).startswith("2 of 5 problems have 4 to 12 units")
    assert short_documents_warning(L, Sampling(lengths=[0, 1, 2, 3, "L"])) is None
    assert short_documents_warning(pl.Series("L", [3, 13, 400]), Sampling()) is None
    assert short_documents_warning(pl.Series("L", [], pl.Int64), Sampling()) is None
    job_file = tmp_path / "short.yaml"
    job_file.write_text(SHORT_JOB)
    result = CliRunner().invoke(app, ["plan", str(job_file)])
    assert result.exit_code == 0, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("warning: 3 of 3 problems have 4 to 12 units"), result.output
    listed = tmp_path / "listed.yaml"
    listed.write_text(SHORT_JOB + "sampling: {lengths: [0, 1, 2, 3, 4, 5, 6, L]}\n")
    result = CliRunner().invoke(app, ["plan", str(listed)])
    assert result.exit_code == 0 and "warning:" not in result.output, result.output
    job = load_job(job_file, {"store.path": str(tmp_path / "runs")})
    logged: list[str] = []
    run = Run(RunFolder(str(tmp_path / "runs"), "r"), job, Manifest(run_id="r", job=job.resolved()), log=logged.append)
    run.folder.write(stages.build(job), evaluation.PROBLEMS)
    evaluation.sample_stage(run)
    assert [x for x in logged if x.startswith("[sample] warning: 3 of 3 problems have 4 to 12 units")] == logged
    assert len(logged) == 1


def test_write_follows_a_link_and_never_replaces_what_is_not_a_file(tmp_path):
    """``--write`` through a symbolic link writes its target and keeps the link; a FIFO or a folder
    there is one line, exit 2, left as it was (the rename would have replaced it)."""
    import os
    import stat

    small = tmp_path / "small.yaml"
    small.write_text(QUICKSTART.read_text().replace("problems_per_task: 100", "problems_per_task: 3"))
    target, link, fifo = tmp_path / "target.yaml", tmp_path / "link.yaml", tmp_path / "fifo"
    target.write_text("original\n")
    link.symlink_to(target.name)
    os.mkfifo(fifo)
    assert CliRunner().invoke(app, ["plan", str(small), "--write", str(link)]).exit_code == 0
    assert link.is_symlink() and target.read_text().startswith("# Planned by `raylc plan`")
    for path in (fifo, tmp_path):
        result = CliRunner().invoke(app, ["plan", str(small), "--write", str(path)])
        assert result.exit_code == 2 and result.output == f"error: {path}: not a regular file; give a file path to " \
                                                          "write the plan to\n", result.output
    assert stat.S_ISFIFO(fifo.stat().st_mode)
