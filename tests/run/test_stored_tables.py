"""A run's stored tables are checked as they are read (``RunFolder.read_declared`` and
``check_declared``, the checkpoint shards, ``raylc fit --compare``): a table edited, emptied or
deleted after its stage wrote it is one line naming the file (exit 2), never a traceback or a
result silently shorter than the run's."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from raylc.cli import app
from raylc.dolce.tables import CATEGORIES_TABLE, FIT_PROBLEMS, FIT_TASKS, PROBE, SPANS
from raylc.io.errors import StoreError
from raylc.io.schemas import TableSchema
from raylc.run import checkpoint
from raylc.run.folder import RunFolder
from raylc.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()


def _rows(schema: TableSchema, n: int) -> pl.DataFrame:
    """``n`` rows of nulls with the declared dtypes."""
    return pl.DataFrame([pl.Series(name, [None] * n, dtype=dtype) for name, dtype in schema.dtypes.items()])


def _run(tmp_path: Path, stages: dict) -> RunFolder:
    """A finished quickstart run whose manifest records ``stages`` (name: rows)."""
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    records = {name: {"status": "done", "rows": rows} for name, rows in stages.items()}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text(json.dumps(
        {"run_id": "r", "job": job.resolved(), "stages": records, "finished_at": "t"}))
    return RunFolder(str(tmp_path), "r")


def test_a_table_is_read_when_it_is_what_its_stage_wrote(tmp_path):
    folder = _run(tmp_path, {"fit": {"problems": 2, "tasks": 1}})
    folder.write(_rows(FIT_PROBLEMS, 2).with_columns(pl.lit("mine").alias("extra")), FIT_PROBLEMS.path)
    assert folder.read_declared(FIT_PROBLEMS, stage="fit").columns[-1] == "extra"  # an added column is kept
    assert folder.read_declared(FIT_PROBLEMS, ["task", "lam"], stage="fit").columns == ["task", "lam"]
    assert folder.read_declared(PROBE, stage="report", missing_ok=True) is None  # not written, not recorded


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.write(_rows(FIT_PROBLEMS, 1), FIT_PROBLEMS.path),
     "fits/problems.parquet: 1 rows, where the run's fit stage wrote 2;"),
    (lambda f: f.write(_rows(FIT_PROBLEMS, 0), FIT_PROBLEMS.path),
     "fits/problems.parquet: 0 rows, where the run's fit stage wrote 2;"),
    (lambda f: None, "fits/problems.parquet: missing; the run's fit stage wrote it (2 rows)"),
    (lambda f: f.write(_rows(FIT_PROBLEMS, 2).drop("lam"), FIT_PROBLEMS.path),
     "fits/problems.parquet: column 'lam' is missing;"),
])
def test_a_table_that_is_not_what_its_stage_wrote_is_one_line_naming_it(tmp_path, edit, message):
    folder = _run(tmp_path, {"fit": {"problems": 2, "tasks": 1}})
    edit(folder)
    with pytest.raises(StoreError) as err:
        folder.read_declared(FIT_PROBLEMS, stage="fit", missing_ok=True)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_table_read_in_chunks_is_checked_from_its_footer(tmp_path):
    folder = _run(tmp_path, {"sample": {"spans": 3}})
    folder.write(_rows(SPANS, 3), SPANS.path)
    folder.check_declared(SPANS, "sample")
    folder.write(_rows(SPANS, 3).drop("start"), SPANS.path)
    with pytest.raises(StoreError, match=r"sample/spans.parquet: column 'start' is missing"):
        folder.check_declared(SPANS, "sample")
    folder.write(_rows(SPANS, 2), SPANS.path)
    with pytest.raises(StoreError, match=r"sample/spans.parquet: 2 rows, where the run's sample stage wrote 3"):
        folder.check_declared(SPANS, "sample")


def test_a_checkpoint_shard_without_its_columns_is_one_line_naming_it(tmp_path):
    folder = _run(tmp_path, {})
    shard = _rows(checkpoint.SHARDS[0], 1).with_columns(request_id=pl.lit("a"))
    folder.write(shard, "infer/task=t/part-0-0.parquet")
    folder.write(shard.drop("completion"), "infer/task=t/part-0-1.parquet")
    with pytest.raises(StoreError, match=r"infer/task=t/part-0-1.parquet: column 'completion' is missing"):
        list(checkpoint.iter_shards(folder))
    with pytest.raises(StoreError, match=r"infer/task=t/part-0-1.parquet: .*column \"completion\""):
        list(checkpoint.iter_shards(folder, columns=["request_id", "completion"]))


def test_report_of_a_run_whose_recorded_table_was_deleted_is_one_line(tmp_path):
    folder = _run(tmp_path, {"report": {"categories": 2, "probe": 1}})
    folder.write(_rows(CATEGORIES_TABLE, 2), CATEGORIES_TABLE.path)
    out = RUNNER.invoke(app, ["report", folder.uri()])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: {folder.uri(PROBE.path)}: missing; the run's report stage wrote it (1 rows)"]


def _observations(tmp_path: Path) -> None:
    pl.DataFrame({"task": ["t"] * 4, "problem_id": ["p1", "p1", "p2", "p2"], "L": [2] * 4, "C": [1, 2, 1, 2],
                  "start": [0, 0, 1, 0], "score": [1.0, 1.0, 0.0, 1.0], "metric": ["accuracy"] * 4}).write_parquet(
        tmp_path / "obs.parquet")


def test_fit_compare_against_a_damaged_fit_is_one_line(tmp_path):
    _observations(tmp_path)
    (tmp_path / "ref").mkdir()
    _rows(FIT_PROBLEMS, 1).drop("category").write_parquet(tmp_path / "ref" / "problems.parquet")
    _rows(FIT_PROBLEMS, 1).write_parquet(tmp_path / "ref" / "tasks.parquet")
    out = RUNNER.invoke(app, ["fit", str(tmp_path / "obs.parquet"), "--out", str(tmp_path / "out"), "--no-ray",
                              "--uncertainty", "none", "--no-figures", "--compare", str(tmp_path / "ref")])
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [
        f"error: {tmp_path / 'ref' / 'problems.parquet'}: column 'category' is missing; it is not the table raylc "
        "wrote (edited, or written by another program?)"]
    assert not (tmp_path / "out").exists()


def test_a_shard_without_its_columns_is_named_when_the_shards_are_read_together(tmp_path):
    """Read together, a shard's missing column would be nulls: each shard is checked first."""
    folder = _run(tmp_path, {})
    shard = _rows(checkpoint.SHARDS[0], 1).with_columns(request_id=pl.lit("a"))
    folder.write(shard, "infer/task=t/part-0-0.parquet")
    folder.write(shard.drop("completion").with_columns(request_id=pl.lit("b")), "infer/task=t/part-0-1.parquet")
    with pytest.raises(StoreError, match=r"infer/task=t/part-0-1.parquet: column 'completion' is missing"):
        folder.completions()


