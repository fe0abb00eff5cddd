"""`raylc status` and `raylc runs` from manifests and locks alone (no Ray); the infer stage's
progress record written at each shard. The killed-run case with real shards is in
tests/run/test_checkpoint.py (SIGKILL during inference)."""

import json
import os
import socket
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from raylc.cli import app
from raylc.io.store import Store
from raylc.run.folder import LOCK, MANIFEST, RunFolder, lock_alive
from raylc.run.manifest import Manifest
from raylc.run.progress import duration
from raylc.run.runner import Run
from raylc.run.status import _when, list_runs, run_status
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
STAGES = ["build", "sample", "infer", "score", "fit", "report"]  # the quickstart's (a DOLCE job)


def _manifest(stages: dict, **extra) -> dict:
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    return {"run_id": "r", "job": job.resolved(), "plan": STAGES, "stages": stages,
            "created_at": "2026-11-24T10:00:00+00:00",
            "updated_at": "2026-11-24T10:05:00+00:00", **extra}


def _write(tmp_path, run_id: str, manifest: dict, lock: dict | None = None) -> RunFolder:
    """A run folder holding ``manifest`` (as a run writes it) and ``lock``."""
    store = Store(str(tmp_path))
    store.write_json({**manifest, "run_id": run_id}, run_id, MANIFEST)
    if lock is not None:
        store.write_json(lock, run_id, LOCK)
    return RunFolder(str(tmp_path), run_id)


def _dead_lock() -> dict:
    return {"host": socket.gethostname(), "pid": 2**22 + 12345, "started_at": "x", "heartbeat": time.time()}


def _live_lock() -> dict:  # another live process on this host: the test's parent
    return {"host": socket.gethostname(), "pid": os.getppid(), "started_at": "x", "heartbeat": time.time()}


PROGRESS = {"reused": 100, "to_run": 900, "done": 300, "errors": 2, "prompt_tokens": 600_000,
            "generated_tokens": 3_000, "started_at": 1000.0, "updated_at": 1060.0}


def test_a_killed_run_is_interrupted_with_stored_and_planned(tmp_path):
    stages = {"build": {"status": "done", "rows": {"problems": 5}, "seconds": 0.1},
              "sample": {"status": "done", "rows": {"spans": 1000}, "seconds": 0.1},
              "infer": {"status": "running", "progress": PROGRESS}}
    store = _write(tmp_path, "r", _manifest(stages), _dead_lock())
    st = run_status(store, now=1090.0)
    assert st["state"] == "interrupted"
    assert st["stages"] == {"build": "done", "sample": "done", "infer": "interrupted", "score": "pending",
                            "fit": "pending", "report": "pending"}
    p = st["infer"]
    assert (p["stored"], p["planned"], p["errors"]) == (400, 1000, 2)
    assert p["requests_per_s"] == pytest.approx(5.0) and p["prompt_tokens_per_s"] == pytest.approx(10_000.0)
    assert p["generated_tokens_per_s"] == pytest.approx(50.0) and p["last_update_s"] == pytest.approx(30.0)
    assert "eta_s" not in p  # not running: no ETA


def test_a_running_run_has_an_eta(tmp_path):
    stages = {"build": {"status": "done"}, "sample": {"status": "done"},
              "infer": {"status": "running", "progress": PROGRESS}}
    store = _write(tmp_path, "r", _manifest(stages), _live_lock())
    st = run_status(store, now=1060.0)
    assert st["state"] == "running" and st["stages"]["infer"] == "running"
    assert st["infer"]["eta_s"] == pytest.approx(600 / 5.0)  # 600 left at 5 requests/s since the stage began


def test_the_eta_leaves_out_the_start_up_and_nothing_stored_says_so(tmp_path):
    """A stage whose engines took 25 s to start: shards of 50 requests every second from 1025 s,
    250 by 1029 s and 1,000 by 1044 s. At 1060 s the window is the last 30 s (from the shard at
    1030 s, 300 stored): 700 in 30 s, not the 16.7/s since the stage began."""
    recent = [[1025.0 + i, 50 * (i + 1)] for i in range(20)]
    progress = {**PROGRESS, "reused": 0, "to_run": 2000, "done": 1000, "started_at": 1000.0, "updated_at": 1044.0,
                "recent": recent}
    stages = {"build": {"status": "done"}, "sample": {"status": "done"},
              "infer": {"status": "running", "progress": progress}}
    st = run_status(_write(tmp_path, "r", _manifest(stages), _live_lock()), now=1060.0)
    assert st["infer"]["eta_s"] == pytest.approx(1000 / (700 / 30.0))
    waiting = {**progress, "done": 0, "prompt_tokens": 0, "generated_tokens": 0, "updated_at": 1000.0, "recent": []}
    stages["infer"]["progress"] = waiting
    _write(tmp_path, "w", _manifest(stages), _live_lock())
    st = run_status(RunFolder(str(tmp_path), "w"), now=1009.0)
    assert ("last_update_s" not in st["infer"] and st["infer"]["waiting_s"] == pytest.approx(9.0)
            and "eta_s" not in st["infer"])
    out = RUNNER.invoke(app, ["status", str(tmp_path / "w")])
    assert "no shard stored yet" in out.output and "last shard" not in out.output


