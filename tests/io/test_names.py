"""Safe names (raylc/io/names.py): one rule for every user value that becomes a path segment
(tasks in ``infer/task=<task>/``, run ids), refused with one line when unsafe, never written
outside ``<store>/<run_id>/``."""

from __future__ import annotations

import json
import os
import subprocess
import unicodedata
import urllib.parse
from pathlib import Path, PurePosixPath, PureWindowsPath

import polars as pl
import pytest
from cli_runner import raylc
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from raylc.io.names import MAX_BYTES, UnsafeName, check_name, path_segment
from raylc.run.checkpoint import ShardWriter, iter_shards
from raylc.run.errors import RunError
from raylc.run.folder import RunFolder
from raylc.run.runner import default_run_id, open_run
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
RAYLC = str(ROOT / ".venv" / "bin" / "raylc")
DOCS = ROOT / "jobs" / "data" / "documents" / "example.jsonl"
UNSAFE = ["../../../../x", "../../escape", "task=weird", ".", "..", "", ".hidden", "a/b", "a\\b", "a\x00b", "tab\tx",
          "line\nbreak", "x%2F..", "a+b", "C:", "what?", " lead", "trail ", "e\u0301", "a" * (MAX_BYTES + 1),
          "数" * (MAX_BYTES // 3 + 1), "／fullwidth-solidus", "a\u2215b"]
SAFE = ["qa", "single_doc_qa", "planted-a", "Single-doc QA", "v1.2", "数学", "résumé", "हिन्दी", "Ünïcødé-任务_1",
        "a" * MAX_BYTES, "-dash-first"]

# names drawn from every kind of character, and names drawn from the allowed ones only
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.text(alphabet="./\\=%+:_- a\x00é数", max_size=12)
ALLOWED = st.characters(categories=("L", "N", "M")) | st.sampled_from("._- ")


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
@example("..")
@example(".")
@example("../x")
def test_every_accepted_name_is_one_safe_segment(name):
    why = check_name(name)
    if why is not None:
        with pytest.raises(UnsafeName) as info:
            path_segment(name, "task", 3, "docs.jsonl")
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith("docs.jsonl: row 3: task ") and why in msg
        return
    assert path_segment(name, "task") == name  # refused or returned unchanged: never rewritten
    assert not ({"/", "\\", "\x00"} & set(name)) and name not in (".", "..") and not name.startswith(".")
    assert PurePosixPath(name).parts == (name,) and PureWindowsPath(name).parts == (name,)
    assert os.path.normpath(os.path.join("/store/run", name)) == f"/store/run/{name}"  # stays under its parent
    # what Polars / DuckDB / pyarrow read back from task=<name> is the name itself
    assert urllib.parse.unquote(name) == name and urllib.parse.unquote_plus(name) == name and "=" not in name
    assert unicodedata.normalize("NFC", name) == name and len(name.encode()) <= MAX_BYTES
    assert all(unicodedata.category(c)[0] != "C" for c in name)  # no control, format or surrogate characters


@settings(max_examples=200, deadline=None)
@given(st.characters(categories=("L", "N")), st.text(ALLOWED, max_size=30))
def test_letters_digits_of_any_script_are_accepted(first, rest):
    name = unicodedata.normalize("NFC", first + rest).rstrip(" ")
    assume(len(name.encode()) <= MAX_BYTES)
    assert check_name(name) is None, name


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused_in_one_line(name):
    with pytest.raises(UnsafeName) as info:
        path_segment(name, "task", 7, "d.jsonl")
    assert "\n" not in str(info.value) and str(info.value).startswith("d.jsonl: row 7: task ")
    assert "is not a safe name" in str(info.value)


@pytest.mark.parametrize("name", SAFE)
def test_safe_names_are_kept(name):
    assert path_segment(name, "task") == name


def test_not_text_is_refused():
    with pytest.raises(UnsafeName, match="not text"):
        path_segment(3, "task")


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_shard_writer_refuses_an_unsafe_task_before_writing(tmp_path):
    writer = ShardWriter(RunFolder(str(tmp_path / "store"), "run"), max_rows=10**6, max_seconds=1e9)
    writer.add(pl.DataFrame({"task": ["ok", "../../../x"], "request_id": ["a", "b"], "error": [None, None]},
                            schema_overrides={"error": pl.String}))
    with pytest.raises(UnsafeName, match=r"task '\.\./\.\./\.\./x' is not a safe name"):
        writer.flush()
    assert _tree(tmp_path) == set()  # not even the safe task's shard


def test_unicode_tasks_round_trip_through_shards_polars_and_duckdb(tmp_path):
    tasks = ["数学", "résumé", "Single-doc QA", "v1.2"]
    writer = ShardWriter(RunFolder(str(tmp_path / "store"), "run"), max_rows=10**6, max_seconds=1e9)
    writer.add(pl.DataFrame({"task": tasks, "request_id": [f"r{i}" for i in range(4)], "completion": ["x"] * 4,
                             "error": [None] * 4}, schema_overrides={"error": pl.String}))
    writer.flush()
    assert {p.name for p in (tmp_path / "store" / "run" / "infer").iterdir()} == {f"task={t}" for t in tasks}
    back = pl.concat(list(iter_shards(RunFolder(str(tmp_path / "store"), "run"))))
    assert sorted(back["task"]) == sorted(tasks)
    glob = str(tmp_path / "store" / "run" / "infer" / "**" / "*.parquet")
    assert sorted(pl.read_parquet(glob, hive_partitioning=True)["task"]) == sorted(tasks)
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(f"SELECT task FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()
    assert sorted(t for (t,) in got) == sorted(tasks)


def test_run_ids_are_safe_names(tmp_path):
    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": str(tmp_path / "store")})
    for bad in ("../x", "a/b", ".hidden", "x" * (MAX_BYTES + 1)):
        with pytest.raises(RunError, match="run id .* is not a safe name"):
            open_run(job, bad)
    assert open_run(job, "数学-run").run_id == "数学-run"
    assert default_run_id(job).startswith(f"{job.name}-")
    other = job.model_copy(update={"seed": job.seed + 1})  # started in the same second, one run each
    assert len({default_run_id(job), default_run_id(other)}) == 2
    for name in (".hidden", "n" * MAX_BYTES):  # a job name the spec lets through, making an unsafe run id
        with pytest.raises(RunError, match="run id \\(from the job's name\\)"):
            default_run_id(job.model_copy(update={"name": name}))
    assert _tree(tmp_path) == set()


# ------------------------------------------------------------------------------ command line


def _deep(tmp_path: Path) -> Path:
    """A working directory five levels down, so that '../../../../x' would still land in tmp_path."""
    cwd = tmp_path / "a" / "b" / "c" / "d" / "e"
    cwd.mkdir(parents=True)
    return cwd


def _documents_job(cwd: Path, task: str) -> Path:
    rows = [json.loads(line) for line in DOCS.read_text().splitlines()]
    for row in rows[:3]:
        row["task"] = task
    (cwd / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = (ROOT / "jobs" / "dolce-documents.yaml").read_text().replace("data/documents/example.jsonl", "docs.jsonl")
    (cwd / "job.yaml").write_text(job)
    return cwd / "job.yaml"


def _raylc(cwd: Path, *args: str, in_process: bool = True) -> tuple[int, str]:
    """(exit code, stderr) of ``raylc ARGS`` run in ``cwd``: in-process (tests/cli_runner.py), or the
    installed command in a subprocess when ``in_process`` is false."""
    if not in_process:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        proc = subprocess.run([RAYLC, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
        return proc.returncode, proc.stderr
    proc = raylc(*args, cwd=cwd, env={"RAY_ADDRESS": None})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr


def _one_line_exit_2(code: int, stderr: str) -> str:
    assert code == 2, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    return stderr


@pytest.mark.parametrize("task, in_process", [("../../../../x", False), ("../../escape", True), ("task=weird", True),
                                              ("a/b", True)])
def test_run_refuses_a_documents_task_that_is_not_a_safe_name(tmp_path, task, in_process):
    cwd = _deep(tmp_path)
    job = _documents_job(cwd, task)
    before = _tree(tmp_path)
    err = _one_line_exit_2(*_raylc(cwd, "run", str(job), "--store", "store", "--run-id", "r",
                                   in_process=in_process))
    assert (err.startswith(f"error: {job.parent / 'docs.jsonl'}: row 1 (id 'qa-1'): task ")
            and "is not a safe name" in err)
    assert _tree(tmp_path) == before  # nothing written anywhere, not even the store


@pytest.mark.parametrize("run_id", ["../x", "a/b", "..", ".hidden", "a\\b", "x:y"])
def test_run_refuses_a_run_id_that_is_not_a_safe_name(tmp_path, run_id):
    cwd = _deep(tmp_path)
    before = _tree(tmp_path)
    err = _one_line_exit_2(*_raylc(cwd, "run", str(ROOT / "jobs" / "quickstart.yaml"), "--store", "store",
                                   "--run-id", run_id))
    assert err.startswith("error: --run-id ") and "is not a safe name" in err
    assert _tree(tmp_path) == before


def test_tasks_differing_only_in_case_are_refused(tmp_path):
    from raylc.suites.documents import DocumentsError, DocumentsSuite, build_documents

    rows = [json.loads(line) for line in DOCS.read_text().splitlines()]
    rows[1]["task"] = "QA"
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DocumentsError, match=r"row 2 \(id 'qa-2'\): task 'QA' differs from task 'qa' \(row 1\) "
                                             r"only in case"):
        build_documents(DocumentsSuite(kind="documents", data=str(path)), seed=0)


@pytest.mark.ray
def test_a_documents_run_with_unicode_task_names(ray_session, tmp_path):
    """A CJK and an accented task name through the whole DOLCE pipeline: shards under
    infer/task=<name>/, read back as the same names by the score stage, fitted and reported."""
    from raylc.evaluate import evaluate

    names = {"qa": "问答", "mc": "Choix multiple", "sum": "résumé"}
    rows = [json.loads(line) for line in DOCS.read_text().splitlines()]
    for row in rows:
        row["task"] = names[row["task"]]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    job = load_job(ROOT / "jobs" / "dolce-documents.yaml", {
        "suite.data": str(tmp_path / "docs.jsonl"), "suite.task_templates": {"résumé": "summary"},
        "store.path": str(tmp_path / "store")})
    evaluate(job, "unicode", log=lambda m: None)
    run = tmp_path / "store" / "unicode"
    assert {p.name for p in (run / "infer").iterdir()} == {f"task={n}" for n in names.values()}
    assert set(pl.read_parquet(run / "score" / "observations.parquet")["task"]) == set(names.values())
    assert set(pl.read_parquet(run / "fits" / "problems.parquet")["task"]) == set(names.values())
    assert {p.split("/")[0] for p in _tree(tmp_path)} == {"docs.jsonl", "store"}
    assert {p.split("/")[1] for p in _tree(tmp_path) if p.startswith("store/")} == {"unicode"}
