"""docs/reference/ against the code (raylc.reference): the checked-in pages are the ones the code
generates, so a job key, a suite task, a backend field or a table column added without
regenerating them fails here; a key without a description cannot be documented. No Ray."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from pydantic import BaseModel, Field, create_model

from raylc import reference
from raylc.io.schemas import Column

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "reference"
STALE = "docs/reference is stale: run `make reference` (python -m raylc.reference docs/reference) and commit it"


def _stale(pages: dict[str, str]) -> list[str]:
    """The pages that differ from the checked-in ones, and checked-in pages the code no longer makes."""
    differ = [name for name, text in pages.items()
              if not (FOLDER / name).is_file() or (FOLDER / name).read_text(encoding="utf-8") != text]
    return differ + sorted(p.name for p in FOLDER.glob("*.md") if p.name not in pages)


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return reference.pages()


def test_the_checked_in_pages_are_the_generated_ones(generated):
    assert not _stale(generated), f"{STALE}; differing: {', '.join(_stale(generated))}"


def test_the_regeneration_command_writes_them(tmp_path, generated):
    assert reference.main([str(tmp_path)]) == 0
    assert {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir()} == generated
    assert reference.main([]) == 2
    assert "\nreference: install\n\t$(BIN)/python -m raylc.reference docs/reference\n" in (
        ROOT / "Makefile").read_text(encoding="utf-8")  # the command the failure names


def _extended(model: type[BaseModel], **fields) -> type[BaseModel]:
    return create_model(model.__name__, __base__=model, __module__=model.__module__, **fields)


def _job_key(monkeypatch):
    from raylc.spec import Job, StoreConfig

    field = Field(default="eu", description="The bucket's region.")
    monkeypatch.setattr(Job.model_fields["store"], "annotation", _extended(StoreConfig, region=(str, field)))
    return "job.md", "`store.region`"


def _suite_task(monkeypatch):
    from raylc.suites.registry import SUITES, Task

    config, builder, info = SUITES.get("helmet_recall")
    task = Task("fw_needle", "recall", 50, "NVIDIA/RULER `scripts/data/synthetic/niah.py`")
    monkeypatch.setitem(SUITES._entries, "helmet_recall",
                        (config, builder, dataclasses.replace(info, tasks=(*info.tasks, task))))
    return "suites.md", "`fw_needle`"


def _backend_field(monkeypatch):
    from raylc.backends.registry import BACKENDS

    plugin = BACKENDS.get("openai")
    field = Field(default=None, description="An organization header.")
    monkeypatch.setattr(plugin, "probe", _extended(plugin.probe, organization=(str | None, field)))
    return "backends.md", "`probe.organization`"


def _table_column(monkeypatch):
    from raylc.dolce import tables

    extra = Column("span_tokens", pl.Int64(), "Tokens of the span.")
    spans = dataclasses.replace(tables.SPANS, columns=(*tables.SPANS.columns, extra))
    monkeypatch.setattr(tables, "RUN_TABLES", tuple(spans if t is tables.SPANS else t for t in tables.RUN_TABLES))
    return "tables.md", "`span_tokens`"


@pytest.mark.parametrize("add", [_job_key, _suite_task, _backend_field, _table_column],
                         ids=["job key", "suite task", "backend field", "table column"])
def test_an_addition_without_regenerating_makes_the_pages_stale(monkeypatch, add):
    page, name = add(monkeypatch)
    pages = reference.pages()
    assert _stale(pages) == [page] and name in pages[page] and name not in (FOLDER / page).read_text(encoding="utf-8")


def test_a_key_without_a_description_cannot_be_documented():
    Section = create_model("Section", documented=(int, Field(default=1, description="A key.")), bare=(int, 2))
    with pytest.raises(reference.ReferenceError, match=r"\.Section\.bare \(key x.bare\) has no description"):
        list(reference.key_tables(Section, "x"))


def test_every_shipped_key_suite_and_backend_is_on_its_page(generated):
    """What the registries hold and the job's sections are all there (the walk misses nothing)."""
    from raylc.backends.registry import BACKENDS
    from raylc.spec import Job
    from raylc.suites.registry import SUITES

    for key in Job.model_fields:
        assert f"| `{key}` |" in generated["job.md"], key
    for kind in SUITES:
        if SUITES.get(kind)[0].__module__.startswith("raylc."):
            config, _, info = SUITES.get(kind)
            assert f"## {kind}\n" in generated["suites.md"], kind
            for name in (*config.model_fields, *(t.name for t in info.tasks)):
                assert name in generated["suites.md"], (kind, name)
    for name in ("simulated", "vllm", "openai"):
        for key in BACKENDS.get(name).probe.model_fields:
            assert f"`probe.{key}`" in generated["backends.md"] or key == "generation", (name, key)
    assert "`probe.sampling.max_tokens`" in generated["backends.md"]


def test_the_suite_page_says_what_mv_needle_fills_its_context_with(generated):
    """HELMET's multi-value needle runs in RULER's noise sentences unless suite.haystack names
    essays, as the builder does (tests/suites/test_helmet_recall.py)."""
    row = next(line for line in generated["suites.md"].splitlines() if line.startswith("| `mv_needle` |"))
    assert "RULER's repeated noise sentences unless `suite.haystack`" in row and "not an essay haystack" in row
