"""End to end: the quickstart job (50 problems per task instead of 100;
`make demo` runs the whole job) through Ray, and the report; twice with RAYLC_SLOW=1."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from in_process import infer_frame

from raylc.dolce import stages
from raylc.dolce.evaluation import DolceEvaluation
from raylc.evaluate import evaluate, load_report
from raylc.run import checkpoint
from raylc.run.errors import RunError
from raylc.run.folder import RunFolder
from raylc.run.manifest import Manifest
from raylc.run.runner import Run
from raylc.spec import load_job

OUTPUTS = {name: outputs for name, outputs, _ in DolceEvaluation().stages(None)}

ROOT = Path(__file__).resolve().parents[2]
TABLES = ["build/problems.parquet", "sample/spans.parquet", "infer", "score/observations.parquet",
          "fits/problems.parquet", "fits/tasks.parquet", "report/categories.parquet", "report/recovery.parquet"]


@pytest.fixture(scope="module")
def quickstart_runs(ray_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    overrides = {"store.path": str(store), "ray.no_progress_timeout_s": 300, "suite.problems_per_task": 50}
    job = load_job(ROOT / "jobs" / "quickstart.yaml", overrides)
    return store, evaluate(job, "first", log=lambda m: None), job


def _read(store, run_id, rel):
    if rel == "infer":  # hive-partitioned by task
        df = pl.read_parquet(str(Path(store, run_id, rel)) + "/**/*.parquet", hive_partitioning=True)
    else:
        df = pl.read_parquet(Path(store, run_id, rel))
    return df.sort("task", "problem_id", "C", "start") if rel == "infer" else df


@pytest.mark.ray
def test_every_stage_written_and_manifest_complete(quickstart_runs):
    store, first, job = quickstart_runs
    for outputs in OUTPUTS.values():
        for rel in outputs:
            assert Path(store, "first", rel).exists(), rel
    manifest = first.manifest.record()
    assert manifest["version"] == 3 and manifest["seed"] == job.seed and manifest["job"]["name"] == "quickstart"
    assert {s: v["status"] for s, v in manifest["stages"].items()} == dict.fromkeys(OUTPUTS, "done")
    observations = _read(store, "first", "score/observations.parquet")
    assert manifest["stages"]["score"]["rows"]["observations"] == observations.height
    assert "ray" in manifest["versions"] and "polars" in manifest["versions"]


@pytest.mark.ray
def test_observation_table_contract(quickstart_runs):
    store = quickstart_runs[0]
    obs = _read(store, "first", "score/observations.parquet")
    assert obs.schema == pl.Schema({"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                    "start": pl.Int64, "score": pl.Float64, "metric": pl.String})
    assert obs.filter(pl.col("C") > pl.col("L")).height == 0
    assert set(obs["score"].drop_nulls().unique()) <= {0.0, 1.0} and obs["score"].null_count() > 0
    fits = _read(store, "first", "fits/problems.parquet")
    assert {"task", "problem_id", "scenario", "lam", "k", "category", "loglik"} <= set(fits.columns)
    assert fits.height == 100 and set(fits["category"]) <= {"I", "II", "III", "IV", "V"}


@pytest.mark.ray
# a second run of the same job: CI proves the same equality on smaller pairs of runs of one job
# (tests/io/test_s3.py: every table of a run on S3 and one in a local folder, point fits;
# tests/run/test_submit.py: `raylc submit` and plain `ray job submit`, the posterior's fits;
# tests/dolce/test_commands.py: `raylc fit` with and without Ray); RAYLC_SLOW=1 runs it
@pytest.mark.slow
def test_same_seed_identical_tables(quickstart_runs):
    store, _, job = quickstart_runs
    evaluate(job, "second", log=lambda m: None)
    for rel in TABLES:
        assert _read(store, "first", rel).equals(_read(store, "second", rel)), rel


@pytest.mark.ray
def test_planted_category_recovery_at_least_90_percent(quickstart_runs):
    store = quickstart_runs[0]
    recovery = _read(store, "first", "report/recovery.parquet")
    overall = recovery.filter(pl.col("task") == "(all)")["recovery"][0]
    assert overall >= 0.90, recovery


@pytest.mark.ray
def test_rerun_same_run_id_skips_finished_stages(quickstart_runs):
    store, first, job = quickstart_runs
    logs: list[str] = []
    evaluate(job, "first", log=logs.append)
    assert sum("skipped" in line for line in logs) == len(OUTPUTS)


@pytest.mark.ray
def test_same_run_id_different_spec_refused(quickstart_runs):
    store, _, job = quickstart_runs
    other = job.model_copy(update={"seed": job.seed + 1})
    with pytest.raises(RunError, match="different job spec"):
        evaluate(other, "first", log=lambda m: None)


@pytest.mark.ray
def test_report_command(quickstart_runs):
    store = quickstart_runs[0]
    tables, manifest, _ = load_report(str(Path(store, "first")))
    assert manifest.run_id == "first" and manifest.finished()
    proc = subprocess.run([sys.executable, "-m", "raylc", "report", str(Path(store, "first"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Focus categories per task" in proc.stdout and "planted-a" in proc.stdout  # the page's sections
    # the probe check, in the printout, the page and summary.md: the simulated probe abstains
    assert "Probe check" in proc.stdout and "planted-a: the probe follows the IDK instruction" in proc.stdout
    summary = Path(store, "first", "report", "summary.md").read_text()
    assert "Planted-category recovery" in summary and "| planted-b |" in summary
    assert "planted-b: the probe follows the IDK instruction" in summary
    bad = subprocess.run([sys.executable, "-m", "raylc", "report", str(store / "nope")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def _completion(ids, errors, tokens):
    return pl.DataFrame({"task": ["t"] * len(ids), "request_id": ids,
                         "completion": ["1" if e is None else None for e in errors], "error": errors,
                         "prompt_tokens": tokens, "generated_tokens": [1] * len(ids),
                         "cached_tokens": [None] * len(ids), "truncated_tokens": [0] * len(ids)},
                        schema_overrides={"error": pl.String, "cached_tokens": pl.Int64})


def test_shard_by_shard_accounting_matches_the_loaded_table(tmp_path):
    """A request failed in one attempt and succeeded in the next counts once, as a success."""
    folder, empty = RunFolder(str(tmp_path), "r"), RunFolder(str(tmp_path), "empty")
    writer = checkpoint.ShardWriter(folder, max_rows=1, max_seconds=60.0)
    writer.add(_completion(["a", "b"], ["timeout", None], [5, 7]))
    writer.add(_completion(["a", "c"], [None, "refused"], [5, 3]))
    assert len(folder.parquet_files("infer")) == 2
    done = checkpoint.completed_keys(folder)
    assert done.size == 2 and checkpoint.is_completed(pl.Series(["a", "b", "c", "d"]), done).to_list() == [
        True, True, False, False]
    assert not checkpoint.is_completed(pl.Series(["a"]), checkpoint.completed_keys(empty)).any()
    rows, first = checkpoint.stored_accounting(folder, reused=1)
    assert rows == checkpoint.accounting(checkpoint.load_completions(folder), reused=1)
    assert (rows["requests"], rows["errors"], rows["prompt_tokens"], first) == (3, 1, 12, "refused")
    shards = list(checkpoint.iter_shards(folder))
    assert [s.height for s in shards] == [2, 2] and all(s["task"].to_list() == ["t", "t"] for s in shards)
    assert checkpoint.stored_accounting(empty, reused=0)[0] == {
        "requests": 0, "reused": 0, "errors": 0, **dict.fromkeys(checkpoint.TOKEN_COUNTS, 0)}


def test_write_parts_streams_one_parquet_file(tmp_path):
    run = RunFolder(str(tmp_path), "r")
    parts = [pl.DataFrame({"x": [i, i + 1], "s": ["a", "b"]}) for i in range(0, 6, 2)]
    assert run.write_parts(iter(parts), "t/x.parquet", parts[0].clear()) == 6
    whole = pl.concat(parts)
    assert pl.read_parquet(tmp_path / "r" / "t" / "x.parquet").equals(whole) and run.num_rows("t/x.parquet") == 6
    assert [f.height for f in run.iter_rows("t/x.parquet", 4)] == [4, 2]
    assert pl.concat(run.iter_rows("t/x.parquet", 4)).equals(whole)
    assert run.write_parts(iter([]), "t/empty.parquet", parts[0].clear()) == 0
    assert run.read("t/empty.parquet").equals(parts[0].clear())


def test_merge_observations_sorts_and_keeps_the_last_score_of_a_span():
    rng = np.random.default_rng(3)
    n = 400
    part = pl.DataFrame({
        "task": rng.choice(["b", "a"], n), "problem_id": rng.choice(["p10", "p2", "p1"], n),
        "L": np.full(n, 50), "C": rng.integers(0, 6, n), "start": rng.integers(0, 40, n),
        "score": rng.random(n), "metric": ["exact_match"] * n,
    })
    parts = [part.slice(0, 150), part.slice(150, 150), part.slice(300, 100), part.slice(0, 50)]
    keys = ["task", "problem_id", "C", "start"]
    expected = pl.concat(parts).sort(keys, maintain_order=True).unique(keys, keep="last", maintain_order=True)
    merged = stages.merge_observations(parts)
    assert merged.equals(expected) and merged.select(keys).is_duplicated().sum() == 0
    assert stages.merge_observations([]).height == 0


def test_score_stage_merges_bucket_by_bucket_like_one_sort(tmp_path, monkeypatch):
    """Many buckets, shards spanning several of them and a span stored by two attempts (the
    later with another completion): the streamed two-pass merge equals one sort of every
    shard's observations keeping each span's last score, and leaves no temporary parts."""
    from raylc.dolce import evaluation

    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"suite.problems_per_task": 6, "store.path": str(tmp_path)})
    problems = stages.build(job)
    spans = stages.with_request_ids(stages.sample(problems, job), problems, job).sample(fraction=0.3, seed=1)
    done = infer_frame(spans, problems, job)
    run = Run(RunFolder(str(tmp_path), "r"), job, Manifest(run_id="r", job=job.resolved()))
    run.folder.write(problems, "build/problems.parquet")
    run.folder.write(spans.drop("request_id"), "sample/spans.parquet")
    writer = run.folder.shard_writer(max_rows=700, max_seconds=60.0)
    for batch in done.sample(fraction=1.0, shuffle=True, seed=2).iter_slices(350):
        writer.add(batch)
    writer.flush()
    again = done.head(500).with_columns(completion=pl.lit("no idea"))  # stored again, in later shards
    writer.add(again)
    writer.flush()
    monkeypatch.setattr(evaluation, "OBS_BUCKET_ROWS", 400)
    n = evaluation.score_stage(run)["observations"]

    shards = list(run.folder.shards())
    assert len(shards) > 3
    expected = stages.merge_observations([stages.score(s, problems, job) for s in shards])
    got = run.folder.read("score/observations.parquet")
    assert n == got.height == spans.height and got.equals(expected)
    assert pq.ParquetFile(tmp_path / "r" / "score" / "observations.parquet").num_row_groups > 3
    assert not (tmp_path / "r" / "score" / ".parts").exists()
    changed = got.join(stages.score(again, problems, job), on=["task", "problem_id", "C", "start"])
    assert changed.height == 500 and changed["score"].equals(changed["score_right"], check_names=False)


def test_the_fit_stage_maps_its_per_subset_fits_from_the_driver(tmp_path, monkeypatch):
    """The fit stage reads the observation table on the driver and hands the run's mapper one
    frame per (task, subset): no Ray task starts Ray tasks, and the tables are those of one
    in-process fit."""
    from raylc.dolce import evaluation
    from raylc.io.parallel import in_process

    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"suite.problems_per_task": 6, "store.path": str(tmp_path),
                                                       "fit.uncertainty": "none"})  # the mapping, not the posterior
    problems = stages.build(job)
    spans = stages.with_request_ids(stages.sample(problems, job), problems, job)
    observations = stages.score(infer_frame(spans, problems, job), problems, job)
    run = Run(RunFolder(str(tmp_path), "r"), job, Manifest(run_id="r", job=job.resolved()))
    run.folder.write(observations, evaluation.OBSERVATIONS)
    calls = []

    def mapper(fn, frames, *args):
        calls.append((fn.__name__, len(frames), all(isinstance(f, pl.DataFrame) for f in frames)))
        return in_process(fn, frames, *args)

    monkeypatch.setattr(run, "mapper", lambda: mapper)
    rows = evaluation.fit_stage(run)
    expected_problems, expected_tasks = stages.fit(observations, job)
    assert calls == [("fit_subset", expected_tasks.height, True)]
    assert run.folder.read("fits/problems.parquet").equals(expected_problems)
    assert run.folder.read("fits/tasks.parquet").equals(expected_tasks)
    assert rows == {"problems": expected_problems.height, "tasks": expected_tasks.height}
