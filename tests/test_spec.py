import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import typer
from cli_runner import raylc

from raylc.spec import Job, JobSpecError, load_job, parse_overrides

ROOT = Path(__file__).resolve().parents[1]

BAD_JOBS = {
    "unknown_key": ("name: x\nsampling:\n  stride: 3\n",
                    "unknown key 'sampling.stride' (allowed: lengths, strategy, every, stride_fraction, rate, "
                    "min_length, max_length)"),
    "unknown_section": ("name: x\nprobes: {}\n",
                        "unknown key 'probes' (allowed: name, seed, suite, sampling, probe, scoring, fit, judge, "
                        "inference, store, ray)"),
    "wrong_type": ("name: x\nsuite:\n  problems_per_task: many\n", "key 'suite.problems_per_task'"),
    "bad_backend": ("name: x\nprobe:\n  backend: gpt\n",
                    "key 'probe.backend': 'gpt' is not one of 'simulated', 'vllm', 'openai'"),
    "backend_key": ("name: x\nprobe:\n  backend: vllm\n  model: m\n  tp: 2\n",
                    "unknown key 'probe.tp' (allowed: backend, model, tokenizer,"),
    "nested_key": ("name: x\nprobe: {backend: openai, base_url: 'http://h', model: m, sampling: {max_tokenz: 3}}\n",
                   "unknown key 'probe.sampling.max_tokenz' (allowed: temperature, top_p, max_tokens, stop, seed)"),
    "no_backend": ("name: x\nprobe: {model: m}\n",
                   "missing key 'probe.backend' (one of 'simulated', 'vllm', 'openai')"),
    "missing_key": ("seed: 1\n", "missing key 'name'"),
    "invalid_yaml": ("name: x\nsuite: [unclosed\n", "invalid YAML at line"),
    "not_mapping": ("- just\n- a list\n", "must be a YAML mapping"),
    "bad_lambda": ("name: x\nsuite:\n  lambdas: [0, 2]\n", "key 'suite.lambdas'"),
    "duplicate_key": ("name: x\nsuite:\n  tasks: [a]\n  min_units: 5\n  tasks: [b]\n",
                      "key 'suite.tasks' is given twice (lines 3 and 5)"),
    "duplicate_section": ("name: x\nseed: 1\nname: y\n", "key 'name' is given twice (lines 1 and 3)"),
    "negative_seed": ("name: x\nseed: -7\n", "key 'seed': Input should be greater than or equal to 0 (got -7)"),
    "connect_timeout": ("name: x\nray: {connect_timeout_s: 0}\n", "key 'ray.connect_timeout_s'"),
}


def test_quickstart_loads_and_defaults_are_resolved():
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    assert job.name == "quickstart"
    resolved = job.resolved()
    assert set(resolved) == set(Job.model_fields)
    assert resolved["fit"]["em_steps_cow"] == 10 and resolved["fit"]["em_steps_pig"] == 5
    assert job.fingerprint() == load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": "elsewhere"}).fingerprint()
    assert job.fingerprint() != load_job(ROOT / "jobs" / "quickstart.yaml", {"seed": 5}).fingerprint()


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_job_messages_name_file_and_key(tmp_path, case):
    text, expected = BAD_JOBS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    with pytest.raises(JobSpecError) as err:
        load_job(path)
    message = str(err.value)
    assert message.startswith(str(path))
    assert expected in message
    assert "\n" not in message


def test_missing_job_file(tmp_path):
    with pytest.raises(JobSpecError, match="job file not found"):
        load_job(tmp_path / "nope.yaml")


def test_yaml_merge_keys_may_override(tmp_path):
    """A key given twice is refused, but a merge key (<<) is not a repetition."""
    path = tmp_path / "merge.yaml"
    path.write_text("name: x\nprobe: &p {backend: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n"
                    "judge:\n  <<: *p\n  model: j\n")
    job = load_job(path)
    assert job.judge.model == "j" and job.probe.model == "m"


def test_seed_override_is_checked_too(tmp_path):
    with pytest.raises(JobSpecError, match=r"^--set seed=-1: key 'seed': Input should be greater than or equal to 0"):
        load_job(ROOT / "jobs" / "quickstart.yaml", {"seed": -1})


