"""The stage runner (:mod:`raylc.run.runner`) with a toy evaluation, in process and without
Ray: the stage loop, the manifest, resume at the first unfinished stage, invalidation of what
is downstream of a redone stage, failures in one line, and the lock."""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylc.run.errors import RunError
from raylc.run.folder import LOCK, MANIFEST
from raylc.run.manifest import StageRecord
from raylc.run.runner import open_run, run_job, stage_table
from raylc.spec import parse_job


class Counting:
    """An evaluation of three stages that records which ran; ``fail`` names a stage that raises."""

    def __init__(self, fail: str = "", error: type = ValueError) -> None:
        self.ran: list[str] = []
        self.fail = fail
        self.error = error

    def build(self, job):
        return pl.DataFrame({"x": [1, 2, 3]})

    def _stage(self, name: str, upstream: str = ""):
        def fn(run):
            self.ran.append(name)
            if name == self.fail:
                raise self.error(f"{name}: the data cannot go on")
            frame = run.built if name == "build" else run.folder.read(f"{upstream}/t.parquet").with_columns(
                pl.col("x") + 1)
            run.folder.write(frame, f"{name}/t.parquet")
            return {"rows": frame.height}
        return fn

    def stages(self, job):
        return (("build", ("build/t.parquet",), self._stage("build")),
                ("middle", ("middle/t.parquet",), self._stage("middle", "build")),
                ("last", ("last/t.parquet",), self._stage("last", "middle")))


@pytest.fixture
def job(tmp_path):
    return parse_job({"name": "toy", "store": {"path": str(tmp_path)}})


def _manifest(tmp_path, run_id="r"):
    return json.loads((tmp_path / run_id / MANIFEST).read_text())


def test_stages_run_in_order_and_the_manifest_records_them(job, tmp_path):
    logs: list[str] = []
    evaluation = Counting()
    run = run_job(job, evaluation, "r", log=logs.append)
    assert evaluation.ran == ["build", "middle", "last"]
    assert pl.read_parquet(tmp_path / "r" / "last" / "t.parquet")["x"].to_list() == [3, 4, 5]
    manifest = _manifest(tmp_path)
    assert manifest == run.manifest.record() | {"updated_at": manifest["updated_at"]}
    assert manifest["version"] == 3
    assert {s: v["status"] for s, v in manifest["stages"].items()} == dict.fromkeys(["build", "middle", "last"], "done")
    assert manifest["stages"]["middle"]["rows"] == {"rows": 3}
    assert manifest["fingerprint"] == job.fingerprint() and "finished_at" in manifest
    assert logs[0] == f"run r -> {tmp_path / 'r'}" and "middle" in logs[-1] and not (tmp_path / "r" / LOCK).exists()


def test_a_rerun_skips_done_stages_and_a_redone_stage_redoes_what_follows(job, tmp_path):
    run_job(job, Counting(), "r", log=lambda m: None)
    again = Counting()
    logs: list[str] = []
    run_job(job, again, "r", log=logs.append)
    assert again.ran == [] and sum("done already, skipped" in line for line in logs) == 3
    (tmp_path / "r" / "middle" / "t.parquet").unlink()  # an output gone: that stage and everything after it
    third = Counting()
    run_job(job, third, "r", log=lambda m: None)
    assert third.ran == ["middle", "last"]


def test_a_stage_that_fails_otherwise_is_recorded_failed_not_left_running(job, tmp_path):
    """Inference that failed, a store or backend that gave out (exit 1): the manifest says
    `failed` and `status` shows it so (the stage stayed `running`, so `status` called the run
    interrupted); the lock is released and a resume redoes the stage."""
    from raylc.run.errors import InferenceFailed
    from raylc.run.folder import RunFolder
    from raylc.run.status import run_status

    with pytest.raises(InferenceFailed):
        run_job(job, Counting(fail="middle", error=InferenceFailed), "r", log=lambda m: None)
    assert _manifest(tmp_path)["stages"]["middle"]["status"] == "failed"
    assert run_status(RunFolder(str(tmp_path), "r"))["state"] == "failed"
    assert not (tmp_path / "r" / LOCK).exists()
    resumed = Counting()
    run_job(job, resumed, "r", log=lambda m: None)
    assert resumed.ran == ["middle", "last"]


