"""raylc.dolce.tables: what each DOLCE stage makes is its declared table, and a column a suite adds
without declaring it stops the build stage (the reference pages would not name it)."""

from __future__ import annotations

import pytest
from in_process import dolce_tables

from raylc.dolce import stages, tables
from raylc.io.schemas import SchemaError
from raylc.spec import parse_job
from raylc.suites.planted import PlantedSuite

JOB = {"name": "t", "suite": {"problems_per_task": 4, "max_units": 60}}


def test_a_run_writes_its_declared_tables():
    written = dolce_tables(parse_job(JOB))
    declared = {t.path: t for t in tables.RUN_TABLES}
    for path, frame in written.items():
        table = declared[path]
        assert set(frame.columns) - {c.name for c in table.columns} <= {c.name for c in PlantedSuite.columns}, path
        assert all(c.name in frame.columns for c in table.columns if not c.optional), path


def test_an_undeclared_suite_column_stops_the_build(monkeypatch):
    build = PlantedSuite.build
    monkeypatch.setattr(PlantedSuite, "build", lambda suite, seed: build(suite, seed).with_columns(chars=1))
    with pytest.raises(SchemaError, match=r"^table build/problems.parquet: column 'chars' is not declared"):
        stages.build(parse_job(JOB))