def test_refused_prompt_names_the_requests_own_max_tokens():
    """A suite's per-task max_tokens (HELMET json_kv: 100) overrides probe.sampling.max_tokens
    (say 16): the message gives the number used and where it can come from."""
    from raylc.text.tokenize import get_tokenizer
    from raylc.text.truncation import PromptTooLong, fit_to_window

    tok = get_tokenizer("default")
    context = "word " * 400
    with pytest.raises(PromptTooLong) as err:
        fit_to_window("Q: ", context, " A:", tok, 300, 100, "refuse")
    assert ("the request's max_tokens 100 (from the suite's limit for this task if it sets one, else "
            "probe.sampling.max_tokens)" in str(err.value))
    with pytest.raises(PromptTooLong, match=r"max_tokens 100 \(from suite helmet_recall, task json_kv\)"):
        fit_to_window("Q: ", context, " A:", tok, 300, 100, "refuse",
                      max_tokens_from="suite helmet_recall, task json_kv")
    with pytest.raises(PromptTooLong, match="instruction and question alone need .* the request's max_tokens 290"):
        fit_to_window("Q: " + "word " * 20, context, " A:", tok, 300, 290, "middle")


def test_store_that_is_a_file_nothing_written(tmp_path):
    """A store that is a file, given as a path or a file:// URL: one line saying so, exit 2, before
    anything runs (no "stages kept")."""
    store = tmp_path / "afile"
    store.write_text("not a folder")
    for where in (store, store / "sub", f"file://{store}", f"file://{store}/sub"):
        proc = raylc("run", ROOT / "jobs" / "quickstart.yaml", "--store", where)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert proc.stderr.startswith(f"error: {where}: the store ") and "not a folder" in proc.stderr
        assert "nothing was written" in proc.stderr and "kept" not in proc.stderr
    assert store.read_text() == "not a folder"


def test_unreachable_s3_store_nothing_written(tmp_path):
    """An S3 store that fails before the run's first write: "nothing was written", not "finished stages are kept"."""
    from raycluster import free_port

    port = free_port()  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "AWS_ENDPOINT_URL_S3")}
    env.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_MAX_ATTEMPTS="1")
    proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(ROOT / "jobs" / "quickstart.yaml"), "--store",
                           "s3://bucket/runs",
                           "--run-id", "r1"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert ("\n" not in line and line.startswith("error: s3://bucket/runs/r1/")
            and line.endswith("; nothing was written")), proc.stderr
    assert "kept" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only folder (see the test below)")
def test_read_only_store_nothing_written(tmp_path):
    store = tmp_path / "ro"
    store.mkdir()
    store.chmod(0o555)
    try:
        proc = raylc("run", ROOT / "jobs" / "quickstart.yaml", "--store", store)
    finally:
        store.chmod(0o755)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {store}: the store is not writable: permission denied; nothing was written"
    assert not any(store.iterdir())


def test_read_only_file_system_store(tmp_path, monkeypatch):
    """A store on a read-only mount (simulated: access() says no, statvfs says ST_RDONLY), even for root."""
    from raylc.evaluate import evaluate
    from raylc.run import runner

    store = tmp_path / "mnt" / "runs"
    (tmp_path / "mnt").mkdir()
    real = os.statvfs(tmp_path)
    monkeypatch.setattr(runner.os, "access", lambda path, mode: False)
    monkeypatch.setattr(runner.os, "statvfs", lambda path: types.SimpleNamespace(f_flag=real.f_flag | os.ST_RDONLY))
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": str(store)})
    with pytest.raises(runner.RunError) as err:
        evaluate(job, "ro", log=lambda m: None)
    assert (str(err.value) == f"{store}: the store is not writable ({tmp_path / 'mnt'}): read-only file system; "
                              "nothing was written")
    assert not store.exists()


@pytest.mark.parametrize("case", ["unknown_key", "wrong_type", "invalid_yaml", "missing_key",
                                  "duplicate_key", "negative_seed"])
def test_cli_bad_job_exit_2_one_line_nothing_written(tmp_path, case):
    text, expected = BAD_JOBS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    store = tmp_path / "store"
    proc = raylc("run", path, "--store", store)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {path}") and expected in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not store.exists()


def test_cli_missing_job_file(tmp_path):
    proc = raylc("run", tmp_path / "missing.yaml", "--store", tmp_path / "s")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing.yaml'}: job file not found"
    assert not (tmp_path / "s").exists()


