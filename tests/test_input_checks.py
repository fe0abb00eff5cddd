"""Validation at every table boundary (issue 14, item 3): observations, LongScore scores,
length-suite samples, documents and pools. A bad table is one line naming the column and an
example row, exit 2 on the command line, and nothing written; what is deliberately accepted
(a single problem, several rows per LongScore cell without sample_id, percent scores) runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest
from cli_runner import raylc
from length_slopes import length_slopes

from raylc.dolce import ObservationError, validate_observations
from raylc.io.store import StoreError, json_records, read_input
from raylc.suites.context import PoolError, pool_from_frame
from raylc.suites.documents import DocumentsError, DocumentsSuite, build_documents
from raylc.suites.longbench100 import LongBench100Suite, build_longbench100
from raylc.suites.samples import SampleTableError, check_samples
from raylc.sweep.longscore import longscore, longscore_group, pair_slopes, validate_scores
from raylc.text.tokenize import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
RAYLC = str(ROOT / ".venv" / "bin" / "raylc")
DOCS = ROOT / "jobs" / "data" / "documents" / "example.jsonl"
LB100 = ROOT / "jobs" / "data" / "longbench100"


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _cli(tmp_path: Path, monkeypatch, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``raylc ARGS`` in-process (tests/cli_runner.py), run in ``tmp_path``."""
    proc = raylc(*args, cwd=tmp_path, env={"RAY_ADDRESS": None})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def _refused(tmp_path: Path, monkeypatch, *args: str) -> str:
    """Run a command that must fail: exit 2, one stderr line, no traceback, nothing written."""
    before = _tree(tmp_path)
    code, _, err = _cli(tmp_path, monkeypatch, *args)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert _tree(tmp_path) == before, "something was written"
    return err.strip()


# ------------------------------------------------------------------------------ LongScore


def _scores(**columns) -> pl.DataFrame:
    base = {"model": ["m", "m", "n", "n"], "task": ["t"] * 4, "length": [4096, 8192] * 2, "score": [0.8, 0.6, 0.5, 0.4]}
    return pl.DataFrame({**base, **columns})


LONGSCORE_BAD = {
    "single length": (pl.DataFrame({"model": ["m", "n"], "task": ["t", "t"], "length": [4096, 4096],
                                    "score": [0.5, 0.6]}),
                      "column 'length': no length above the base lengths (4096)"),
    "no base length": (_scores(length=[8192, 16384] * 2), "column 'length': no score at the base lengths 4096"),
    "score above 100": (_scores(score=[80.0, 160.0, 50.0, 40.0]), "column 'score': outside [0, 100]"),
    "negative score": (_scores(score=[0.8, -0.1, 0.5, 0.4]), "column 'score': outside [0, 100]"),
    "duplicate sample": (_scores(model=["m"] * 4, length=[4096, 8192, 8192, 16384], sample_id=["a", "b", "b", "c"]),
                         "column 'sample_id': a (model, task, length, sample_id) appears twice"),
    "null sample_id": (_scores(sample_id=["a", None, "a", "b"]), "column 'sample_id' has nulls"),
    "text score": (_scores(score=["x", "y", "z", "w"]), "column 'score': must be numeric"),
    "fractional length": (_scores(length=[4096.0, 8192.5] * 2), "column 'length': must hold whole numbers"),
    "zero length": (_scores(length=[4096, 0] * 2), "column 'length': must be >= 1"),
    "all scores of a pair null": (_scores(score=[None, None, 0.5, 0.4]),
                                  "column 'score': every score of this (model, task) is null"),
    "empty": (_scores().clear(), "column 'score': the scores table has no rows"),
}


@pytest.mark.parametrize("case", sorted(LONGSCORE_BAD))
def test_longscore_refuses_bad_tables_in_one_line(tmp_path, monkeypatch, case):
    frame, message = LONGSCORE_BAD[case]
    frame.write_parquet(tmp_path / "scores.parquet")
    err = _refused(tmp_path, monkeypatch, "longscore", "scores.parquet", "--out", "out", "--base-lengths", "4096",
                   "--no-ray")
    assert err.startswith(f"error: scores.parquet: {message}"), err
    if case not in ("empty", "text score"):
        assert "; e.g. row " in err and "model=" in err, err  # an example row, numbered from 1


def test_longscore_names_the_file_and_its_row_among_several_tables(tmp_path, monkeypatch):
    """A bad row of the second table is named by that file and its own row number (the tables
    were checked joined, so the line named both files and row 7)."""
    _scores().write_csv(tmp_path / "a.csv")
    _scores(score=[0.8, 0.6, 150.0, 0.4]).write_csv(tmp_path / "b.csv")
    err = _refused(tmp_path, monkeypatch, "longscore", "a.csv", "b.csv", "--out", "out", "--base-lengths", "4096",
                   "--no-ray")
    assert err.startswith("error: b.csv: column 'score': outside [0, 100]") and "; e.g. row 3: " in err, err


