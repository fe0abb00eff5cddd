"""docs/fidelity.md's table ("# Fidelity to the official scripts") against the package: every
test it names exists, every row names one, and every shipped task of every protocol is named
(backticked) in the rule of at least one row of that protocol. No Ray, no model."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

import raylc.suites  # noqa: F401 (registers the suites)
from raylc.suites.helmet_recall import HELMET_RECALL_TASKS
from raylc.suites.longbench import DATASETS
from raylc.suites.longbench100 import LONGBENCH100_TASKS
from raylc.suites.registry import SUITES
from raylc.suites.thesis import THESIS_TASKS

ROOT = Path(__file__).resolve().parents[1]
SECTION = "# Fidelity to the official scripts"
#: suite kind -> (how its rows' rule cells start, its shipped tasks)
PROTOCOLS = {
    "longbench100": ("100-LongBench", LONGBENCH100_TASKS),
    "helmet_recall": ("HELMET", HELMET_RECALL_TASKS),
    "longbench_v2": ("LongBench v2", ("longbench_v2",)),
    "longbench": ("LongBench v1", DATASETS),
    "thesis_units": ("Thesis", THESIS_TASKS),
}
#: registered suites that implement no published protocol
NOT_PROTOCOLS = {"planted", "documents", "layouts"}
_CODE = re.compile(r"(`+)(.+?)\1")


def _cells(line: str) -> list[str]:
    """The cells of a table line, a ``|`` inside a code span not splitting it."""
    spans: list[str] = []
    masked = _CODE.sub(lambda m: spans.append(m.group(0)) or f"\x00{len(spans) - 1}\x00", line.strip())
    cells = [c.strip() for c in masked.strip("|").split("|")]
    return [re.sub("\x00(\\d+)\x00", lambda m: spans[int(m.group(1))], c) for c in cells]


def _code(cell: str) -> list[str]:
    return [m.group(2).strip() for m in _CODE.finditer(cell)]


@cache
def table() -> list[dict[str, str]]:
    text = (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")
    assert text.count(SECTION) == 1, f"docs/fidelity.md has no single {SECTION!r} section"
    section = re.split(r"\n#{2,3} ", text.split(SECTION, 1)[1], maxsplit=1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = _cells(lines[0])
    assert header == ["rule", "official file", "raylc", "test"], header
    assert set(lines[1]) <= set("|-: "), "the second table line is the separator"
    rows = [dict(zip(header, _cells(line))) for line in lines[2:]]
    assert all(len(_cells(line)) == 4 for line in lines[2:]), "every row has four cells"
    return rows


def _node_ids(cell: str) -> list[tuple[str, str | None]]:
    """``(file, name)`` of the tests a cell names: ``tests/x.py::name``, ``tests/x.py`` (a whole
    file) and ``::other`` (another test of the last file named)."""
    out: list[tuple[str, str | None]] = []
    last: str | None = None
    for item in _code(cell):
        if item.startswith("tests/"):
            path, _, name = item.partition("::")
            last = path
            out.append((path, name or None))
        elif item.startswith("::"):
            assert last is not None, f"{item!r} names no file before it in {cell!r}"
            out.append((last, item[2:]))
    return out


@cache
def _defined(path: str) -> frozenset[str]:
    """Test functions of a file, and ``Class::method`` for its classes' methods."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return frozenset(names)


def test_the_table_parses():
    rows = table()
    assert len(rows) >= 20
    assert _cells("| `a|b` | x | `` ` `` | y |") == ["`a|b`", "x", "`` ` ``", "y"]
    assert _node_ids("`tests/a.py::t1`, `::t2`, `tests/b.py` and prose") == [
        ("tests/a.py", "t1"), ("tests/a.py", "t2"), ("tests/b.py", None)]


@pytest.mark.parametrize("row", range(len(table())))
def test_every_row_names_tests_that_exist(row):
    cells = table()[row]
    ids = _node_ids(cells["test"])
    assert ids, f"row {row + 1} ({cells['rule'][:60]!r}) names no test"
    for path, name in ids:
        assert (ROOT / path).is_file(), f"row {row + 1}: no file {path}"
        if name is not None:
            assert name.split("[")[0] in _defined(path), f"row {row + 1}: {path} has no test {name}"


def test_every_row_belongs_to_a_protocol():
    prefixes = [prefix for prefix, _ in PROTOCOLS.values()]
    for row in table():
        assert any(row["rule"].startswith(p) for p in prefixes), f"a row of no protocol: {row['rule'][:80]!r}"


def test_every_shipped_task_of_every_protocol_has_a_row():
    shipped = {kind for kind in SUITES if SUITES.get(kind)[0].__module__.startswith("raylc.")}  # not tests'
    assert shipped - NOT_PROTOCOLS == set(PROTOCOLS), "a new suite: add its tasks to PROTOCOLS and the table"
    missing = []
    for kind, (prefix, tasks) in PROTOCOLS.items():
        named = {name for row in table() if row["rule"].startswith(prefix) for name in _code(row["rule"])}
        missing += [f"{kind}: {task}" for task in tasks if task not in named]
    assert not missing, f"tasks without a row in docs/fidelity.md's table: {', '.join(missing)}"