def test_cli_help_on_every_command():
    proc = subprocess.run([sys.executable, "-m", "raylc", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr  # `python -m raylc` itself
    assert "Usage" in proc.stdout
    from raylc.cli import app

    for name in sorted(typer.main.get_command(app).commands):
        proc = raylc(name, "--help")
        assert proc.returncode == 0, (name, proc.stderr)
        assert "Usage" in proc.stdout, name


# --- --set key.path=value ----------------------------------------------------------------------


def test_set_values_are_yaml():
    got = parse_overrides(["seed=3", "probe.sampling.temperature=0.5", "suite.lengths=[1024, 2048]", "name=my run",
                           "store.path=s3://b/runs", "probe.chat_template=false", "probe.tokenizer=null", "x.y="])
    assert got == {"seed": 3, "probe.sampling.temperature": 0.5, "suite.lengths": [1024, 2048], "name": "my run",
                   "store.path": "s3://b/runs", "probe.chat_template": False, "probe.tokenizer": None, "x.y": ""}


@pytest.mark.parametrize("setting", ["seed", "=3", "a..b=1", "probe.=1", "../x=1", "a b=1", "suite.lengths=[1, 2"])
def test_a_malformed_set_is_one_line_naming_it(setting):
    with pytest.raises(JobSpecError) as err:
        parse_overrides([setting])
    assert str(err.value).startswith(f"--set {setting!r}: ") and "\n" not in str(err.value)


def test_set_changes_a_field_and_an_unknown_key_is_refused():
    job = load_job(ROOT / "jobs" / "quickstart.yaml", parse_overrides(["seed=7", "probe.knowledge_rate=0.5"]))
    assert job.seed == 7 and job.probe.knowledge_rate == 0.5
    with pytest.raises(JobSpecError, match=r"unknown key 'probe\.knowledge'"):
        load_job(ROOT / "jobs" / "quickstart.yaml", parse_overrides(["probe.knowledge=0.5"]))
    with pytest.raises(JobSpecError, match=r"^--set seed\.x=\.\.\.: 'seed' is not a mapping in .*quickstart\.yaml$"):
        load_job(ROOT / "jobs" / "quickstart.yaml", parse_overrides(["seed.x=1"]))


def test_set_errors_name_set_and_the_hint_works_as_printed(tmp_path):
    """The malformed-option hint is itself a valid --set; an error that only the options cause
    names them, not the job file; an error of the file itself still names the file."""
    with pytest.raises(JobSpecError) as err:
        parse_overrides(["seed"])
    hint = str(err.value).split("e.g. --set ")[1].rstrip(")")
    assert load_job(ROOT / "jobs" / "quickstart.yaml", parse_overrides([hint])).seed == 3
    with pytest.raises(JobSpecError, match=r"^--set probe\.knowledge=0\.5: unknown key 'probe\.knowledge'"):
        load_job(ROOT / "jobs" / "quickstart.yaml", parse_overrides(["probe.knowledge=0.5"]))
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "jobs" / "quickstart.yaml").read_text().replace("seed: 0", "seed: -1"))
    with pytest.raises(JobSpecError, match=r"^.*bad\.yaml: key 'seed'"):
        load_job(bad, parse_overrides(["probe.knowledge_rate=0.5"]))


@pytest.mark.parametrize("command", [["plan"], ["check"], ["run"], ["submit", "--address", "http://127.0.0.1:9"]])
def test_cli_set_refuses_an_unknown_key_in_one_line_before_anything(tmp_path, command):
    store = tmp_path / "store"
    out = raylc(command[0], ROOT / "jobs" / "quickstart.yaml", *command[1:], "--set", "probe.knowledge=0.5",
                "--set", f"store.path={store}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: --set probe.knowledge=0.5: unknown key 'probe.knowledge' (allowed: backend, knowledge_rate, "
        "guess_rate, wrong_rate, idk_rate, accuracy, half_life_tokens)"]
    assert not store.exists() and list(tmp_path.iterdir()) == []


