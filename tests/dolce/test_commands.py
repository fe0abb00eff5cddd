"""`raylc fit` and `raylc sensitivity` on observation tables: outputs, Ray vs in-process, bad tables."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import typer
from cli_runner import raylc
from dolce_reference import synth_task
from in_process import infer_frame
from polars.testing import assert_frame_equal

from raylc import __version__
from raylc.dolce import stages
from raylc.dolce.fit import fit_observations
from raylc.dolce.options import POSTERIOR_FIELDS, FitOptions
from raylc.dolce.sensitivity import run_sensitivity
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def obs_path(tmp_path_factory):
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"suite.problems_per_task": 20, "suite.max_units": 150,
                                                        "sampling.strategy": "enumerate"})
    problems = stages.build(job)
    spans = stages.sample(problems, job)
    obs = stages.score(infer_frame(spans, problems, job), problems, job)
    path = tmp_path_factory.mktemp("obs") / "observations.parquet"
    obs.write_parquet(path)
    return path


def _raylc_process(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "raylc", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.ray
def test_fit_ray_equals_in_process_and_compare(obs_path, tmp_path, ray_address):
    a = raylc("fit", obs_path, "--out", tmp_path / "a", "--no-ray")
    assert a.returncode == 0, a.stderr
    # the Ray fit joins the session's Ray (as on a cluster), which saves starting a Ray of its own
    joined = {**os.environ, "RAY_ADDRESS": ray_address}
    b = _raylc_process("fit", obs_path, "--out", tmp_path / "b", "--ray", "--compare", tmp_path / "a", env=joined)
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
    proc = raylc("sensitivity", obs_path, "--out", tmp_path, "--experiments", "take_every", "--every", "5", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    sens = pl.read_parquet(tmp_path / "sensitivity.parquet")
    assert sens["setting"].to_list() == [5.0, 5.0] and (sens["rho_lam"] > 0.5).all()
    assert (tmp_path / "sensitivity.png").exists()


def test_sensitivity_set_adds_a_sampling_experiment(obs_path, tmp_path):
    proc = raylc("sensitivity", obs_path, "--out", tmp_path, "--experiments", "max_length", "--set",
                  "sample_rate=0.5", "--seed", "3", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    sens = pl.read_parquet(tmp_path / "sensitivity.parquet")
    assert sorted(set(zip(sens["experiment"], sens["setting"]))) == [("max_length", 10.0), ("sample_rate", 0.5)]
    bad = raylc("sensitivity", obs_path, "--out", tmp_path / "bad", "--set", "sample_rate=fast", "--no-ray")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --set 'sample_rate=fast': expected NAME=V1,V2 with numbers"]
    zero = raylc("sensitivity", obs_path, "--out", tmp_path / "bad", "--set", "take_every=0", "--no-ray")
    lines = zero.stderr.strip().splitlines()
    assert zero.returncode == 2 and len(lines) == 1 and "take_every = 0:" in lines[0], zero.stderr
    assert not (tmp_path / "bad").exists()


def test_sensitivity_with_nothing_to_refit_is_one_line(obs_path, tmp_path):
    # exact-match scores: no continuous-metric COW problem for the threshold experiment
    proc = raylc("sensitivity", obs_path, "--out", tmp_path / "out", "--experiments", "threshold", "--no-ray")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {obs_path}: no sensitivity cell"), proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "case, mutate, expected",
    [
        ("missing_column", lambda df: df.drop("C"), "'C'"),
        ("c_above_l",
         lambda df: df.with_columns(
             C=pl.when(pl.int_range(pl.len()) == 3).then(pl.col("L") + 1).otherwise(pl.col("C"))
         ),
         "'C'"),
        ("score_range",
         lambda df: df.with_columns(
             score=pl.when(pl.int_range(pl.len()) == 5).then(1.5).otherwise(pl.col("score"))
         ),
         "'score'"),
        ("negative_l",
         lambda df: df.with_columns(L=pl.when(pl.int_range(pl.len()) == 0).then(-3).otherwise(pl.col("L"))),
         "'L'"),
        ("empty_task",
         lambda df: df.with_columns(
             task=pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("")).otherwise(pl.col("task"))
         ),
         "'task'"),
    ],
)
def test_bad_observation_tables(obs_path, tmp_path, case, mutate, expected):
    bad = tmp_path / f"{case}.parquet"
    mutate(pl.read_parquet(obs_path)).write_parquet(bad)
    proc = raylc("fit", bad, "--out", tmp_path / "out", "--no-ray")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: column {expected}"), proc.stderr
    assert "row" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, options",
    [
        (["--scenario", "cow", "--threshold", "0.75", "--em-steps-cow", "3", "--uncertainty", "none"],
         {"scenario": "cow", "threshold": 0.75, "em_steps_cow": 3, "uncertainty": "none"}),
        (["--scenario", "pig", "--em-steps-pig", "2", "--pig-likelihood", "score", "--pig-hit-rate", "mean",
          "--uncertainty-steps", "20"],
         {"scenario": "pig", "em_steps_pig": 2, "pig_likelihood": "score", "pig_hit_rate": "mean",
          "uncertainty_steps": 20}),
        (["--scenario", "pig", "--pig-likelihood", "binned", "--uncertainty-steps", "30"],
         {"scenario": "pig", "pig_likelihood": "binned", "uncertainty_steps": 30}),
    ],
)
def test_fit_options_reach_the_fits(obs_path, tmp_path, args, options):
    proc = raylc("fit", obs_path, "--out", tmp_path, "--no-ray", "--no-figures", *args)
    assert proc.returncode == 0, proc.stderr
    fit_options = FitOptions(**options)
    # fit.json: the input, every fit option (FitOptions' dump), the compared fit and the version
    settings = json.loads((tmp_path / "fit.json").read_text())
    assert settings == {"observations": str(obs_path), **fit_options.model_dump(), "compare": None,
                        "raylc": __version__}
    assert {k: settings[k] for k in options} == options
    obs = pl.read_parquet(obs_path)
    expected, tasks = fit_observations(obs, fit_options)
    assert pl.read_parquet(tmp_path / "problems.parquet").equals(expected)
    assert pl.read_parquet(tmp_path / "tasks.parquet").equals(tasks)
    assert set(expected["scenario"]) == {options["scenario"].upper()}
    # the options matter: the same scenario (and uncertainty) with the default settings fits differently
    default, _ = fit_observations(obs, FitOptions(scenario=options["scenario"], uncertainty_steps=20,
                                                  uncertainty=fit_options.uncertainty))
    assert not default.equals(expected)


def test_fit_no_figures_writes_the_same_tables_and_no_png(obs_path, tmp_path):
    for flag in ("--figures", "--no-figures"):
        proc = raylc("fit", obs_path, "--out", tmp_path / flag, "--no-ray", "--uncertainty", "none", flag)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "--no-figures").iterdir()) == ["fit.json", "problems.parquet",
                                                                             "tasks.parquet"]
    assert {"categories.png", "lambda_k.png"} <= {p.name for p in (tmp_path / "--figures").iterdir()}
    for name in ("problems.parquet", "tasks.parquet", "fit.json"):
        assert (tmp_path / "--figures" / name).read_bytes() == (tmp_path / "--no-figures" / name).read_bytes(), name


def test_fit_without_options_records_the_defaults(obs_path, tmp_path):
    few = tmp_path / "few.parquet"  # 3 problems per task: the record, not the default posterior's work
    pl.read_parquet(obs_path).filter(pl.col("problem_id").rank("dense").over("task") <= 3).write_parquet(few)
    proc = raylc("fit", few, "--out", tmp_path / "out", "--no-ray", "--no-figures")
    assert proc.returncode == 0, proc.stderr
    settings = json.loads((tmp_path / "out" / "fit.json").read_text())
    assert settings == {"observations": str(few), **FitOptions().model_dump(), "compare": None,
                        "raylc": __version__}


@pytest.mark.parametrize(
    "command, args, line",
    [
        ("fit", ["--pig-likelihood", "exact"],
         "error: --pig-likelihood 'exact': expected one of binned, paper, score"),
        ("fit", ["--scenario", "COW"], "error: --scenario 'COW': expected one of auto, cow, pig"),
        ("fit", ["--threshold", "1.5"], "error: --threshold '1.5': Input should be less than or equal to 1"),
        ("sensitivity", ["--pig-hit-rate", "median"], "error: --pig-hit-rate 'median': expected one of mode, mean"),
        ("sensitivity", ["--em-steps-pig", "0"],
         "error: --em-steps-pig '0': Input should be greater than or equal to 1"),
        ("sensitivity", ["--em-steps-cow", "x"],
         "error: --em-steps-cow 'x': Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_commands_reject_bad_fit_options(obs_path, tmp_path, command, args, line):
    proc = raylc(command, obs_path, "--out", tmp_path / "out", "--no-ray", *args)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "out").exists()


def test_both_commands_take_every_fit_option_from_fit_options():
    """One option per FitOptions field on `raylc fit` and `raylc sensitivity` (but the posterior's),
    named after the field, its help the field's description; sensitivity keeps --thresholds beside
    --threshold."""
    from raylc.cli import app

    commands = typer.main.get_command(app).commands
    for name in ("fit", "sensitivity"):
        params = {p.name: p for p in commands[name].params}
        for field, info in FitOptions.model_fields.items():
            if name == "sensitivity" and field in POSTERIOR_FIELDS:  # point estimates only
                assert field not in params
                continue
            assert params[field].opts == ["--" + field.replace("_", "-")], (name, field)
            assert params[field].help == info.description
            assert params[field].default == str(info.default)
    assert {p.name: p.opts for p in commands["sensitivity"].params}["thresholds"] == ["--thresholds"]


@pytest.mark.parametrize(
    "args, options",
    [
        (["--em-steps-cow", "3", "--threshold", "0.6"], {"em_steps_cow": 3, "threshold": 0.6}),
        (["--scenario", "pig", "--em-steps-pig", "2", "--pig-likelihood", "binned", "--pig-hit-rate", "mean"],
         {"scenario": "pig", "em_steps_pig": 2, "pig_likelihood": "binned", "pig_hit_rate": "mean"}),
    ],
)
def test_sensitivity_fit_options_reach_the_fits(obs_path, tmp_path, args, options):
    proc = raylc("sensitivity", obs_path, "--out", tmp_path, "--experiments", "take_every", "--every", "5",
                  "--no-ray", *args)
    assert proc.returncode == 0, proc.stderr
    fit_options = FitOptions(**options)
    settings = json.loads((tmp_path / "sensitivity.json").read_text())
    assert settings["uncertainty"] == "none"  # sensitivity compares point estimates only
    assert settings == {"observations": str(obs_path), **fit_options.point_estimates().model_dump(),
                        "experiments": ["take_every"],
                        "every": [5], "thresholds": [0.0, 0.25, 0.5, 0.75, 1.0], "settings": {}, "seed": 0,
                        "raylc": __version__}
    obs = pl.read_parquet(obs_path)
    expected = run_sensitivity(obs, ("take_every",), every=(5,), options=fit_options)
    assert_frame_equal(pl.read_parquet(tmp_path / "sensitivity.parquet"), expected)
    # the options matter: the same scenario with the default settings gives other figures
    default = run_sensitivity(obs, ("take_every",), every=(5,), options=FitOptions(scenario=fit_options.scenario))
    assert not default.equals(expected)


def test_sensitivity_threshold_option_is_the_reference_of_thresholds(tmp_path):
    """--threshold (FitOptions.threshold, the reference fit) and --thresholds (the threshold
    experiment's settings) are separate options."""
    path = tmp_path / "f1.parquet"
    synth_task("mix", 4, 0, seed=1, stride=3).write_parquet(path)
    proc = raylc("sensitivity", path, "--out", tmp_path / "out", "--experiments", "threshold",
                  "--thresholds", "0.25,0.95", "--threshold", "0.25", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    sens = pl.read_parquet(tmp_path / "out" / "sensitivity.parquet").sort("setting")
    assert sens["setting"].to_list() == [0.25, 0.95]
    same, other = sens.rows(named=True)
    assert same["delta_lam"] == 0 and same["kl_noise"] == 0 and same["category_agreement"] == 1
    assert other["kl_noise"] > 0
    settings = json.loads((tmp_path / "out" / "sensitivity.json").read_text())
    assert settings["threshold"] == 0.25 and settings["thresholds"] == [0.25, 0.95]


@pytest.mark.parametrize(("generator", "says"), [("fixed", "follows the IDK instruction"),
                                                 ("wrong 1", "ignores the IDK instruction")])
def test_fit_prints_the_shares_with_intervals_and_the_probe_check(tmp_path, generator, says):
    """`raylc fit` prints what a run prints: each share with its interval, the probe check table
    and its sentence, for a probe that abstains and one that answers wrongly instead."""
    from dolce_reference import COW_GENERATORS, simulate_cow_task

    obs, _, _ = simulate_cow_task(30, 4, **COW_GENERATORS[generator])
    obs.write_parquet(tmp_path / "obs.parquet")
    out = raylc("fit", str(tmp_path / "obs.parquet"), "--out", str(tmp_path / "fit"), "--no-ray",
                "--uncertainty-steps", "20", "--no-figures")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "share of problems [95% interval]" in text and "Probe check" in text
    assert f"sim: the probe {says}" in text


def test_fit_prints_task_names_as_they_are_never_as_markup(tmp_path):
    """Task names are data, not rich markup: a closing tag does not crash `raylc fit`, and a
    bracketed suffix (LongBench's ``passage_retrieval[en]`` style) is printed whole."""
    from dolce_reference import COW_GENERATORS, simulate_cow_task

    obs, _, _ = simulate_cow_task(6, 4, **COW_GENERATORS["fixed"])
    names = ["qa [/b] en", "passage_retrieval[en]", "[bold red]x"]
    obs = pl.concat([obs.with_columns(task=pl.lit(name)) for name in names])
    obs.write_parquet(tmp_path / "obs.parquet")
    out = raylc("fit", str(tmp_path / "obs.parquet"), "--out", str(tmp_path / "fit"), "--no-ray",
                "--uncertainty", "none", "--no-figures")
    assert out.returncode == 0, out.stderr
    for name in names:
        assert out.stdout.count(name) >= 2, name  # in the shares table and in the probe check
