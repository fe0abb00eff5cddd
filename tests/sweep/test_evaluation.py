"""Length-controlled runs end to end on the shipped jobs (simulated probe, shared Ray)."""

import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from raylc.cli import app
from raylc.evaluate import evaluate
from raylc.spec import load_job
from raylc.suites.longbench_v2 import longbench_v2_report

ROOT = Path(__file__).resolve().parents[2]
FAST = {"ray.no_progress_timeout_s": 300}


@pytest.fixture(scope="module")
def v2_run(ray_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("v2")
    job = load_job(ROOT / "jobs" / "longbench-v2.yaml", {"store.path": str(store), **FAST})
    logs: list[str] = []
    run = evaluate(job, "cot", log=logs.append)
    return job, run, logs


@pytest.mark.ray
def test_longbench_v2_cot_runs_two_calls_and_reports_exact_splits(v2_run):
    job, run, _ = v2_run
    samples = run.folder.read("build/samples.parquet")
    infer = run.folder.completions()
    assert infer.height == 2 * samples.height  # a reasoning call and an answer call per question
    scores = run.folder.read("score/scores.parquet")
    assert scores.height == samples.height and set(scores["valid"]) <= {True, False}
    # the report's table is the paper's Table 2 / 4 computed from the stored scores
    expected = longbench_v2_report(scores).with_columns(  # result.py prints round(100 * sum / n, 1), Python's round
        pl.col(c).map_elements(lambda v: round(v, 1), return_dtype=pl.Float64) for c in ("accuracy", "invalid",
                                                                                        "compensated"))
    assert run.folder.read("report/longbench_v2.parquet").equals(expected)
    # the simulated probe answers gold or "Unanswerable": accuracy + invalid = 100 in every split
    assert ((expected["accuracy"] + expected["invalid"] - 100).abs() < 1e-6).all()
    summary = Path(run.folder.uri("report/summary.md")).read_text()
    assert "## LongBench v2" in summary and "compensated" in summary


@pytest.mark.ray
def test_the_second_rounds_progress_counts_the_first_rounds_requests(v2_run, tmp_path):
    """`raylc status` during the answer calls: stored and planned count the reasoning calls too
    (they counted the second round's requests only)."""
    import json

    from raylc.run.manifest import Manifest
    from raylc.run.progress import infer_progress

    job, run, _ = v2_run
    seen = []

    def log(line: str) -> None:
        if line.startswith("[infer] round 2"):
            seen.append("round 2")
        elif seen and "requests stored" in line:
            manifest = Manifest.model_validate(json.loads((tmp_path / "p" / "manifest.json").read_text()))
            seen.append(infer_progress(manifest.stages["infer"], "running", time.time()))

    evaluate(job.model_copy(update={"store": job.store.model_copy(update={"path": str(tmp_path)})}), "p", log=log)
    last = seen[-1]
    assert seen[0] == "round 2" and last["stored"] == last["planned"] == run.folder.completions().height


@pytest.mark.ray
def test_rerun_skips_finished_stages_and_a_new_run_is_identical(v2_run):
    job, run, _ = v2_run
    logs: list[str] = []
    evaluate(job, "cot", log=logs.append)
    assert sum("done already, skipped" in m for m in logs) == 4
    again = evaluate(job, "cot-again", log=logs.append)
    assert again.manifest.stages["infer"].rows["requests"] == 24
    assert again.folder.read("score/scores.parquet").equals(run.folder.read("score/scores.parquet"))


@pytest.mark.ray
def test_helmet_recall_sweep_longscore(ray_session, tmp_path):
    job = load_job(ROOT / "jobs" / "helmet-recall.yaml", {
        "store.path": str(tmp_path), "suite.lengths": [2048, 4096, 8192], "suite.base_lengths": [2048],
        "suite.samples_per_length": 6, **FAST})
    run = evaluate(job, "h", log=lambda m: None)
    samples = run.folder.read("build/samples.parquet")
    assert (samples["context_tokens"] <= samples["length"]).all()
    summary = run.folder.read("report/summary.parquet")
    assert set(summary["task"]) == {"json_kv", "mk_needle_number", "mk_needle_uuid", "mv_needle", "overall"}
    per = run.folder.read("report/per_length.parquet")
    scores = run.folder.read("score/scores.parquet")
    # S_l in the LongScore table is the mean of the stored per-sample scores
    means = scores.group_by("task", "length").agg(pl.col("score").mean().alias("m"))
    joined = per.join(means, on=["task", "length"], how="inner")
    assert joined.height == 12 and ((joined["score"] - joined["m"]).abs() < 1e-9).all()


def test_bad_data_file_is_one_line_exit_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"_id": "x", "domain": "d"}]')
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "jobs" / "longbench-v2.yaml").read_text().replace(
        "data/longbench_v2/fixture.json", str(bad)))
    store = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(job), "--store", str(store), "--run-id", "x"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in result.output
    assert not store.exists() or not any(store.rglob("*"))


@pytest.mark.ray
def test_longbench100_with_judge_and_prior_knowledge_filter(ray_session, tmp_path):
    job = load_job(ROOT / "jobs" / "longbench100.yaml", {
        "store.path": str(tmp_path), "suite.tasks": ["kv_retrieval", "single_doc_qa", "single_doc_sum"],
        "suite.lengths": [2048, 4096], "suite.base_lengths": [2048], "suite.samples_per_length": 4,
        "probe.knowledge_rate": 0.5, **FAST})
    run = evaluate(job, "lb", log=lambda m: None)
    scores = run.folder.read("score/scores.parquet")
    assert set(scores.filter(pl.col("length") == 0)["task"]) == {"single_doc_qa"}  # the no-context probe
    assert scores["score"].is_between(0, 1).all() and scores["score"].null_count() == 0
    # the simulated probe answers gold or "Unanswerable"; the judge gives gold full marks and the IDK 0
    ok = scores.filter(pl.col("length") > 0)
    assert set(ok.filter(pl.col("metric").is_in(["judge_qa", "judge_sum"]))["score"]) <= {0.0, 1.0}
    prior = run.folder.read("report/prior_knowledge.parquet")
    known = scores.filter((pl.col("length") == 0) & (pl.col("score") > 0.5))
    assert prior.to_dicts() == [{"task": "single_doc_qa", "samples": 4, "dropped": known.height}]
    kept = run.folder.read("report/per_task_length.parquet").filter(pl.col("task") == "single_doc_qa")
    assert (kept["n"] == 4 - known.height).all()
