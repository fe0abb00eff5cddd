"""SIGINT and SIGTERM during `raylc run` (issue 14, item 4): one line on stderr, exit code
130 / 143, the stage marked ``interrupted`` in the manifest, the lock released, and a re-run
with the same --run-id resumes, reusing every stored request."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

# about 9,000 requests: a few seconds of inference with the simulated probe, shards every 0.5 s
JOB = """name: interrupts
suite: {kind: planted, tasks: [planted-a, planted-b], problems_per_task: 2, min_units: 200, max_units: 400}
inference: {shard_rows: 500, shard_seconds: 0.5}
ray: {actors: 1, actor_num_cpus: 0.5, batch_size: 256}
fit: {uncertainty: none}
"""
LINE = re.compile(r"^interrupted( \(SIGTERM\))? during infer; (\d+) requests stored; re-run with --run-id (\S+) to "
                  r"resume$")
RAY_INFO = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+INFO ")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def _manifest(run: Path) -> dict:
    try:
        return json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def _interrupt_during_infer(job: Path, store: Path, run_id: str, sig: int) -> subprocess.CompletedProcess:
    """Start `raylc run`; once infer is running and has stored a shard (so Ray is up: its core
    worker installs a SIGTERM handler of its own), send ``sig``."""
    run = store / run_id
    proc = subprocess.Popen([sys.executable, "-m", "raylc", "run", str(job), "--store", str(store), "--run-id", run_id],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 600  # Ray's start and the first shard: seconds, minutes on a loaded machine
    while time.monotonic() < deadline and proc.poll() is None:
        running = _manifest(run).get("stages", {}).get("infer", {}).get("status") == "running"
        if running and any((run / "infer").rglob("part-*.parquet")):
            break
        time.sleep(0.05)
    else:
        if proc.poll() is None:
            proc.kill()
            pytest.fail("the run stored no inference shard within 600 s")
    assert proc.poll() is None, "the run ended before it could be interrupted"
    family = _descendants(proc.pid)
    assert family, "no Ray process was started"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    deadline = time.monotonic() + 10  # #31: no Ray process of the run outlives the command by more than 10 s
    while time.monotonic() < deadline and _alive(family):
        time.sleep(0.2)
    assert not _alive(family), f"still running 10 s after the command: {sorted(_alive(family).values())}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (from /proc): pid -> command line."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = {}, [pid]
    while frontier:
        here = frontier.pop()
        for child, parent in parents.items():
            if parent == here and child not in found:
                found[child] = _cmdline(child)
                frontier.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return ""


def _alive(family: dict[int, str]) -> dict[int, str]:
    """The processes of ``family`` still running (the same command line: a pid is not reused)."""
    out = {}
    for pid, cmd in family.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and _cmdline(pid) == cmd:
            out[pid] = cmd
    return out


def _check_interrupted(proc: subprocess.CompletedProcess, store: Path, run_id: str, code: int, sigterm: bool) -> int:
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # Ray Data's own INFO lines (progress, "execution finished") may come after raylc's last line
    lines = [line for line in proc.stderr.strip().splitlines() if not RAY_INFO.match(line)]
    match = LINE.match(lines[-1])
    assert match, lines[-1]
    assert [line for line in lines if line.startswith("interrupted")] == [lines[-1]]  # one line
    assert bool(match.group(1)) == sigterm and match.group(3) == run_id
    run = store / run_id
    stages = _manifest(run)["stages"]
    assert stages["infer"]["status"] == "interrupted" and stages["sample"]["status"] == "done"
    assert not (run / "_lock.json").exists()  # released
    assert not (run / "requests").exists()  # the request table is removed
    stored = int(match.group(2))
    ok = pl.read_parquet(run / "infer" / "**" / "*.parquet", hive_partitioning=True).filter(pl.col("error").is_null())
    assert ok["request_id"].n_unique() == ok.height == stored > 0  # none stored twice
    return stored


@pytest.mark.ray
def test_sigint_during_infer_then_resume(tmp_path, ray_address):
    """Interrupted in a Ray of its own; resumed as a driver joining the session's Ray (as a job
    on a cluster does), which saves starting a second Ray."""
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    store, run_id = tmp_path / "store", "int"
    proc = _interrupt_during_infer(job, store, run_id, signal.SIGINT)
    stored = _check_interrupted(proc, store, run_id, 130, sigterm=False)

    joined = {**_env(), "RAY_ADDRESS": ray_address}
    proc = subprocess.run([sys.executable, "-m", "raylc", "run", str(job), "--store", str(store), "--run-id", run_id],
                          capture_output=True, text=True, timeout=300, env=joined)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[infer] {stored} completions kept from earlier attempts" in proc.stderr
    manifest = _manifest(store / run_id)
    assert {s["status"] for s in manifest["stages"].values()} == {"done"}
    infer = manifest["stages"]["infer"]["rows"]
    assert infer["reused"] == stored and infer["errors"] == 0
    assert infer["requests"] == manifest["stages"]["sample"]["rows"]["spans"]
    shards = pl.read_parquet(store / run_id / "infer" / "**" / "*.parquet", hive_partitioning=True)
    assert shards["request_id"].n_unique() == shards.height  # no finished request was issued again


@pytest.mark.ray
def test_sigterm_during_infer(tmp_path):
    """What Ray Jobs' `ray job stop` sends: the same line (naming SIGTERM), exit code 143."""
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    store = tmp_path / "store"
    proc = _interrupt_during_infer(job, store, "term", signal.SIGTERM)
    _check_interrupted(proc, store, "term", 143, sigterm=True)
    assert "SIGTERM received" not in proc.stderr  # not Ray's failure signal handler (a stack, then abort)
