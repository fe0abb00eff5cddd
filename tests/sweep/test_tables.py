"""raylc.sweep.tables: a length run's samples and request tables are their declarations, and a
column a suite adds without declaring it stops the build stage."""

from __future__ import annotations

import pytest

from raylc.io.schemas import SchemaError
from raylc.spec import parse_job
from raylc.suites.helmet_recall import HelmetRecallSuite
from raylc.suites.samples import SAMPLES
from raylc.sweep import stages, tables

JOB = {"name": "t", "suite": {"kind": "helmet_recall", "lengths": [256, 512], "base_lengths": [256],
                              "samples_per_length": 2, "tasks": ["json_kv", "mv_needle"]}}


def test_samples_and_requests_are_their_declared_tables():
    job = parse_job(JOB)
    samples = stages.build_samples(job)
    assert set(samples.columns) == {c.name for c in SAMPLES.columns} | {"depth"}
    assert stages.requests(samples, job).columns == [c.name for c in tables.REQUESTS.columns]


def test_an_undeclared_suite_column_stops_the_build(monkeypatch):
    build = HelmetRecallSuite.build
    monkeypatch.setattr(HelmetRecallSuite, "build", lambda suite, seed: build(suite, seed).with_columns(chars=1))
    with pytest.raises(SchemaError, match=r"^table build/samples.parquet: column 'chars' is not declared"):
        stages.build_samples(parse_job(JOB))