def test_longscore_single_length_is_refused_before_anything_is_written(tmp_path):
    """The installed command on the Why list's case (it raised ZeroDivisionError in the plots after
    writing the tables)."""
    pl.DataFrame({"model": ["m", "n"], "task": ["t", "t"], "length": [4096, 4096], "score": [0.5, 0.6]}).write_csv(
        tmp_path / "one.csv")
    before = _tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([RAYLC, "longscore", "one.csv", "--out", "out", "--no-ray"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(
        "error: one.csv: column 'length': no length above the base lengths (2048, 4096, 6144)")
    assert _tree(tmp_path) == before


def test_longscore_without_sample_id_accepts_several_rows_per_cell(tmp_path, monkeypatch):
    """The README says sample_id is optional: rows of one cell are its samples; only --n-boot needs ids."""
    frame = pl.DataFrame({"model": ["m"] * 5, "task": ["t"] * 5, "length": [4096, 4096, 8192, 8192, 8192],
                          "score": [1.0, 0.5, 0.5, 0.5, 0.2]})
    frame.write_csv(tmp_path / "s.csv")
    code, out, err = _cli(tmp_path, monkeypatch, "longscore", "s.csv", "--out", "out",
                          "--base-lengths", "4096", "--no-ray")
    assert code == 0, err
    per = pl.read_parquet(tmp_path / "out" / "per_length.parquet").sort("length")
    assert per["n"].to_list() == [2, 3] and per["score"].to_list() == pytest.approx([0.75, 0.4])
    assert per["lc"][1] == pytest.approx(100 * (0.4 - 0.75) / 0.75)
    assert {"score_vs_length.png", "longscore_vs_length.png"} <= set(os.listdir(tmp_path / "out"))
    err = _refused(tmp_path, monkeypatch, "longscore", "s.csv", "--out", "out2", "--base-lengths", "4096", "--n-boot",
                   "10", "--no-ray")
    assert err.startswith("error: s.csv: column 'sample_id': bootstrap CIs (--n-boot) need sample-level scores")


def test_longscore_accepts_percent_and_skips_null_scores():
    res = longscore(_scores(score=[80.0, 60.0, None, 40.0]).vstack(_scores(score=[None, None, 50.0, None])),
                    base_lengths=(4096,))
    summ = {r["model"]: r for r in res["summary"].iter_rows(named=True)}
    assert summ["m"]["avg_lc"] == pytest.approx(-25.0) and summ["n"]["avg_lc"] == pytest.approx(-20.0)


def test_validate_scores_types_its_columns_and_skips_nan_scores():
    """The returned table is typed (names as text, whole float lengths as Int64, scores as Float64), a NaN
    score is no score, and 100 is inside the range."""
    ints = pl.DataFrame({"model": [1, 1, 2, 2], "task": [7] * 4, "length": [4096.0, 8192.0] * 2,
                         "score": [100, 60, 50, 40]})
    got = validate_scores(ints, (4096,))
    assert got.schema == pl.Schema({"model": pl.String, "task": pl.String, "length": pl.Int64, "score": pl.Float64})
    assert got.rows() == [("1", "7", 4096, 100.0), ("1", "7", 8192, 60.0), ("2", "7", 4096, 50.0),
                          ("2", "7", 8192, 40.0)]
    nan = _scores(score=[0.8, float("nan"), 0.5, 0.4], sample_id=[1, 2, 3, 4])
    assert validate_scores(nan, (4096,))["sample_id"].to_list() == [1, 3, 4]


def test_validate_scores_messages_name_the_offending_row():
    """Exact one-line messages: the second of two equal (model, task, length, sample_id) rows, a (model, task)
    whose every score is null although the model has another task, n_boot = 1 without sample_id, and every
    length a base length with two base lengths."""
    dup = _scores(model=["m"] * 4, length=[4096, 8192, 8192, 16384], sample_id=["a", "b", "b", "c"])
    with pytest.raises(ValueError) as err:
        validate_scores(dup, (4096,))
    assert str(err.value) == ("column 'sample_id': a (model, task, length, sample_id) appears twice; e.g. row 3: "
                              "{model='m', task='t', length=8192, score=0.5, sample_id='b'}")
    null_task = _scores(task=["a", "a", "b", "b"], model=["m"] * 4, score=[None, None, 0.5, 0.4])
    with pytest.raises(ValueError) as err:
        validate_scores(null_task, (4096,))
    assert str(err.value) == ("column 'score': every score of this (model, task) is null (no S_l at any length); "
                              "e.g. row 1: {model='m', task='a', length=4096, score=None}")
    with pytest.raises(ValueError, match=r"^column 'sample_id': bootstrap CIs \(--n-boot\) need sample-level"):
        validate_scores(_scores(), (4096,), n_boot=1)
    with pytest.raises(ValueError) as err:
        validate_scores(_scores(), (4096, 8192))
    assert str(err.value).startswith("column 'length': no length above the base lengths (4096, 8192): LongScore needs")


def test_score_tables_of_the_correlation_functions_are_checked_and_typed():
    """length_slopes, pair_slopes and longscore_group (through _check_scores): a missing column is one
    ValueError; integer names and whole float lengths are typed like validate_scores'; a NaN score is no score."""
    with pytest.raises(ValueError, match=r"^scores is missing columns \['score'\]$"):
        length_slopes(_scores().drop("score"))
    ints = pl.DataFrame({"model": [1, 1, 2, 2], "task": [7] * 4, "length": [4096.0, 8192.0] * 2,
                         "score": [0.8, 0.6, 0.5, 0.4]})
    got = length_slopes(ints)
    assert got.select("model", "task", "min_length").rows() == [("1", "7", 4096), ("2", "7", 4096)]
    assert got.schema["model"] == pl.String and got.schema["min_length"] == got.schema["max_length"] == pl.Int64
    assert longscore_group(ints.filter(pl.col("model") == 1), (4096,))["lc"].to_list() == pytest.approx([0.0, -25.0])
    nan = ints.with_columns(score=pl.Series([0.8, 0.6, 0.5, float("nan")]))
    slopes = length_slopes(nan)["slope_log2"].to_list()  # model 2 keeps one length: no slope (null, not NaN)
    assert slopes[0] == pytest.approx(-0.2) and slopes[1] is None
    pairs = pair_slopes(ints, by="length")
    assert pairs.schema["a"] == pl.Int64 and sorted(set(pairs["a"].to_list())) == [4096, 8192]


# ------------------------------------------------------------------------------ observations


def _obs(problems=("p1",), metric="accuracy") -> pl.DataFrame:
    rows = []
    for p in problems:
        for C, starts in ((0, [0]), (1, range(10)), (2, range(9)), (5, range(6)), (10, [0])):
            rows += [("t", p, 10, C, s, float(C >= 2), metric) for s in starts]
    return pl.DataFrame(rows, schema=["task", "problem_id", "L", "C", "start", "score", "metric"], orient="row")


def test_fit_refuses_duplicated_observations(tmp_path, monkeypatch):
    """Duplicated rows used to fit with doubled log-likelihoods."""
    obs = _obs(("p1", "p2"))
    pl.concat([obs, obs.slice(3, 2)]).write_parquet(tmp_path / "obs.parquet")
    err = _refused(tmp_path, monkeypatch, "fit", "obs.parquet", "--out", "out", "--no-ray")
    assert err.startswith("error: obs.parquet: columns task, problem_id, C, start: the same span appears in more "
                          "than one row"), err
    assert "in 2 row(s); e.g. row 55: {task='t', problem_id='p1', L=10, C=1, start=2," in err, err


def test_fit_accepts_a_single_problem_and_an_all_idk_task(tmp_path, monkeypatch):
    """Deliberately accepted (README, Input checks): one problem; a task whose every answer is IDK
    (the shipped documents job's qa task with the simulated probe), even as an empty CSV column."""
    idk = _obs().with_columns(task=pl.lit("idk"), score=pl.lit(None, pl.Float64))
    pl.concat([_obs(), idk]).write_csv(tmp_path / "obs.csv")
    code, out, err = _cli(tmp_path, monkeypatch, "fit", "obs.csv", "--out", "out", "--no-ray")
    assert code == 0, err
    assert pl.read_parquet(tmp_path / "out" / "problems.parquet")["task"].sort().to_list() == ["idk", "t"]
    idk.write_csv(tmp_path / "idk.csv")  # the score column is empty: read as text, taken as all null
    assert _cli(tmp_path, monkeypatch, "fit", "idk.csv", "--out", "out2", "--no-ray")[0] == 0


def test_an_s3_endpoint_s3_does_not_speak_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "ftp://127.0.0.1:1")
    err = _refused(tmp_path, monkeypatch, "runs", "s3://bucket/x")
    assert err == "error: s3://bucket/x: AWS_ENDPOINT_URL 'ftp://127.0.0.1:1': Invalid S3 connection scheme 'ftp'", err


@pytest.mark.parametrize("args, message", [
    (("fit", "obs.parquet", "--out", "foo://x"), "foo://x: not a store address: give a folder"),
    (("fit", "obs.parquet", "--out", "mock://x"), "mock://x: not a store address"),  # pyarrow's, kept nowhere
    (("runs", "hdfs://127.0.0.1:1/x"), "hdfs://127.0.0.1:1/x: not a store address"),  # pyarrow's, needs a JVM
    (("fit", "gs://bucket/obs.parquet", "--out", "out"), "gs://bucket: not a store address"),
    (("fit", "obs.parquet", "--out", "s3://"), "s3://: no bucket"),
    (("fit", "obs.parquet", "--out", "s3:///x"), "s3:///x: no bucket"),
    (("fit", "obs.parquet", "--out", ""), "the store path is empty"),
    (("fit", "obs.parquet", "--out", "obs.parquet"), "obs.parquet/problems.parquet: a file where a folder belongs"),
    (("fit", "obs.parquet", "--out", "obs.parquet/x"), "a file where a folder belongs"),
    (("fit", "", "--out", "out"), "'': names no file or folder"),
    (("fit", "s3://bucket", "--out", "out"), "s3://bucket: names a bucket, not a file or folder in it"),
    (("units", str(DOCS), "--out", "foo://x.parquet"), "foo://x.parquet: not a store address"),
    (("runs", "foo://x"), "foo://x: not a store address"),
    (("report", "foo://x/run"), "foo://x: not a store address"),
])
def test_store_addresses_that_name_no_store_are_refused_in_one_line(tmp_path, monkeypatch, args, message):
    """A malformed URI, a scheme that is not a local folder or S3 (pyarrow's others would wait on a
    cloud, need a JVM or keep nothing), an empty path or a file where a folder belongs is bad input
    (exit 2, one line, nothing written), not a pyarrow traceback or a write into the working folder."""
    _obs(("p1", "p2")).write_parquet(tmp_path / "obs.parquet")
    err = _refused(tmp_path, monkeypatch, *args, *(("--no-ray",) if args[0] == "fit" else ()))
    assert message in err, err


@pytest.mark.parametrize("args, message", [
    (("plan", "job.yaml", "--set", "fit.em_tol=.inf"), "key 'fit.em_tol': Input should be a finite number"),
    (("plan", "job.yaml", "--set", "ray.actor_num_cpus=.nan"), "key 'ray.actor_num_cpus': Input should be a finite"),
    (("plan", "job.yaml", "--set", "ray.num_cpus=100000000000000000000"),
     "key 'ray.num_cpus': Input should be less than or equal to 100000"),
    (("plan", "job.yaml", "--set", "sampling.lengths=[]"), "key 'sampling.lengths': lengths is empty"),
    (("plan", "job.yaml", "--set", "sampling.lengths=[-5, 0]"), "every length must be L or 0 <= C"),
    (("plan", "job.yaml", "--set", "sampling.lengths=[0, L]"), "key 'sampling': no partial length 0 < C < L"),
    (("plan", "job.yaml", "--set", "sampling.min_length=20", "--set", "sampling.max_length=10"),
     "no partial length 0 < C < L is sampled"),
    (("plan", "job.yaml", "--set", "sampling.every=99999999999999999999"), "each at most 1,000,000,000"),
    (("plan", "job.yaml", "--set", "suite.problems_per_task=100000000000"),
     "key 'suite.problems_per_task': Input should be less than or equal to 1000000"),
    (("plan", "job.yaml", "--set", "seed=99999999999999"), "key 'seed': Input should be less than or equal to"),
    (("plan", "job.yaml", "--set", "seed=true"), "key 'seed': expected a number, not true or false (got True)"),
    (("plan", "job.yaml", "--set", "ray.connect_timeout_s=1e10"), "key 'ray.connect_timeout_s': at most 604800 s"),
    (("plan", "job.yaml", "--set", "ray.address=ray://"), "key 'ray.address': no host: give host:port"),
    (("plan", "job.yaml", "--set", "ray.address=ray://:10001"), "key 'ray.address': no host"),
    (("plan", "job.yaml", "--set", "ray.no_progress_timeout_s=1e300"), "key 'ray.no_progress_timeout_s': at most"),
    (("plan", "job.yaml", "--set", "inference.shard_seconds=1e9"), "key 'inference.shard_seconds': at most 604800"),
    (("plan", "openai.yaml", "--set", "probe.timeout_s=1e12"), "key 'probe.timeout_s': at most 604800 s"),
    (("plan", "openai.yaml", "--set", "probe.max_model_len=9223372036854775808"),
     "key 'probe.max_model_len': must be below 2^63 in size"),
    (("plan", "job.yaml", "--set", "sampling.lengths=[yes, 4]"), "key 'sampling.lengths': expected numbers, not true"),
    (("plan", "job.yaml", "--set", "fit.em_tol=false"), "key 'fit.em_tol': expected a number, not true or false"),
    (("plan", "job.yaml", "--set", "probe.guess_rate=true"), "key 'probe.guess_rate': expected a number, not true"),
    (("plan", "job.yaml", "--set", "suite.problems_per_task=true"), "key 'suite.problems_per_task': expected a"),
    (("plan", "openai.yaml", "--set", "probe.sampling.temperature=false"),
     "key 'probe.sampling.temperature': expected a number, not true or false"),
    (("plan", "openai.yaml", "--set", "probe.base_url=http://\u00fc.invalid\\x00/v1"),
     "key 'probe.base_url': not a URL (Invalid IDNA hostname"),
    (("plan", "openai.yaml", "--set", "probe.base_url=http://a b/v1"),
     "key 'probe.base_url': not an http(s) URL with a host; e.g. http://127.0.0.1:8000/v1 (got 'http://a b/v1')"),
    (("fit", "obs.parquet", "--out", "out", "--no-ray", "--em-steps-cow", "999999999999999999999"),
     "--em-steps-cow '999999999999999999999': Input should be less than or equal to 100000"),
    (("fit", "obs.parquet", "--out", "out", "--no-ray", "--em-tol", "inf"), "--em-tol 'inf': Input should be a finite"),
    (("runs", "obs.parquet"), "obs.parquet: not a store (a file, not a folder)"),
    (("longscore", "scores.csv", "--out", "out", "--no-ray", "--n-boot", "1000000000000"),
     "error: --n-boot '1000000000000': expected a whole number from 0 to 100,000"),
    (("longscore", "scores.csv", "--out", "out", "--no-ray", "--seed", "999999999999999999999999"),
     "error: --seed '999999999999999999999999': expected a whole number from 0 to 4,294,967,295"),
    (("compare", "runs/*", "--out", "out", "--seed", "-1"), "error: --seed '-1': expected a whole number from 0"),
    (("sensitivity", "obs.parquet", "--out", "out", "--no-ray", "--seed", "x"), "error: --seed 'x': expected a whole"),
    (("sensitivity", "obs.parquet", "--out", "out", "--no-ray", "--every", ","),
     "error: --every ',': expected comma-separated strides"),
    (("sensitivity", "obs.parquet", "--out", "out", "--no-ray", "--every", "-3"),
     "error: --every '-3': expected comma-separated strides from 1 to"),
    (("longscore", "scores.csv", "--out", "out", "--no-ray", "--base-lengths=-5"),
     "error: --base-lengths '-5': expected comma-separated lengths of 1 or more"),
    (("longscore", "scores.csv", "--out", "out", "--no-ray", "--base-lengths="), "error: --base-lengths '': expected"),
    (("run", "job.yaml", "--seed", "-1"), "error: --seed '-1': expected a whole number from 0 to 4,294,967,295"),
    (("check", "job.yaml", "--gpu-memory-gib", "0"), "error: --gpu-memory-gib '0': expected a number >= 1"),
    (("plan", "job.yaml", "--price-per-mtok", "x"), "error: --price-per-mtok 'x': expected a number >= 0"),
    (("plan", "job.yaml", "--tokens-per-s-per-gpu", "inf"),
     "error: --tokens-per-s-per-gpu 'inf': expected a number > 0"),
    (("plan", "job.yaml", "--overhead-tokens", "999999999999999999999999"),
     "error: --overhead-tokens '999999999999999999999999': expected a whole number from 0 to 1,000,000"),
    (("submit", "job.yaml", "--address", "not a url", "--no-wait"), "--address 'not a url': not an http(s) URL"),
    (("submit", "job.yaml", "--address", "http://127.0.0.1:99999", "--no-wait"), "not a URL (Port out of range"),
    (("submit", "job.yaml", "--address", "http://127.0.0.1:1", "--run-id", "../x", "--no-wait"),
     "run id '../x' is not a safe name"),
])
def test_values_that_would_fail_later_are_refused_before_anything_runs(tmp_path, monkeypatch, args, message):
    """Values a later stage could not use (an infinite tolerance or CPU count, an empty or negative
    length list, counts past what a machine holds, a host httpx cannot parse, a malformed dashboard
    address, an unsafe run id given to submit) are refused up front: one line, exit 2, nothing
    written. Before, some ran the build and inference and then failed, hung, or left a traceback."""
    (tmp_path / "job.yaml").write_text((ROOT / "jobs" / "quickstart.yaml").read_text())
    (tmp_path / "openai.yaml").write_text((ROOT / "jobs" / "openai-endpoint.yaml").read_text())
    _obs(("p1", "p2")).write_parquet(tmp_path / "obs.parquet")
    _scores().write_csv(tmp_path / "scores.csv")
    err = _refused(tmp_path, monkeypatch, *args)
    assert message in err, err


@pytest.mark.parametrize("args, message", [
    # the command line's own mistakes: one line naming the command, not click's usage box
    (("plan", "job.yaml", "--bogus"), "error: raylc plan: No such option: --bogus (see raylc plan --help)"),
    (("fit", "obs.parquet"), "error: raylc fit: Missing option '--out'. (see raylc fit --help)"),
    (("plna", "job.yaml"), "error: raylc: No such command 'plna'. Did you mean 'plan'? (see raylc --help)"),
    (("plan", "job.yaml", "--set"), "Option '--set' requires an argument."),
    # a registry name that is not a name; suite sizes past any machine; tasks one folder apart
    (("plan", "job.yaml", "--set", "suite.kind=[planted]"), "key 'suite.kind': ['planted'] is not one of"),
    (("plan", "job.yaml", "--set", "probe.backend={a: 1}"), "key 'probe.backend': {'a': 1} is not one of"),
    (("plan", "job.yaml", "--set", "suite.max_units=1000000000000"),
     "key 'suite.max_units': Input should be less than or equal to 1000000"),
    (("plan", "job.yaml", "--set", "suite.tasks=[QA, qa]"), "tasks 'QA' and 'qa' differ only in case"),
    # values Python cannot read: nesting past its recursion limit, integers past its 4,300 digits
    (("plan", "job.yaml", "--set", "seed=" + "[" * 3000), "--set 'seed=[[[[["),
    (("plan", "job.yaml", "--set", "seed=" + "9" * 5000), "unreadable value (Exceeds the limit (4300 digits)"),
    (("plan", "job.yaml", "--set", "seed=0x" + "f" * 5000), "(got a number of about 6,020 digits)"),
    (("run", "job.yaml", "--seed", "9" * 5000), "expected a whole number from 0 to 4,294,967,295"),
    (("plan", "job.yaml", "--set", 'name="a\\nb"'), "error: --set name='a\\nb': key 'name'"),  # still one line
    # sensitivity's settings: finite, whole where they are strides or lengths
    (("sensitivity", "obs.parquet", "--out", "out", "--no-ray", "--set", "max_length=inf"),
     "--set 'max_length=inf': expected finite numbers, whole ones from 0 to 1,000,000,000 for max_length"),
    (("sensitivity", "obs.parquet", "--out", "out", "--no-ray", "--set", "min_length=2.5"), "whole ones"),
    # submit checks the store's address before it contacts the cluster (port 1: nothing listens)
    (("submit", "job.yaml", "--address", "http://127.0.0.1:1", "--store", "foo://x", "--no-wait"),
     "error: foo://x: not a store address"),
    (("submit", "job.yaml", "--address", "http://127.0.0.1:1", "--working-dir", "job.yaml", "--no-wait"),
     "error: job.yaml: --working-dir is not a folder"),
])
def test_mistakes_found_by_the_second_input_audit_are_one_line(tmp_path, monkeypatch, args, message):
    """Each was a usage box, a traceback (exit 1), two lines, or (submit) exit 1 after contacting
    the cluster; each is now one line, exit 2, nothing written."""
    (tmp_path / "job.yaml").write_text((ROOT / "jobs" / "quickstart.yaml").read_text())
    _obs(("p1", "p2")).write_parquet(tmp_path / "obs.parquet")
    err = _refused(tmp_path, monkeypatch, *args)
    assert message in err, err


def test_tables_found_by_the_second_input_audit_are_one_line(tmp_path, monkeypatch):
    """Nested columns, lengths past any context, tables whose columns' types clash, and JSON that
    Python cannot read are one line naming the file, exit 2; they were tracebacks."""
    _scores(task=[["t"]] * 4).write_parquet(tmp_path / "nested.parquet")
    assert "column 'task': must hold names (text), got List(String)" in _refused(
        tmp_path, monkeypatch, "longscore", "nested.parquet", "--out", "out", "--no-ray")
    _scores(length=[4096.0, 1e21] * 2).write_parquet(tmp_path / "long.parquet")
    assert "column 'length': more than 1,000,000,000 tokens" in _refused(
        tmp_path, monkeypatch, "longscore", "long.parquet", "--out", "out", "--no-ray")
    _scores(model=[1, 1, 2, 2]).write_parquet(tmp_path / "ints.parquet")
    _scores(model=[["m"]] * 4).write_parquet(tmp_path / "lists.parquet")
    assert _refused(tmp_path, monkeypatch, "longscore", "ints.parquet", "lists.parquet", "--out", "out",
                    "--no-ray") == "error: lists.parquet: column 'model': must hold names (text), got List(String)"
    _obs().with_columns(L=pl.lit(2**62)).write_parquet(tmp_path / "huge.parquet")
    assert "column 'L': more than 1,000,000,000 units" in _refused(
        tmp_path, monkeypatch, "fit", "huge.parquet", "--out", "out", "--no-ray")
    (tmp_path / "parts").mkdir()
    _obs().write_parquet(tmp_path / "parts" / "a.parquet")
    _obs().with_columns(score=pl.lit([0.5])).write_parquet(tmp_path / "parts" / "b.parquet")
    assert "parts: its Parquet files give column 'score' different types (Float64, List(Float64))" in _refused(
        tmp_path, monkeypatch, "fit", "parts", "--out", "out", "--no-ray")
    _obs().with_columns(task=pl.struct(t=pl.lit("t"))).write_parquet(tmp_path / "parts" / "b.parquet")
    assert "column 'task' different types (String, Struct({'t': String}))" in _refused(  # it was read as text
        tmp_path, monkeypatch, "fit", "parts", "--out", "out", "--no-ray")
    (tmp_path / "big.jsonl").write_text('{"task": "qa", "id": ' + "9" * 5000 + "}\n")
    assert "big.jsonl: line 1: unreadable JSON (Exceeds the limit (4300 digits)" in _refused(
        tmp_path, monkeypatch, "units", "big.jsonl")


def test_observation_rows_are_numbered_from_one():
    with pytest.raises(ObservationError, match=r"column 'C': observation length C exceeds .* e\.g\. row 2: "):
        validate_observations(_obs().with_columns(C=pl.when(pl.int_range(pl.len()) == 1).then(99).otherwise("C")))


# ------------------------------------------------------------------------------ JSON / JSONL


def test_jsonl_syntax_errors_name_the_line(tmp_path, monkeypatch):
    lines = DOCS.read_text().splitlines()
    (tmp_path / "d.jsonl").write_text("\n".join(lines[:2] + ['{"task": "qa", "id": 9,}'] + lines[2:]) + "\n")
    with pytest.raises(StoreError, match=r"d\.jsonl: line 3: invalid JSON at column 24: Expecting property name"):
        read_input(str(tmp_path / "d.jsonl"))
    err = _refused(tmp_path, monkeypatch, "units", "d.jsonl")
    assert err.startswith("error: d.jsonl: line 3: invalid JSON at column 24"), err
    (tmp_path / "l.jsonl").write_text(lines[0] + "\n[1, 2]\n")
    with pytest.raises(StoreError, match=r"l\.jsonl: line 2: expected a JSON object, got list"):
        read_input(str(tmp_path / "l.jsonl"))
    with pytest.raises(StoreError, match=r"x\.json: invalid JSON at line 2, column 1"):
        json_records("x.json", b'[{"a": 1},\n]')
    with pytest.raises(StoreError, match=r"u\.jsonl: line 2: not UTF-8 text \(byte 11\)"):
        json_records("u.jsonl", b'{"a": 1}\n{"\xff": 2}\n')


def test_documents_run_names_the_line_of_a_syntax_error(tmp_path, monkeypatch):
    (tmp_path / "docs.jsonl").write_text(DOCS.read_text().splitlines()[0] + '\n{"task": "qa",\n')
    job = (ROOT / "jobs" / "dolce-documents.yaml").read_text().replace("data/documents/example.jsonl", "docs.jsonl")
    (tmp_path / "job.yaml").write_text(job)
    err = _refused(tmp_path, monkeypatch, "run", "job.yaml", "--store", "store", "--run-id", "r")
    assert err.startswith("error: docs.jsonl: line 2: invalid JSON at column"), err


# ------------------------------------------------------------------------------ documents


def _docs(tmp_path: Path, edit) -> str:
    rows = [json.loads(line) for line in DOCS.read_text().splitlines()]
    edit(rows)
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_documents_task_of_single_unit_contexts_is_refused(tmp_path):
    def one_unit(rows):
        for r in rows:
            if r["task"] == "mc":
                r["context"] = "A single sentence without any break"
    with pytest.raises(DocumentsError, match=r"d\.jsonl: task 'mc' \(e\.g\. id 'mc-1'\): every context splits into a "
                                             r"single unit \(units 'ls'\)"):
        build_documents(DocumentsSuite(kind="documents", data=_docs(tmp_path, one_unit), units="ls"), seed=0)


def test_documents_accept_unicode_task_names(tmp_path):
    def rename(rows):
        for r in rows:
            r["task"] = {"qa": "问答", "mc": "Multiple choice"}.get(r["task"], r["task"])
    problems = build_documents(DocumentsSuite(kind="documents", data=_docs(tmp_path, rename)), seed=0)
    assert {"问答", "Multiple choice"} <= set(problems["task"])


# ------------------------------------------------------------------------------ samples


def _samples() -> pl.DataFrame:
    return check_samples(pl.DataFrame({
        "task": ["kv", "kv"], "sample_id": ["s1", "s2"], "length": [2048, 2048], "context_tokens": [2000, 1990],
        "head": ["Read.\n"] * 2, "context": ["ctx a", "ctx b"], "tail": ["\nQ?"] * 2, "question": ["Q?"] * 2,
        "answers": [["1"], ["2"]], "gold": ["1", "2"], "metric": ["subem"] * 2, "extractor": ["none"] * 2,
        "followup": [None, None], "max_tokens": [None, None], "followup_max_tokens": [None, None],
    }))


SAMPLES_BAD = {
    "unsafe task": (lambda s: s.with_columns(task=pl.lit("../../x")), "task '../../x' is not a safe name"),
    "null sample_id": (lambda s: s.with_columns(sample_id=pl.lit(None, pl.String)), "column 'sample_id' is null"),
    "null context": (lambda s: s.with_columns(context=pl.lit(None, pl.String)), "column 'context' is null"),
    "negative length": (lambda s: s.with_columns(length=pl.lit(-5)), "column 'length' is negative (-5)"),
    "unknown metric": (lambda s: s.with_columns(metric=pl.lit("bleu")), "column 'metric': unknown metric 'bleu'"),
    "unknown extractor": (lambda s: s.with_columns(extractor=pl.lit("x")), "column 'extractor': unknown extractor 'x'"),
    "duplicate": (lambda s: s.with_columns(sample_id=pl.lit("s1")), "duplicate sample task='kv' sample_id='s1'"),
    "empty": (lambda s: s.clear(), "no samples"),
}


@pytest.mark.parametrize("case", sorted(SAMPLES_BAD))
def test_samples_table_refuses_in_one_line(case):
    edit, message = SAMPLES_BAD[case]
    with pytest.raises(SampleTableError) as info:
        check_samples(edit(_samples()), "suite x")
    assert str(info.value).startswith("suite x: ") and message in str(info.value) and "\n" not in str(info.value)
    if case not in ("empty", "unsafe task"):
        assert "task='kv' sample_id=" in str(info.value)  # the example sample


# ------------------------------------------------------------------------------ pools


def test_source_pool_refuses_duplicate_rows():
    frame = pl.DataFrame({"text": ["a doc.", "b doc.", "a doc."], "question": ["q?", None, "q?"],
                          "answers": [["x"], None, ["x"]], "summary": [None, "s", None]})
    with pytest.raises(PoolError, match=r"^src\.jsonl: row 3: duplicate row \(same text, question, answers, summary, "
                                        r"query and group as row 1\)$"):
        pool_from_frame(frame, get_tokenizer(None), source="src.jsonl", kind="sources")
    other = frame.with_columns(question=pl.Series(["q?", None, "another q?"]))  # one text, two questions: two samples
    assert len(pool_from_frame(other, get_tokenizer(None), kind="sources")) == 3


def test_longbench100_task_with_no_sample_at_any_length_is_refused():
    suite = LongBench100Suite(kind="longbench100", sources=str(LB100 / "sources.jsonl"),
                              distractors=str(LB100 / "distractors.jsonl"), tasks=["single_doc_qa"], lengths=[64, 128],
                              base_lengths=[64], samples_per_length=2)
    with pytest.raises(PoolError, match=r"sources\.jsonl: task single_doc_qa: no sample fits any length of "
                                        r"suite\.lengths \(largest 128 tokens\)"):
        build_longbench100(suite, seed=0)


def test_longscore_names_with_tex_markup_are_drawn_as_text(tmp_path, monkeypatch):
    """Found by the 5,200-input fuzz run: a task named '$$' reached matplotlib's TeX parser and
    raised a ValueError traceback; names are data, drawn as they are."""
    pl.DataFrame({"model": ["m$1", "m$1", "m$1", "m$1"], "task": ["$$", "$x^2$", "$$", "$x^2$"],
                  "length": [4096, 4096, 8192, 8192], "score": [0.5, 0.6, 0.4, 0.3]}).write_csv(tmp_path / "s.csv")
    code, out, err = _cli(tmp_path, monkeypatch, "longscore", "s.csv", "--out", "out",
                          "--base-lengths", "4096", "--no-ray")
    assert code == 0, err
    assert {"score_vs_length.png", "longscore_vs_length.png"} <= set(os.listdir(tmp_path / "out"))


@pytest.mark.parametrize("tasks, message", [
    (["a", "a"], "task 'a' is listed twice"),
    (["", "b"], "task '' is not a safe name"),
    (["../x"], "task '../x' is not a safe name"),
])
def test_planted_suite_task_names_are_checked(tmp_path, monkeypatch, tasks, message):
    """Found by the 5,200-input fuzz run: planted tasks ['', ''] gave two problems one id and a
    ShapeError traceback in `raylc plan`; planted task names are checked like every other name."""
    import yaml

    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"name": "j", "suite": {"tasks": tasks, "problems_per_task": 2}}))
    err = _refused(tmp_path, monkeypatch, "plan", "job.yaml")
    assert err.startswith("error: job.yaml: key 'suite.tasks': ") and message in err, err


def test_a_ray_address_from_the_environment_with_no_host_fails_at_once():
    """``RAY_ADDRESS=ray://``: Ray's client would wait about 30 s on a DNS lookup of nothing."""
    import time

    from raylc.run.session import RayUnavailable, check_ray_address

    start = time.monotonic()
    with pytest.raises(RayUnavailable, match=r"RAY_ADDRESS=ray:// \(from the environment\): no host; unset"):
        check_ray_address("ray://", 30.0, "RAY_ADDRESS")
    assert time.monotonic() - start < 1.0