def test_a_folder_where_the_manifest_belongs_is_bad_input_not_an_outage(tmp_path):
    (tmp_path / "r" / "manifest.json").mkdir(parents=True)
    out = RUNNER.invoke(app, ["status", str(tmp_path / "r")])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: {tmp_path / 'r' / 'manifest.json'}: a folder where a file belongs"]


def test_longscore_of_a_run_folder_that_lost_its_manifest_says_so(tmp_path):
    (tmp_path / "r" / "score").mkdir(parents=True)
    pl.DataFrame({"task": ["t"], "length": [2048], "score": [1.0]}).write_parquet(
        tmp_path / "r" / "score" / "scores.parquet")
    out = RUNNER.invoke(app, ["longscore", str(tmp_path / "r"), "--out", str(tmp_path / "out")])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: {tmp_path / 'r'}: a run folder without its manifest.json, so not a finished run; pass a finished "
        "run or a score table"]
    assert not (tmp_path / "out").exists()


def test_fit_compare_against_an_emptied_fit_is_one_line(tmp_path):
    """raylc writes no fit without a problem: an emptied one would compare nothing, exit 0."""
    (tmp_path / "ref").mkdir()
    _rows(FIT_PROBLEMS, 0).write_parquet(tmp_path / "ref" / "problems.parquet")
    _rows(FIT_TASKS, 0).write_parquet(tmp_path / "ref" / "tasks.parquet")
    _observations(tmp_path)
    out = RUNNER.invoke(app, ["fit", str(tmp_path / "obs.parquet"), "--out", str(tmp_path / "out"), "--no-ray",
                              "--uncertainty", "none", "--no-figures", "--compare", str(tmp_path / "ref")])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: {tmp_path / 'ref' / 'problems.parquet'}: no rows, so not a fit to compare with"]
    assert not (tmp_path / "out").exists()