def test_a_manifest_without_a_plan_lists_the_stages_it_names(tmp_path):
    manifest = {k: v for k, v in _manifest({"build": {"status": "done"}, "sample": {"status": "running"}}).items()
                if k != "plan"}
    st = run_status(_write(tmp_path, "r", manifest))
    assert st["stages"] == {"build": "done", "sample": "interrupted"} and st["infer"] is None


def test_a_held_lock_is_rewritten_while_its_stage_writes_nothing(tmp_path, monkeypatch):
    """A stage that writes nothing for longer than the lock's staleness (a long batch, the wait
    for a GPU node) still shows a live owner on another host: the lock is rewritten on a timer
    (it was rewritten only with the manifest), and no more once released."""
    import json

    from raylc.run import folder as folder_mod

    monkeypatch.setattr(folder_mod, "LOCK_BEAT_S", 0.05)
    folder = RunFolder(str(tmp_path), "r")
    folder.acquire()
    first = json.loads((tmp_path / "r" / LOCK).read_text())["heartbeat"]
    deadline = time.time() + 20
    while json.loads((tmp_path / "r" / LOCK).read_text())["heartbeat"] == first and time.time() < deadline:
        time.sleep(0.05)
    assert json.loads((tmp_path / "r" / LOCK).read_text())["heartbeat"] > first
    folder.release()
    assert not (tmp_path / "r" / LOCK).exists()
    time.sleep(0.3)
    assert not (tmp_path / "r" / LOCK).exists()  # the timer stopped with the release
    folder.acquire()
    folder.acquire()  # the same run taken again by this process (its own pid is no live owner)
    folder.release()
    time.sleep(0.3)
    assert not (tmp_path / "r" / LOCK).exists()  # the first timer did not outlive the release


def test_no_lock_means_no_process(tmp_path):
    store = _write(tmp_path, "r", _manifest({"build": {"status": "running"}}))
    st = run_status(store)
    assert st["state"] == "interrupted" and st["stages"]["build"] == "interrupted" and st["infer"] == {
        "stored": None, "planned": None}


@pytest.mark.parametrize("status, word", [("interrupted", "interrupted"), ("failed", "failed")])
def test_a_recorded_end_keeps_its_word_and_progress(tmp_path, status, word):
    stages = {"build": {"status": "done"}, "sample": {"status": "done"},
              "infer": {"status": status, "progress": PROGRESS, "seconds": 60.0}}
    st = run_status(_write(tmp_path, "r", _manifest(stages), _live_lock()), now=2000.0)
    assert st["state"] == word and st["infer"]["stored"] == 400


def test_a_finished_run_is_done(tmp_path):
    stages = {s: {"status": "done", "rows": {"requests": 7} if s == "infer" else {}} for s in STAGES}
    st = run_status(_write(tmp_path, "r", _manifest(stages, finished_at="x")))
    assert st["state"] == "done" and st["infer"] == {"stored": 7, "planned": 7}