def test_cli_plan_with_set_plans_the_changed_job(tmp_path):
    out = raylc("plan", ROOT / "jobs" / "quickstart.yaml", "--set", "suite.problems_per_task=3",
                "--set", "suite.tasks=[only-one]", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    problems = next(line for line in out.stdout.splitlines() if "│ problems " in line)
    assert problems.split("│")[2].strip() == "3"  # 1 task x 3 problems (the file: 2 x 100)


def test_cli_run_hands_the_overrides_to_the_run(tmp_path, monkeypatch):
    """`raylc run --set` reaches :func:`raylc.evaluate.evaluate` (which records it in the manifest,
    tests/run/test_runner.py) with --store and --seed, without starting Ray here."""
    from typer.testing import CliRunner

    import raylc.evaluate
    from raylc.cli import app

    seen = {}
    monkeypatch.setattr(raylc.evaluate, "evaluate", lambda job, run_id, log, overrides: seen.update(
        job=job, overrides=overrides))
    result = CliRunner().invoke(app, ["run", str(ROOT / "jobs" / "quickstart.yaml"), "--store", str(tmp_path),
                                      "--seed", "4", "--set", "suite.problems_per_task=5", "--set",
                                      "probe.guess_rate=0"])
    assert result.exit_code == 0, result.output
    assert seen["overrides"] == {"suite.problems_per_task": 5, "probe.guess_rate": 0, "store.path": str(tmp_path),
                                 "seed": 4}
    assert seen["job"].suite.problems_per_task == 5 and seen["job"].seed == 4 and seen["job"].probe.guess_rate == 0


def test_relative_data_paths_resolve_against_the_job_files_folder(tmp_path, monkeypatch):
    """Issue 18: a job's data path is relative to the job file's folder (else, when nothing is
    there, to the working directory: job files written relative to where raylc runs); the
    job's value, and so its fingerprint, stays as written."""
    jobs = tmp_path / "project" / "jobs"
    (jobs / "data").mkdir(parents=True)
    docs = (ROOT / "jobs" / "data" / "documents" / "example.jsonl").read_text()
    (jobs / "data" / "docs.jsonl").write_text(docs)
    text = (ROOT / "jobs" / "dolce-documents.yaml").read_text().replace(
        "data/documents/example.jsonl", "data/docs.jsonl"
    )
    (jobs / "job.yaml").write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    job = load_job(jobs / "job.yaml")
    assert (job.suite.data == "data/docs.jsonl"
            and job.suite.data_path(job.suite.data) == str(jobs / "data" / "docs.jsonl"))
    built = job.suite.build(job.seed)
    assert built.height > 0
    monkeypatch.chdir(jobs.parent)  # the same job from its project folder: the same fingerprint and table
    again = load_job("jobs/job.yaml")
    assert (again.fingerprint() == job.fingerprint()
            and again.suite.data_path("data/docs.jsonl") == "jobs/data/docs.jsonl")
    assert again.suite.build(again.seed).equals(built)
    # nothing beside the job, a file under the working directory: that one (older job files)
    (elsewhere / "cwd.jsonl").write_text(docs)
    monkeypatch.chdir(elsewhere)
    assert job.suite.data_path("cwd.jsonl") == "cwd.jsonl"
    # found nowhere: the path beside the job, which the one-line error then names
    assert job.suite.data_path("missing.jsonl") == str(jobs / "missing.jsonl")
    for given in ("s3://bucket/docs.jsonl", str(tmp_path / "abs.jsonl")):
        assert job.suite.data_path(given) == given


def test_a_probes_generation_params_are_written_and_dumped_as_sampling(tmp_path):
    """``probe.generation`` in Python (``job.sampling`` is span sampling) is the key ``sampling``
    in a job file, in ``--set`` and in every dump, so job.yaml and request ids keep it."""
    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: x\n"
                        "probe: {backend: openai, base_url: 'http://h', model: m, sampling: {max_tokens: 7}}\n")
    job = load_job(job_file, {"probe.sampling.temperature": 0.5})
    assert (job.probe.generation.max_tokens, job.probe.generation.temperature) == (7, 0.5)
    assert job.max_tokens() == 7
    dumped = job.resolved()["probe"]
    assert dumped["sampling"]["temperature"] == 0.5 and "generation" not in dumped
    assert Job.model_validate(job.resolved()).resolved() == job.resolved()  # a stored job.yaml loads back
    with pytest.raises(JobSpecError, match=r"unknown key 'probe.generation' \(allowed: .*, sampling, "):
        load_job(job_file, {"probe.generation.temperature": 0.5})