def test_a_finished_manifest_without_stages_is_not_a_raylc_manifest(tmp_path):
    """It would show a finished run as every stage pending, with a resume hint."""
    folder = _run(tmp_path, {})
    out = RUNNER.invoke(app, ["status", folder.uri()])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: {folder.uri('manifest.json')}: not a raylc manifest (a finished run records its stages, and this "
        "one records none)"]


def test_a_column_asked_for_that_the_declaration_lacks_is_checked_too(tmp_path):
    folder = _run(tmp_path, {})
    folder.write(_rows(FIT_PROBLEMS, 1), FIT_PROBLEMS.path)
    with pytest.raises(StoreError, match=r"fits/problems.parquet: column 'mine' is missing"):
        folder.read_declared(FIT_PROBLEMS, ["task", "mine"])


def test_tables_of_an_earlier_raylc_still_read(tmp_path):
    """Columns added to a table later are optional in its declaration, and its readers do without
    them: a run of an earlier raylc still reports and compares."""
    from raylc.sweep.tables import SUMMARY

    older = {CATEGORIES_TABLE: ("n_problems", "interval"), SUMMARY: ("n_boot", "boot_seed"),
             FIT_PROBLEMS: ("confidence", "p_I", "lam_low"), FIT_TASKS: ("share_I_lo", "share_interval", "em_steps")}
    folder = _run(tmp_path, {"report": {"categories": 2, "summary": 2}, "fit": {"problems": 2, "tasks": 2}})
    for schema, absent in older.items():
        folder.write(_rows(schema, 2).drop(absent), schema.path)
        stage = "fit" if schema.path.startswith("fits/") else "report"
        assert set(folder.read_declared(schema, stage=stage).columns) == set(schema.dtypes) - set(absent)


def test_a_stage_that_writes_its_outputs_again_leaves_none_of_an_earlier_attempts(tmp_path):
    """A report stage run again, e.g. on problems that lost their planted truth, writes no
    recovery table: the one from before must not stay beside the new report."""
    folder = RunFolder(str(tmp_path), "r")
    table = pl.DataFrame({"x": [1]})
    folder.write_outputs("report", {"categories": table, "recovery": table}, {"summary.md": "before"})
    folder.write_outputs("report", {"categories": table}, {"summary.md": "after"})
    assert sorted(p.name for p in (tmp_path / "r" / "report").iterdir()) == ["categories.parquet", "summary.md"]
    assert (tmp_path / "r" / "report" / "summary.md").read_text() == "after"


def test_a_command_that_writes_to_the_same_folder_again_leaves_none_of_its_earlier_outputs(tmp_path):
    """`raylc fit --out DIR --compare REF`, then the same without `--compare` and without figures:
    DIR holds the second fit's outputs only (no `compare.parquet` or figure of the first beside
    them), and a file of the user's in DIR is kept."""
    _observations(tmp_path)
    fit = ["fit", str(tmp_path / "obs.parquet"), "--no-ray", "--uncertainty", "none"]
    assert RUNNER.invoke(app, [*fit, "--out", str(tmp_path / "ref"), "--no-figures"]).exit_code == 0
    first = RUNNER.invoke(app, [*fit, "--out", str(tmp_path / "out"), "--compare", str(tmp_path / "ref")])
    assert first.exit_code == 0, first.output
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert {"compare.parquet", "categories.png", "lambda_k.png"} <= {p.name for p in (tmp_path / "out").iterdir()}
    second = RUNNER.invoke(app, [*fit, "--out", str(tmp_path / "out"), "--no-figures"])
    assert second.exit_code == 0, second.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fit.json", "notes.txt", "problems.parquet", "tasks.parquet"]
