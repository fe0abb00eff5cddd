"""Fuzz test of the command line (issue 14 item 7): generated job files, observation tables,
LongScore score tables and documents files through `raylc run`, `plan`, `fit`, `longscore`
and `units`, run in-process with typer's CliRunner.

For every input: exit code 0, 1 or 2, no Python traceback, and nothing written outside the
store / output folder (every file under a parent temp folder is snapshotted before and after).
Some of the `fit` and `longscore` inputs draw their figures (names reach matplotlib there; the
"figures drawn" event of --hypothesis-show-statistics counts them); the rest pass --no-figures,
since drawing costs more than the rest of the command.

Runs in CI (520 derandomized inputs, ~45 s). RAYLC_FUZZ_EXAMPLES multiplies the example
counts, e.g. ``RAYLC_FUZZ_EXAMPLES=10 pytest tests/test_cli.py`` for 5,200 inputs (the
figure in docs/runs.md).
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from pathlib import Path

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from typer.testing import CliRunner

from raylc.cli import app
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[1]
SCALE = max(1, int(os.environ.get("RAYLC_FUZZ_EXAMPLES", "1")))
COUNTS = {"run": 120, "plan": 80, "fit": 120, "longscore": 120, "units": 80}  # 520 inputs (+2 fixed valid runs)
RUNNER = CliRunner()
# one input in six also draws the figures (they take most of a fit or longscore call)
FIGURES = st.sampled_from([False] * 5 + [True])


def _settings(command: str):
    return settings(max_examples=COUNTS[command] * SCALE, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------- the invariant harness

def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                st_ = p.stat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


_CLOSED_STREAM = re.compile(r"--- Logging error ---\nTraceback \(most recent call last\):\n.*?"
                            r"ValueError: I/O operation on closed file\.\n", re.S)


def invoke(root: Path, args: list[str], allowed: tuple[str, ...]):
    """Run ``raylc *args`` with the working directory at ``root/cwd`` (so relative writes land
    under ``root`` and are seen); check the exit code, the absence of a traceback and that every
    file created, changed or removed under ``root`` is under one of the ``allowed`` subfolders."""
    cwd = root / "cwd"
    cwd.mkdir(exist_ok=True)
    before = _snapshot(root)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = RUNNER.invoke(app, args)
    finally:
        os.chdir(old)
    after = _snapshot(root)
    stderr = getattr(result, "stderr", "") or ""
    text = f"args: {args}\nexit: {result.exit_code}\noutput:\n{result.output}\nstderr:\n{stderr}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback
        tb = "".join(traceback.format_exception(type(result.exception), result.exception,
                                                result.exception.__traceback__))
        raise AssertionError(f"uncaught exception\n{text}\n{tb}")
    assert result.exit_code in (0, 1, 2), text
    if currently_in_test_context():
        event(f"exit {result.exit_code}")
    # CliRunner swaps sys.stderr per invoke; a logging handler that Ray attached to an earlier
    # invoke's (now closed) stream prints "--- Logging error --- ... I/O operation on closed
    # file": an artifact of running in-process, not of raylc, so that block alone is ignored.
    shown = _CLOSED_STREAM.sub("", result.output + stderr)
    assert "Traceback (most recent call last)" not in shown, text
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    outside = sorted(k for k in changed if not any(k == a or k.startswith(a + "/") for a in allowed))
    assert not outside, f"written outside {allowed}: {outside}\n{text}"
    return result


# ---------------------------------------------------------------- strategies

WEIRD_TEXT = st.one_of(
    st.sampled_from(["", " ", "../x", "a/b", "a\\b", "/abs", "..", ".", ".hidden", "task=x", "50%", " lead",
                     "trail ", "数学", "résumé", "re\u0301sume\u0301", "x" * 201, "é" * 101, "a\x00b", "a\nb",
                     "~", "$HOME", "C:\\x", "s3://b/k", "null", "1e999", "-1", "2024", "QA"]),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=190, max_size=260),
)
WEIRD_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.sampled_from([0, -1, 1, 2, 10**9, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), WEIRD_TEXT,
    st.lists(st.one_of(st.integers(-5, 100), WEIRD_TEXT), max_size=4),
    st.dictionaries(st.sampled_from(["a", "kind", "x", "path"]), st.integers(-3, 3), max_size=2),
)
UNKNOWN_KEY = st.one_of(st.sampled_from(["bogus", "Seed", "suite_", "extra", "paths", "name "]), WEIRD_TEXT)


def _tiny_planted() -> dict:
    job = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    job["suite"].update(tasks=["planted-a"], problems_per_task=2, min_units=10, max_units=20,
                        lambdas=[1, 2, "L"], ks=[1, 2])
    job["fit"]["scenario"] = "cow"
    job["ray"].update(actor_num_cpus=0.25, batch_size=64)
    return job


def _tiny_helmet() -> dict:
    job = yaml.safe_load((ROOT / "jobs" / "helmet-recall.yaml").read_text())
    job["suite"].update(tasks=["json_kv"], lengths=[512, 1024], base_lengths=[512], samples_per_length=1, depths=1)
    job["ray"].update(actor_num_cpus=0.25, batch_size=64)
    return job


BASES = {"planted": _tiny_planted(), "helmet": _tiny_helmet()}


def _paths(d: dict, prefix=()) -> list[tuple]:
    out = []
    for k, v in d.items():
        out.append(prefix + (k,))
        if isinstance(v, dict):
            out += _paths(v, prefix + (k,))
    return out


@st.composite
def job_files(draw):
    """A job dict (or raw text) based on a tiny planted or HELMET job, with 1-3 mutations."""
    if draw(st.integers(0, 19)) == 0:  # raw text: invalid YAML, a scalar, a list, empty
        return draw(st.one_of(st.sampled_from(["", "{", "a: [", "- 1\n- 2", "42", "name: a\nname: b\n", "\t:"]),
                              st.text(max_size=200)))
    job = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 3]))):
        paths = _paths(job)
        kind = draw(st.sampled_from(["set", "set", "set", "unknown", "delete", "name", "task"]))
        if kind in ("set", "delete", "unknown") and paths:
            path = draw(st.sampled_from(paths))
            parent = job
            for k in path[:-1]:
                parent = parent[k]
            if kind == "set":
                parent[path[-1]] = draw(st.one_of(WEIRD_VALUE, st.integers(0, 30),
                                                  st.sampled_from([0.5, 1, 2, True, [1, 2]])))
            elif kind == "delete":
                parent.pop(path[-1], None)
            else:
                target = parent if not isinstance(parent.get(path[-1]), dict) else parent[path[-1]]
                target[draw(UNKNOWN_KEY)] = draw(WEIRD_VALUE)
        elif kind == "name":
            job["name"] = draw(WEIRD_TEXT)
        elif kind == "task" and isinstance(job.get("suite"), dict):
            job["suite"]["tasks"] = [draw(WEIRD_TEXT) for _ in range(draw(st.integers(1, 2)))]
    return job


def _write_job(root: Path, job) -> Path:
    path = root / "job.yaml"
    text = job if isinstance(job, str) else yaml.safe_dump(job, allow_unicode=True, sort_keys=False)
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def _write_table(path_base: Path, rows: list[dict], fmt: str) -> Path:
    if fmt == "jsonl":  # rows as given: mixed types and missing keys per row
        path = path_base.with_suffix(".jsonl")
        path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows), encoding="utf-8")
        return path
    cols = list(dict.fromkeys(k for r in rows for k in r))
    data = {c: [r.get(c) for r in rows] for c in cols}
    try:
        frame = pl.DataFrame({c: pl.Series(c, v, strict=False) for c, v in data.items()})
    except Exception:  # a column polars cannot type: write strings
        frame = pl.DataFrame({c: [None if x is None else str(x) for x in v] for c, v in data.items()})
    if fmt == "csv":
        path = path_base.with_suffix(".csv")
        frame = frame.select(pl.all().cast(pl.String, strict=False)) if frame.width else frame
        frame.write_csv(path)
    else:
        path = path_base.with_suffix(".parquet")
        frame.write_parquet(path)
    return path


SCORE = st.one_of(st.sampled_from([0.0, 1.0, 0.5, None]), st.floats(-1, 2), st.just(float("nan")),
                  st.sampled_from([-1, 2, 100, 150, "x", "", float("inf")]))
INTLIKE = st.one_of(st.integers(-3, 40), st.sampled_from([None, 1.5, "3", "x", 2**62]))


@st.composite
def table_rows(draw, columns: list[str], base_rows):
    """A well-formed table from ``base_rows``, then 0-3 mutations: drop or add a column, nulls,
    duplicate rows, out-of-range values, weird strings."""
    rows = draw(base_rows)
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        kind = draw(st.sampled_from(["drop", "extra", "null", "dup", "value", "weird", "empty"]))
        if not rows:
            break
        i = draw(st.integers(0, len(rows) - 1))
        col = draw(st.sampled_from(columns))
        if kind == "drop":
            for r in rows:
                r.pop(col, None)
        elif kind == "extra":
            name = draw(st.sampled_from(["extra", "Score", "task ", "score_", ""]))
            for r in rows:
                r[name] = draw(st.integers(0, 3))
        elif kind == "null":
            rows[i][col] = None
        elif kind == "dup":
            rows.append(dict(rows[i]))
        elif kind == "value":
            rows[i][col] = draw(st.one_of(INTLIKE, SCORE))
        elif kind == "weird":
            rows[i][col] = draw(WEIRD_TEXT)
        elif kind == "empty":
            rows = []
    return rows


@st.composite
def obs_tables(draw):
    """Observation rows: 1-2 tasks, 1-3 problems each, every (C, start) of a few lengths C."""
    rows = []
    for task in draw(st.lists(st.sampled_from(["t1", "t2", "数学", "résumé"]), min_size=1, max_size=2, unique=True)):
        for p in range(draw(st.integers(1, 3))):
            L = draw(st.integers(2, 10))
            metric = draw(st.sampled_from(["exact_match", "f1"]))
            for C in sorted({0, L} | set(draw(st.lists(st.integers(1, L - 1), max_size=2)))):
                for start in range(L - C + 1):
                    score = draw(st.sampled_from([0.0, 1.0, 1.0, None]) if metric == "exact_match"
                                 else st.one_of(st.floats(0, 1), st.none()))
                    rows.append({"task": task, "problem_id": f"p{p}", "L": L, "C": C, "start": start,
                                 "score": score, "metric": metric})
    return rows


@st.composite
def score_tables(draw):
    """LongScore rows: models x tasks x lengths (some missing), 1-3 samples each, with or without sample_id."""
    with_id = draw(st.booleans())
    percent = draw(st.booleans())
    rows = []
    for model in draw(st.lists(st.sampled_from(["m1", "m2", "模型"]), min_size=1, max_size=2, unique=True)):
        for task in draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)):
            lengths = draw(st.lists(st.sampled_from([2048, 4096, 6144, 8192, 16384]), min_size=1,
                                    max_size=5, unique=True))
            for length in lengths:
                for sid in range(draw(st.integers(1, 3))):
                    row = {"model": model, "task": task, "length": length,
                           "score": draw(st.floats(0, 100 if percent else 1))}
                    if with_id:
                        row["sample_id"] = sid
                    rows.append(row)
    return rows


@st.composite
def doc_tables(draw):
    texts = st.one_of(st.sampled_from(["One. Two. Three.", "Para one.\n\nPara two. More. Again.", "", "x",
                                       "数学很好。数学很难。", "a " * 300]), st.text(max_size=120))
    n = draw(st.integers(1, 6))
    return [{"id": f"d{i}", "task": draw(st.sampled_from(["qa", "sum", "数学"])), "context": draw(texts),
             "question": "q?", "answer": "a"} for i in range(n)]


OBS_COLS = ["task", "problem_id", "L", "C", "start", "score", "metric"]
SCORE_COLS = ["model", "task", "length", "score", "sample_id"]
DOC_COLS = ["id", "task", "context", "question", "answer"]


# ---------------------------------------------------------------- the tests

@_settings("run")
@given(job=job_files(), run_id=st.one_of(st.none(), WEIRD_TEXT), seed=st.one_of(st.none(), st.integers(-5, 5)))
def test_fuzz_run_invalid_jobs(job, run_id, seed):
    """`raylc run` of generated jobs that load_job refuses (so no Ray): exit 2, one line."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _write_job(root, job)
        try:
            load_job(path, {"store.path": str(root / "store")})
            valid = True
        except Exception:
            valid = False
        assume(not valid)  # valid jobs would start Ray: covered by test_fuzz_run_valid below
        args = ["run", str(path), "--store", str(root / "store")]
        if run_id is not None:
            args += ["--run-id", run_id]
        if seed is not None:
            args += ["--seed", str(seed)]
        invoke(root, args, allowed=("store",))