def test_runs_lists_each_run_newest_first_and_skips_other_folders(tmp_path):
    done = {s: {"status": "done"} for s in STAGES}
    _write(tmp_path, "old", _manifest(done, updated_at="2026-11-20T10:00:00+00:00"))
    _write(tmp_path, "new", _manifest({"build": {"status": "running"}},
                                      updated_at="2026-11-24T10:00:00+00:00"), _live_lock())
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / ".hidden").mkdir()
    table = list_runs(str(tmp_path))
    assert table.select("run_id", "job", "model", "state").rows() == [
        ("new", "quickstart", "simulated", "running"), ("old", "quickstart", "simulated", "done")]
    out = RUNNER.invoke(app, ["runs", str(tmp_path)])
    assert out.exit_code == 0 and "not-a-run" not in out.output and "quickstart" in out.output
    empty = RUNNER.invoke(app, ["runs", str(tmp_path / "not-a-run")])
    assert empty.exit_code == 0 and "no runs" in empty.output
    missing = RUNNER.invoke(app, ["runs", str(tmp_path / "typo")])
    assert (missing.exit_code == 2
            and missing.output == f"error: {tmp_path}/typo: no such store (the folder does not exist)\n")
    as_url = RUNNER.invoke(app, ["runs", f"file://{tmp_path}/typo"])  # a file:// root is looked up too
    assert (as_url.exit_code == 2
            and as_url.output == f"error: file://{tmp_path}/typo: no such store (the folder does not exist)\n")
    listed = RUNNER.invoke(app, ["runs", f"file://{tmp_path}"])
    assert listed.exit_code == 0 and "quickstart" in listed.output


def test_runs_lists_a_run_whose_manifest_is_unreadable_under_its_folder_name(tmp_path):
    """A truncated or foreign manifest is a run this raylc cannot read: listed so, not hidden; each
    run is named by its folder (what `raylc status` and `--run-id` take), not by its manifest."""
    _write(tmp_path, "good", _manifest({s: {"status": "done"} for s in STAGES}, run_id="elsewhere"))
    (tmp_path / "good" / MANIFEST).write_text((tmp_path / "good" / MANIFEST).read_text().replace(
        '"run_id": "good"', '"run_id": "../elsewhere"'))
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / MANIFEST).write_text('{"run_id": "cut", "job": {')
    table = list_runs(str(tmp_path))
    assert sorted(table.select("run_id", "state").rows()) == [("cut", "unreadable manifest"), ("good", "done")]
    file = tmp_path / "cut" / MANIFEST
    out = RUNNER.invoke(app, ["runs", str(file)])
    assert out.exit_code == 2 and out.output == f"error: {file}: not a store (a file, not a folder)\n"
    out = RUNNER.invoke(app, ["runs", f"file://{file}"])
    assert out.exit_code == 2 and out.output == f"error: file://{file}: not a store (a file, not a folder)\n"


def test_status_of_a_moved_run_names_its_folder_in_the_resume_line(tmp_path):
    """A run folder copied or renamed keeps its manifest's run id: `status` names the folder, which
    is what --run-id resumes (it named the manifest's id, which would start a new run)."""
    _write(tmp_path, "renamed", _manifest({"build": {"status": "failed"}}))
    (tmp_path / "renamed" / MANIFEST).write_text((tmp_path / "renamed" / MANIFEST).read_text().replace(
        '"run_id": "renamed"', '"run_id": "original"'))
    out = RUNNER.invoke(app, ["status", str(tmp_path / "renamed")])
    assert out.exit_code == 0 and out.output.startswith("run renamed (") and "--run-id renamed " in out.output
    assert "original" not in out.output


def test_runs_defaults_to_the_jobs_default_store_and_shows_creation_and_update(tmp_path, monkeypatch):
    done = {s: {"status": "done"} for s in STAGES}
    _write(tmp_path / "runs", "r1", _manifest(done, created_at="2026-11-20T10:00:00.123456+00:00",
                                              updated_at="2026-11-20T10:05:00+00:00"))
    monkeypatch.chdir(tmp_path)
    out = RUNNER.invoke(app, ["runs"])
    assert out.exit_code == 0, out.output
    assert "r1" in out.output and "2026-11-20 10:00:00 UTC" in out.output and ".123456" not in out.output
    table = list_runs("runs", now=_when("2026-11-20T11:00:00+00:00"))
    assert table.select("age_s", "updated_s").rows() == [(pytest.approx(3599.877), 3300.0)]
    monkeypatch.chdir(tmp_path / "runs")
    assert RUNNER.invoke(app, ["runs"]).exit_code == 2  # no ./runs here


@pytest.mark.parametrize("times", [dict(created_at="yesterday", updated_at="not a time"),
                                   dict(created_at=None, updated_at=None)])
