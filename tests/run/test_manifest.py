"""Run folders written by 14bd8b5, before the manifest had a model and a version, still open:
``raylc status``, ``raylc runs``, ``raylc report`` and ``raylc compare`` read them.

``tests/data/runs-14bd8b5/`` holds what those commands read of three runs made at 14bd8b5 with
``--store runs``: the quickstart and the helmet-recall job finished (their manifests, report
tables, the fits or scores), and a quickstart interrupted (SIGINT) during inference (its
manifest, with the infer stage's progress record)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import raylc

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "runs-14bd8b5"
RUNS = ("quickstart-14bd8b5", "helmet-recall-14bd8b5", "quickstart-interrupted-14bd8b5")


@pytest.fixture
def store(tmp_path) -> Path:
    """A copy of the fixture store (the commands must not write into tests/data)."""
    shutil.copytree(FIXTURES, tmp_path / "runs")
    return tmp_path / "runs"


def test_the_fixtures_are_manifests_as_14bd8b5_wrote_them():
    """No version key, the stage records as plain dicts: what the readers must still open."""
    for run_id in RUNS:
        manifest = json.loads((FIXTURES / run_id / "manifest.json").read_text())
        assert "version" not in manifest and manifest["run_id"] == run_id
        assert manifest["job"]["store"]["path"] == "runs"
    infer = json.loads((FIXTURES / RUNS[2] / "manifest.json").read_text())["stages"]["infer"]
    assert infer["status"] == "interrupted" and infer["progress"]["done"] == 7048


@pytest.mark.parametrize("run_id", RUNS[:2])
def test_status_of_a_finished_run_written_by_14bd8b5(store, run_id):
    out = raylc("status", store / run_id)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"run {run_id} (") and ": done; job " in first and "model simulated" in first
    assert "Traceback" not in out.stderr and "re-run" not in out.stdout


def test_status_of_an_interrupted_run_written_by_14bd8b5(store):
    out = raylc("status", store / RUNS[2])
    assert out.returncode == 0, out.stderr
    assert ": interrupted; job quickstart" in out.stdout.splitlines()[0]
    assert "stored 7,048 of 220,428 requests (3.2%)" in out.stdout
    assert f"--run-id {RUNS[2]}" in out.stdout


def test_runs_lists_the_runs_written_by_14bd8b5(store):
    out = raylc("runs", store, env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    states = {line.split("│")[1].strip(): line.split("│")[4].strip()
              for line in out.stdout.splitlines() if line.startswith("│")}
    assert states == {RUNS[0]: "done", RUNS[1]: "done", RUNS[2]: "interrupted"}


@pytest.mark.parametrize("run_id, expected", [
    (RUNS[0], ["raylc report: quickstart-14bd8b5", "planted-a", "planted-b", "Planted-category recovery",
               "What the run did", "220,428"]),
    (RUNS[1], ["raylc report: helmet-recall-14bd8b5", "LongScore", "json_kv", "mv_needle", "What the run did"]),
])
def test_report_of_a_run_written_by_14bd8b5(store, run_id, expected):
    out = raylc("report", store / run_id, env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert all(text in out.stdout for text in expected), [t for t in expected if t not in out.stdout]
    assert "Traceback" not in out.stderr


def test_compare_reads_runs_written_by_14bd8b5(store, tmp_path):
    out = raylc("compare", store / RUNS[0], store / RUNS[1], "--out", tmp_path / "cmp")
    assert out.returncode == 0, out.stderr
    assert {p.name for p in (tmp_path / "cmp").iterdir()} >= {"runs.parquet", "summary.parquet",
                                                             "categories.parquet", "index.html"}


def test_an_unfinished_run_written_by_14bd8b5_has_no_report(store):
    out = raylc("report", store / RUNS[2])
    assert out.returncode == 2 and out.stderr.strip() == (
        f"error: {store / RUNS[2]}: the run has no report yet (run it to completion with `raylc run`)")


def test_a_manifest_this_raylc_cannot_read_is_one_line(store):
    """A later format, or a file that is not a manifest: one line naming the file, exit 2, for
    ``raylc status`` and ``raylc report``; ``raylc runs`` lists the run as ``unreadable manifest``."""
    path = store / RUNS[0] / "manifest.json"
    newer = {**json.loads(path.read_text()), "version": 99}
    path.write_text(json.dumps(newer))
    for command in ("status", "report"):
        out = raylc(command, store / RUNS[0])
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.strip() == (f"error: {path}: not a raylc manifest (manifest version 99 is newer than this "
                                      "raylc reads (up to 3): update raylc)"), out.stderr
    path.write_text(json.dumps({"stages": "none"}))
    out = raylc("status", store / RUNS[0])
    assert out.returncode == 2 and out.stderr.startswith(f"error: {path}: not a raylc manifest (run_id: ")
    listed = raylc("runs", store, env={"COLUMNS": "200"})
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if line.count("│") > 2}
    assert listed.returncode == 0 and "unreadable manifest" in rows[RUNS[0]], listed.stdout
    assert "unreadable" not in rows[RUNS[1]], listed.stdout


def test_a_manifest_written_now_has_the_current_version_and_the_old_keys(tmp_path):
    """What 14bd8b5 wrote, opened and written again: the same keys, plus ``version`` 3."""
    from raylc.run.folder import RunFolder

    shutil.copytree(FIXTURES / RUNS[2], tmp_path / RUNS[2])
    folder = RunFolder(str(tmp_path), RUNS[2])
    before = json.loads((tmp_path / RUNS[2] / "manifest.json").read_text())
    manifest = folder.manifest()
    assert manifest.version == 3 and manifest.stages["infer"].progress.to_run == 220428
    folder.save(manifest)
    after = json.loads((tmp_path / RUNS[2] / "manifest.json").read_text())
    assert after.pop("version") == 3 and after.pop("updated_at") != before.pop("updated_at")
    assert after == before


def test_a_version_2_manifest_opens_as_the_current_version(tmp_path):
    """Version 3 only added the ``stopped`` status and its budget record: a version 2 manifest opens as it is."""
    from raylc.run.folder import RunFolder

    shutil.copytree(FIXTURES / RUNS[2], tmp_path / RUNS[2])
    path = tmp_path / RUNS[2] / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 2}))
    manifest = RunFolder(str(tmp_path), RUNS[2]).manifest()
    assert manifest.version == 3 and manifest.stopped() is None and manifest.stages["infer"].budget is None
