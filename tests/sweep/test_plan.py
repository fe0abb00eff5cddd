"""``raylc plan`` of a length sweep (:mod:`raylc.sweep.plan`): the samples that do not fit the
probe's window are counted and warned about."""

from pathlib import Path

from cli_runner import raylc

from raylc.spec import load_job
from raylc.sweep.plan import plan_sweep

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