def test_a_manifest_time_that_is_not_a_time_is_unknown_never_zero(tmp_path, times):
    """A hand-edited manifest whose times are missing or not times: its ages are unknown (None in
    the tables, "unknown" on screen); `status` said "updated 0 s ago"."""
    done = {s: {"status": "done"} for s in STAGES}
    _write(tmp_path, "r1", _manifest(done, **times))
    _write(tmp_path, "r2", _manifest(done))
    assert run_status(RunFolder(str(tmp_path), "r1"))["age_s"] is None
    table = list_runs(str(tmp_path), now=_when("2026-11-24T11:00:00+00:00"))
    assert table.rows() == [
        ("r2", "quickstart", "simulated", "done", "2026-11-24 10:00:00 UTC", 3600.0, 3300.0),
        ("r1", "quickstart", "simulated", "done", None, None, None)]
    out = RUNNER.invoke(app, ["status", str(tmp_path / "r1")])
    first = out.output.splitlines()[0]
    assert out.exit_code == 0 and first.startswith("run r1 (") and first.endswith(", last update unknown (its "
                                                                               "manifest holds no readable time)")
    assert " 0 s ago" not in out.output
    out = RUNNER.invoke(app, ["runs", str(tmp_path)])
    line = next(x for x in out.output.splitlines() if "r1" in x)
    assert out.exit_code == 0 and line.count("unknown") == 3 and "ago" not in line, out.output