@pytest.mark.ray
@pytest.mark.parametrize("base", sorted(BASES))
def test_fuzz_run_valid(ray_session, base):
    """The two tiny valid jobs the generator starts from run end to end inside the store."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _write_job(root, BASES[base])
        result = invoke(root, ["run", str(path), "--store",
                               str(root / "store"), "--run-id", "fuzz"], allowed=("store",))
        assert result.exit_code == 0, result.output


@_settings("plan")
@given(job=job_files(), budget=st.one_of(st.none(), st.integers(-10, 10**7)),
       price=st.one_of(st.none(), st.floats(-1, 10)), write=st.booleans(),
       overhead=st.one_of(st.just(0), st.integers(-1, 50)))
def test_fuzz_plan(job, budget, price, write, overhead):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _write_job(root, job)
        args = ["plan", str(path), "--overhead-tokens", str(overhead)]
        if budget is not None:
            args += ["--budget-tokens", str(budget)]
        if price is not None:
            args += ["--price-per-mtok", repr(price)]
        if write:
            args += ["--write", str(root / "out" / "planned.yaml")]
        invoke(root, args, allowed=("out",))


@_settings("fit")
@given(rows=table_rows(OBS_COLS, obs_tables()), fmt=st.sampled_from(["parquet", "csv", "jsonl"]),
       scenario=st.sampled_from(["auto", "cow", "pig", "auto", "bogus"]),
       threshold=st.sampled_from(["0.5", "0.5", "0", "1", "1.5"]),
       pig_likelihood=st.sampled_from(["paper", "score", "binned"]), figures=FIGURES)
def test_fuzz_fit(rows, fmt, scenario, threshold, pig_likelihood, figures):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        path = _write_table(root / "in" / "obs", rows, fmt)
        result = invoke(root, ["fit", str(path), "--out", str(root / "out"), "--no-ray", "--scenario", scenario,
                      "--threshold", threshold, "--em-steps-cow", "2", "--em-steps-pig", "2", "--uncertainty-steps",
                               "3",
                      "--pig-likelihood", pig_likelihood, "--figures" if figures else "--no-figures"], allowed=("out",))
        if figures and result.exit_code == 0:
            event("figures drawn")


@_settings("longscore")
@given(rows=table_rows(SCORE_COLS, score_tables()), fmt=st.sampled_from(["parquet", "csv", "jsonl"]),
       base=st.sampled_from(["2048,4096,6144", "2048,4096,6144", "2048", "", "x", "16384", "-1,0"]),
       n_boot=st.sampled_from([0, 0, 3, -1]),
       figures=FIGURES)
def test_fuzz_longscore(rows, fmt, base, n_boot, figures):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        path = _write_table(root / "in" / "scores", rows, fmt)
        result = invoke(root, ["longscore", str(path), "--out", str(root / "out"), "--no-ray", "--base-lengths", base,
                      "--n-boot", str(n_boot), "--figures" if figures else "--no-figures"], allowed=("out",))
        if figures and result.exit_code == 0:
            event("figures drawn")


@_settings("units")
@given(rows=table_rows(DOC_COLS, doc_tables()), fmt=st.sampled_from(["jsonl", "jsonl", "parquet", "csv"]),
       spec=st.sampled_from(["s", "ls", "b,ls", "p", "", "zz", "s,,"]),
       fields=st.sampled_from([("task", "context"), ("task", "nope"), ("question", "context")]),
       write=st.booleans())
def test_fuzz_units(rows, fmt, spec, fields, write):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        path = _write_table(root / "in" / "docs", rows, fmt)
        args = ["units", str(path), "--spec", spec, "--task-field", fields[0], "--context-field", fields[1]]
        if write:
            args += ["--out", str(root / "out" / "stats.parquet")]
        invoke(root, args, allowed=("out",))


def test_version_is_the_package_version():
    """`raylc --version` prints raylc.__version__, which is also the installed distribution's version
    (pyproject.toml reads it from there), and nothing else."""
    import importlib.metadata

    from cli_runner import raylc as run_raylc

    import raylc

    proc = run_raylc("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"{raylc.__version__}\n"
    assert importlib.metadata.version("raylc") == raylc.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)*", raylc.__version__)
