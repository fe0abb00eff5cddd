"""Request ids, the key resume stores completions under (README "Resume"): unique per request,
equal in every process, changed by whatever changes a completion (probe, its sampling, seed),
unchanged by operational settings. No Ray: the ids are plain stage functions of both families."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from sweep.test_stages import samples

from raylc.dolce import stages as dolce
from raylc.spec import load_job
from raylc.sweep import stages as sweep

ROOT = Path(__file__).resolve().parents[1]
DOLCE_JOB = ROOT / "jobs" / "dolce-vllm.yaml"
SWEEP_JOB = ROOT / "jobs" / "helmet-recall-vllm-128k.yaml"
SMALL = {"suite.problems_per_task": 3}

#: settings that change what a probe generates: every id must change
CHANGES = {
    "probe.model": "other/model",
    "probe.sampling.temperature": 0.7,
    "probe.sampling.max_tokens": 17,
    "probe.max_model_len": 8192,
    "seed": 5,
}
#: operational settings (how fast, not what): every id stays
SAME = {
    "probe.replicas": 3,
    "probe.max_concurrent_batches": 9,
    "probe.prepare_actors": 2,
    "probe.max_engine_restarts": 0,
    "store.path": "/elsewhere",
    "ray.actors": 4,
    "inference.shard_rows": 123,
}


def _dolce_ids(overrides: dict) -> pl.DataFrame:
    """Ids of the spans of the small planted job, for the problems and spans of the unchanged job."""
    base = load_job(DOLCE_JOB, SMALL)
    problems = dolce.build(base)
    spans = dolce.sample(problems, base)
    return dolce.with_request_ids(spans, problems, load_job(DOLCE_JOB, {**SMALL, **overrides}))


def _sweep_ids(overrides: dict) -> pl.Series:
    return sweep.requests(samples(), load_job(SWEEP_JOB, overrides))["request_id"]


@pytest.fixture(scope="module")
def other_process():
    """The DOLCE and sweep ids of the unchanged jobs, computed in another interpreter (its own
    random string-hash seed), once for both tests below."""
    code = ("import json; from test_request_ids import _dolce_ids, _sweep_ids; "
            "print(json.dumps({'dolce': _dolce_ids({})['request_id'].to_list(), 'sweep': _sweep_ids({}).to_list()}))")
    env = {**os.environ, "PYTHONHASHSEED": "random", "PYTHONPATH": str(ROOT / "tests")}
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_dolce_ids_are_unique_per_span_and_stable():
    ids = _dolce_ids({})
    assert ids.height > 100 and ids["request_id"].n_unique() == ids.height
    # a span is (problem, C, start): several starts per length, several lengths per problem
    assert ids.group_by("problem_id", "C").len()["len"].max() > 1
    assert ids["request_id"].equals(_dolce_ids({})["request_id"])


def test_dolce_ids_are_equal_across_processes(other_process):
    assert other_process["dolce"] == _dolce_ids({})["request_id"].to_list()


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_dolce_ids_change_with_what_changes_a_completion(key):
    base = _dolce_ids({})["request_id"]
    assert set(_dolce_ids({key: CHANGES[key]})["request_id"]).isdisjoint(base)


def test_ids_change_with_the_truncation_side():
    assert load_job(DOLCE_JOB).probe.truncation == "middle" and load_job(SWEEP_JOB).probe.truncation == "end"
    assert set(_dolce_ids({"probe.truncation": "end"})["request_id"]).isdisjoint(_dolce_ids({})["request_id"])
    assert set(_sweep_ids({"probe.truncation": "middle"})).isdisjoint(_sweep_ids({}))


@pytest.mark.parametrize("key", sorted(SAME))
def test_dolce_ids_ignore_operational_settings(key):
    assert _dolce_ids({key: SAME[key]})["request_id"].equals(_dolce_ids({})["request_id"])


def test_dolce_ids_change_with_the_problem_content():
    base = load_job(DOLCE_JOB, SMALL)
    problems = dolce.build(base)
    spans = dolce.sample(problems, base)
    edited = problems.with_columns(
        units=pl.when(pl.col("problem_id") == problems["problem_id"][0])
        .then(pl.col("units").list.concat(pl.lit(["one more unit"])))
        .otherwise(pl.col("units")))
    a = dolce.with_request_ids(spans, problems, base)
    b = dolce.with_request_ids(spans, edited, base)
    first = pl.col("problem_id") == problems["problem_id"][0]
    assert set(a.filter(first)["request_id"]).isdisjoint(b.filter(first)["request_id"])
    assert a.filter(~first)["request_id"].equals(b.filter(~first)["request_id"])


def test_sweep_ids_are_unique_per_request_and_stable():
    ids = _sweep_ids({})
    assert ids.n_unique() == samples().height and ids.equals(_sweep_ids({}))


def test_sweep_ids_are_equal_across_processes(other_process):
    assert other_process["sweep"] == _sweep_ids({}).to_list()


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_sweep_ids_change_with_what_changes_a_completion(key):
    assert set(_sweep_ids({key: CHANGES[key]})).isdisjoint(_sweep_ids({}))


@pytest.mark.parametrize("key", sorted(SAME))
def test_sweep_ids_ignore_operational_settings(key):
    assert _sweep_ids({key: SAME[key]}).equals(_sweep_ids({}))


def test_sweep_ids_change_with_each_prompt_part():
    s = samples()
    base = sweep.requests(s, load_job(SWEEP_JOB))["request_id"]
    for column in ("head", "context", "tail"):
        edited = s.with_columns(pl.col(column) + "!")
        assert set(sweep.requests(edited, load_job(SWEEP_JOB))["request_id"]).isdisjoint(base), column