def test_status_cli_lines(tmp_path):
    stages = {"build": {"status": "done"}, "sample": {"status": "done"},
              "infer": {"status": "running", "progress": PROGRESS}}
    _write(tmp_path, "r", _manifest(stages), _dead_lock())
    out = RUNNER.invoke(app, ["status", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    first = out.output.splitlines()[0]
    assert first.startswith(f"run r ({tmp_path}/r): interrupted; job quickstart, model simulated")
    assert ("stored 400 of 1,000 requests (40.0%), errors 2; 5.0 req/s, 10,000 prompt tok/s, "
            "50 generated tok/s" in out.output)
    assert "--run-id r" in out.output.splitlines()[-1]
    missing = RUNNER.invoke(app, ["status", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and missing.output.startswith(f"error: {tmp_path}/nope: no raylc run here")


def test_progress_is_recorded_at_each_shard(tmp_path):
    """InferProgress (opened, planned, stored) through a ShardWriter's flushes: the manifest on
    disk counts every stored completion (errors apart, tokens of successes only)."""
    from raylc.run.progress import InferProgress

    job = load_job(ROOT / "jobs" / "quickstart.yaml", {"store.path": str(tmp_path)})
    manifest = Manifest(run_id="r", job=job.resolved(), stages={"infer": {"status": "running"}})
    run = Run(RunFolder(str(tmp_path), "r"), job, manifest)
    progress = InferProgress(run.manifest, reused=10, save=run.save)
    progress.planned(5)
    writer = run.folder.shard_writer(max_rows=2, max_seconds=60.0, on_flush=progress.stored)
    batch = pl.DataFrame({"task": ["t"] * 3, "request_id": ["a", "b", "c"], "error": [None, "boom", None],
                          "prompt_tokens": [10, 20, 30], "generated_tokens": [1, 2, 3]})
    writer.add(batch)  # 3 rows >= 2: one flush
    on_disk = json.loads((tmp_path / "r" / MANIFEST).read_text())["stages"]["infer"]["progress"]
    assert {k: on_disk[k] for k in ("reused", "to_run", "done", "errors", "prompt_tokens", "generated_tokens")} == {
        "reused": 10, "to_run": 5, "done": 3, "errors": 1, "prompt_tokens": 40, "generated_tokens": 4}
    assert (tmp_path / "r" / LOCK).exists()  # the heartbeat is refreshed with it


@pytest.mark.parametrize("seconds, text", [(5, "5 s"), (119, "119 s"), (600, "10 min"), (7300, "2.0 h"),
                                           (3 * 86400, "3.0 d"), (None, "")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_the_infer_stage_logs_its_own_count_of_stored_requests(monkeypatch):
    """Issue 31: raylc's progress line counts stored requests against those planned (Ray Data's
    bar totals are estimates); at most one line per ``every_s``, and one when all are stored."""
    from raylc.run import progress as progress_module
    from raylc.run.progress import InferProgress

    clock = iter([0.0, 5.0, 10.0, 15.0, 16.0])
    monkeypatch.setattr(progress_module.time, "time", lambda: next(clock))
    lines, manifest = [], Manifest(run_id="r", job={})
    prog = InferProgress(manifest, reused=7, save=lambda: None, log=lines.append, every_s=10.0)
    prog.planned(300)
    batch = pl.DataFrame({"error": [None] * 99 + ["boom"]})
    prog.stored(batch)  # t = 5: first shard, under every_s since the start: no line
    prog.stored(batch)  # t = 10: a line; 100 more in 5 s since the first shard: 100 left at 20/s
    prog.stored(batch.head(50))  # t = 15: under every_s since the last line: no line
    prog.stored(batch.head(50))  # t = 16: all 300 stored: a line
    assert lines == ["[infer] 200/300 requests stored (67%), about 5 s left, 2 errors",
                     "[infer] 300/300 requests stored (100%), 2 errors"]
    assert manifest.stages["infer"].progress.done == 300


@pytest.mark.parametrize("lock", [[1], "x", {"host": socket.gethostname(), "pid": None},
                                  {"host": socket.gethostname(), "pid": [1]}, {"host": "elsewhere", "heartbeat": "x"},
                                  {"host": "elsewhere", "heartbeat": None}, {"host": socket.gethostname()},
                                  {"host": socket.gethostname(), "pid": "x"}, {"host": socket.gethostname(), "pid": 0},
                                  {"host": socket.gethostname(), "pid": -1},
                                  {"host": socket.gethostname(), "pid": 10**30}, b"\xff\xfe", b"{not json"])
def test_a_lock_raylc_did_not_write_is_not_a_live_run(tmp_path, lock):
    """A damaged lock (not a record, a pid or heartbeat of the wrong type, no pid, not UTF-8, not
    JSON) is no live owner: `status` and `runs` show the run as interrupted and a resume may take
    it. They were tracebacks; a lock on this host with no pid, a pid of 0, -1, text or one past
    the OS's range counted as alive for ever (``os.kill(0 or -1, 0)`` asks about a process
    group), and a lock that was not UTF-8 or JSON stopped `status`."""
    folder = _write(tmp_path, "r", _manifest({"build": {"status": "running"}}))
    if isinstance(lock, bytes):
        (tmp_path / "r" / LOCK).write_bytes(lock)
    else:
        Store(str(tmp_path)).write_json(lock, "r", LOCK)
    assert not folder.lock() or not lock_alive(folder.lock())
    assert run_status(folder)["state"] == "interrupted"
    out = RUNNER.invoke(app, ["runs", str(tmp_path)])
    assert out.exit_code == 0 and "interrupted" in out.output, out.output


def test_a_manifest_with_odd_names_and_times_still_lists(tmp_path):
    """A job name that is a list, a probe that is not a mapping, a creation time no calendar
    holds: `runs` lists the run (it raised for the whole store) and `status` shows it."""
    job = {**_manifest({})["job"], "name": ["a", "b"], "probe": "x"}
    _write(tmp_path, "odd", _manifest({"build": {"status": "done"}}, job=job,
                                      created_at="0001-01-01T00:00:00+14:00"))
    table = list_runs(str(tmp_path))
    assert table.select("run_id", "job", "model", "created").rows() == [("odd", "['a', 'b']", None, None)]
    assert RUNNER.invoke(app, ["status", str(tmp_path / "odd")]).exit_code == 0
    (tmp_path / "odd" / MANIFEST).write_bytes(b"\xff\xfe\x00")  # not UTF-8: one line, exit 2
    out = RUNNER.invoke(app, ["status", str(tmp_path / "odd")])
    assert out.exit_code == 2 and out.output.strip().endswith("manifest.json: not UTF-8 text (byte 0)"), out.output


def _take_lock(root: str, barrier, results) -> None:
    """In a child process: wait for the others, try the run's lock, report, and stay alive while
    the others look at it."""
    from raylc.run.errors import RunError

    barrier.wait()
    try:
        RunFolder(root, "r").acquire()
        results.put("took")
    except RunError:
        results.put("refused")
    time.sleep(1.5)


@pytest.mark.parametrize("stale", [False, True], ids=["no-lock", "stale-lock"])
def test_of_processes_starting_one_run_together_exactly_one_takes_its_lock(tmp_path, stale):
    """Started behind one barrier, two processes never both hold the run (the lock was read,
    then written: both took it in 9 of 20 rounds), with no lock there and with a dead owner's."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    for round_ in range(2):
        root = str(tmp_path / str(round_))
        if stale:  # a lock of a process on this host that is gone
            Store(root).write_json({"host": socket.gethostname(), "pid": 2**22 + 1, "heartbeat": 0}, "r", LOCK)
        barrier, results = ctx.Barrier(3), ctx.Queue()
        children = [ctx.Process(target=_take_lock, args=(root, barrier, results)) for _ in range(3)]
        for child in children:
            child.start()
        got = sorted(results.get(timeout=120) for _ in children)
        for child in children:
            child.join(timeout=60)
        assert got == ["refused", "refused", "took"], (round_, got)
