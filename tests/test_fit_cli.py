"""`raylc fit` and `raylc sensitivity` on observation tables: outputs, Ray vs in-process, bad tables."""

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from raylc.pipeline import stages
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def obs_path(tmp_path_factory):
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"suite.problems_per_task": 20, "suite.max_units": 150,
                                                        "sampling.strategy": "enumerate"})
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    obs = stages.score(stages.infer(spans, problems, job), problems, job)
    path = tmp_path_factory.mktemp("obs") / "observations.parquet"
    obs.write_parquet(path)
    return path


def _raylc(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "raylc", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_fit_ray_equals_in_process_and_compare(obs_path, tmp_path):
    a = _raylc("fit", obs_path, "--out", tmp_path / "a", "--no-ray")
    assert a.returncode == 0, a.stderr
    b = _raylc("fit", obs_path, "--out", tmp_path / "b", "--ray", "--compare", tmp_path / "a")
    assert b.returncode == 0, b.stderr
    for name in ("problems.parquet", "tasks.parquet"):
        assert pl.read_parquet(tmp_path / "a" / name).equals(pl.read_parquet(tmp_path / "b" / name)), name
    problems = pl.read_parquet(tmp_path / "a" / "problems.parquet")
    assert {"task", "problem_id", "scenario", "lam", "k", "category", "loglik", "dip_pvalue"} <= set(problems.columns)
    tasks = pl.read_parquet(tmp_path / "a" / "tasks.parquet")
    assert {"p_noise_1", "p_noise_0", "p_noise_idk", "scenario"} <= set(tasks.columns)
    cmp = pl.read_parquet(tmp_path / "b" / "compare.parquet")
    assert (cmp["delta_lam"] == 0).all() and (cmp["kl_noise"].abs() < 1e-12).all()
    for png in ("categories.png", "lambda_k.png"):
        assert (tmp_path / "a" / png).read_bytes()[:4] == b"\x89PNG"
    assert "DOLCE focus categories" in a.stdout


def test_sensitivity_command(obs_path, tmp_path):
    proc = _raylc("sensitivity", obs_path, "--out", tmp_path, "--experiments", "take_every", "--every", "5", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    sens = pl.read_parquet(tmp_path / "sensitivity.parquet")
    assert sens["setting"].to_list() == [5.0, 5.0] and (sens["rho_lam"] > 0.5).all()
    assert (tmp_path / "sensitivity.png").exists()


def test_sensitivity_set_adds_a_sampling_experiment(obs_path, tmp_path):
    proc = _raylc("sensitivity", obs_path, "--out", tmp_path, "--experiments", "max_length", "--set",
                  "sample_rate=0.5", "--seed", "3", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    sens = pl.read_parquet(tmp_path / "sensitivity.parquet")
    assert sorted(set(zip(sens["experiment"], sens["setting"]))) == [("max_length", 10.0), ("sample_rate", 0.5)]
    bad = _raylc("sensitivity", obs_path, "--out", tmp_path / "bad", "--set", "sample_rate=fast", "--no-ray")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --set 'sample_rate=fast': expected NAME=V1,V2 with numbers"]
    zero = _raylc("sensitivity", obs_path, "--out", tmp_path / "bad", "--set", "take_every=0", "--no-ray")
    lines = zero.stderr.strip().splitlines()
    assert zero.returncode == 2 and len(lines) == 1 and "take_every = 0:" in lines[0], zero.stderr
    assert not (tmp_path / "bad").exists()


def test_sensitivity_with_nothing_to_refit_is_one_line(obs_path, tmp_path):
    # exact-match scores: no continuous-metric COW problem for the threshold experiment
    proc = _raylc("sensitivity", obs_path, "--out", tmp_path / "out", "--experiments", "threshold", "--no-ray")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {obs_path}: no sensitivity cell"), proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "case, mutate, expected",
    [
        ("missing_column", lambda df: df.drop("C"), "'C'"),
        ("c_above_l", lambda df: df.with_columns(C=pl.when(pl.int_range(pl.len()) == 3).then(pl.col("L") + 1).otherwise(pl.col("C"))), "'C'"),
        ("score_range", lambda df: df.with_columns(score=pl.when(pl.int_range(pl.len()) == 5).then(1.5).otherwise(pl.col("score"))), "'score'"),
        ("negative_l", lambda df: df.with_columns(L=pl.when(pl.int_range(pl.len()) == 0).then(-3).otherwise(pl.col("L"))), "'L'"),
        ("empty_task", lambda df: df.with_columns(task=pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("")).otherwise(pl.col("task"))), "'task'"),
    ],
)
def test_bad_observation_tables(obs_path, tmp_path, case, mutate, expected):
    bad = tmp_path / f"{case}.parquet"
    mutate(pl.read_parquet(obs_path)).write_parquet(bad)
    proc = _raylc("fit", bad, "--out", tmp_path / "out", "--no-ray", timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: column {expected}"), proc.stderr
    assert "row" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, options",
    [
        (["--scenario", "cow", "--threshold", "0.75", "--em-steps-cow", "3"],
         {"scenario": "cow", "threshold": 0.75, "em_steps_cow": 3}),
        (["--scenario", "pig", "--em-steps-pig", "2", "--pig-likelihood", "score", "--pig-hit-rate", "mean"],
         {"scenario": "pig", "em_steps_pig": 2, "pig_likelihood": "score", "pig_hit_rate": "mean"}),
        (["--scenario", "pig", "--pig-likelihood", "binned"], {"scenario": "pig", "pig_likelihood": "binned"}),
    ],
)
def test_fit_options_reach_the_fits(obs_path, tmp_path, args, options):
    from raylc.dolce import fit_observations

    proc = _raylc("fit", obs_path, "--out", tmp_path, "--no-ray", *args)
    assert proc.returncode == 0, proc.stderr
    settings = json.loads((tmp_path / "fit.json").read_text())
    assert settings["observations"] == str(obs_path) and {k: settings[k] for k in options} == options
    obs = pl.read_parquet(obs_path)
    expected, tasks = fit_observations(obs, **options)
    assert pl.read_parquet(tmp_path / "problems.parquet").equals(expected)
    assert pl.read_parquet(tmp_path / "tasks.parquet").equals(tasks)
    assert set(expected["scenario"]) == {options["scenario"].upper()}
    # the options matter: the same scenario with the default settings fits differently
    default, _ = fit_observations(obs, scenario=options["scenario"])
    assert not default.equals(expected)


def test_fit_rejects_unknown_pig_option(obs_path, tmp_path):
    proc = _raylc("fit", obs_path, "--out", tmp_path / "out", "--no-ray", "--pig-likelihood", "exact")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --pig-likelihood 'exact': expected one of hit_rate, score, binned"]
    assert not (tmp_path / "out").exists()