def test_a_stage_that_cannot_go_on_is_one_line_and_resumes_there(job, tmp_path):
    with pytest.raises(RunError, match="^middle: the data cannot go on$"):
        run_job(job, Counting(fail="middle"), "r", log=lambda m: None)
    assert _manifest(tmp_path)["stages"]["middle"]["status"] == "failed"
    assert not (tmp_path / "r" / LOCK).exists()
    resumed = Counting()
    run_job(job, resumed, "r", log=lambda m: None)
    assert resumed.ran == ["middle", "last"]


def test_a_bad_build_writes_nothing(job, tmp_path):
    class BadBuild(Counting):
        def build(self, job):
            raise ValueError("data.jsonl: row 3: no context")

    with pytest.raises(RunError, match="^data.jsonl: row 3: no context$"):
        run_job(job, BadBuild(), "r", log=lambda m: None)
    assert not (tmp_path / "r").exists()


def test_another_job_spec_or_a_live_lock_is_refused(job, tmp_path):
    run_job(job, Counting(), "r", log=lambda m: None)
    other = parse_job({"name": "toy", "seed": 1, "store": {"path": str(tmp_path)}})
    with pytest.raises(RunError, match="run exists with a different job spec"):
        run_job(other, Counting(), "r", log=lambda m: None)
    held = {"host": os.uname().nodename, "pid": os.getppid(), "started_at": "then", "heartbeat": 0}
    (tmp_path / "r" / LOCK).write_text(json.dumps(held))
    with pytest.raises(RunError, match=f"run is in use by pid {os.getppid()}"):
        run_job(job, Counting(), "r", log=lambda m: None)


def test_stage_table_lists_every_stage(job, tmp_path):
    run = open_run(job, "r")
    run.manifest.stages = {"build": StageRecord(status="done", rows={"problems": 1200}, seconds=1.25),
                           "infer": StageRecord(status="interrupted", seconds=3.0)}
    table = stage_table(run.manifest)
    assert "build" in table and "problems=1,200" in table and "1.2" in table and "interrupted" in table


def test_the_manifest_records_the_command_lines_overrides(job, tmp_path):
    run_job(job, Counting(), "r", log=lambda m: None, overrides={"seed": 3, "suite.lengths": [1024, 2048]})
    assert _manifest(tmp_path)["overrides"] == {"seed": 3, "suite.lengths": [1024, 2048]}
    run_job(job, Counting(), "r", log=lambda m: None)  # a resume without them records none
    assert _manifest(tmp_path)["overrides"] == {}


def test_a_runs_mapper_raises_a_tasks_own_error():
    """``Run.mapper()`` maps from the driver and raises what the task raised, not Ray's wrapper."""
    from raylc.run.tasks import raising_own_errors as _raising_own_errors

    class RayTaskError(Exception):
        def __init__(self, cause: Exception):
            super().__init__(f"wrapped: {cause}")
            self.cause = cause

    def map_tasks(fn, items, *args):
        raise RayTaskError(ValueError("subset a: bad counts"))

    with pytest.raises(ValueError, match="^subset a: bad counts$"):
        _raising_own_errors(map_tasks)(len, [[1]])
    assert _raising_own_errors(lambda fn, items, *a: [fn(i, *a) for i in items])(len, [[1], [1, 2]]) == [1, 2]


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30), max_size=6))
def test_a_run_error_is_one_line_whatever_its_cause_brings(parts):
    """RunError (and InferenceFailed) join the lines of a message by " / ": an engine log line or a
    Ray traceback inside a cause cannot split the one line the CLI prints."""
    from raylc.run.errors import InferenceFailed

    message = "\n".join(parts)
    for kind in (RunError, InferenceFailed):
        got = str(kind(message))
        assert len(got.splitlines()) <= 1
        assert got == " / ".join(ln.strip() for ln in message.splitlines() if ln.strip())
    assert str(RunError("x failed: a\nb (kept)")) == "x failed: a / b (kept)"


def test_hypothesis_examples_have_no_deadline():
    """The session's hypothesis profile (tests/conftest.py) drops the per-example deadline: under
    load on 2 cores the test above once took 288 ms for one example, over the default 200 ms."""
    from hypothesis import settings

    assert settings.default.deadline is None
