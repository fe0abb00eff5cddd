"""raylc.io.store.read_input: user tables in Parquet, CSV or JSONL."""

import json

import polars as pl
import pytest

from raylc.io.store import Store, StoreError, StoreUnavailable, read_input
from raylc.run.folder import RunFolder


def test_jsonl_field_first_seen_late_is_kept(tmp_path):
    path = tmp_path / "pool.jsonl"
    rows = [{"text": f"doc {i}"} for i in range(150)] + [{"text": "last", "summary": "a late field"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = read_input(str(path))
    assert frame.columns == ["text", "summary"] and frame["summary"].drop_nulls().to_list() == ["a late field"]


def test_csv_and_parquet_and_errors(tmp_path):
    frame = pl.DataFrame({"a": list(range(120)) + [None], "b": ["x"] * 120 + ["1.5"]})
    frame.write_csv(tmp_path / "t.csv")
    frame.write_parquet(tmp_path / "t.parquet")
    assert read_input(str(tmp_path / "t.csv"))["b"].to_list()[-1] == "1.5"
    assert read_input(str(tmp_path / "t.parquet")).equals(frame)
    with pytest.raises(StoreError, match="no such file"):
        read_input(str(tmp_path / "missing.jsonl"))
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(StoreError, match="unsupported format"):
        read_input(str(tmp_path / "t.txt"))


# --- atomic writes (README "Resume": a table is whole or absent) --------------------------------


class _Boom(RuntimeError):
    pass


class _FailingStream:
    """An output stream that takes ``budget`` bytes, then fails like a full disk or a lost node."""

    def __init__(self, inner, budget: int):
        self.inner, self.budget = inner, budget

    def write(self, data) -> int:
        data = bytes(data)
        if len(data) > self.budget:
            self.inner.write(data[: self.budget])
            self.inner.flush()
            raise _Boom("injected write failure")
        self.budget -= len(data)
        return self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()
        return False


class _FailingFS:
    """The store's filesystem, with output streams that fail after ``budget`` bytes."""

    def __init__(self, inner, budget: int):
        self.inner, self.budget, self.opened = inner, budget, []

    def open_output_stream(self, path, *args, **kwargs):
        self.opened.append(path)
        return _FailingStream(self.inner.open_output_stream(path, *args, **kwargs), self.budget)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _failing(store: Store, budget: int) -> _FailingFS:
    fs = _FailingFS(store.fs, budget)
    object.__setattr__(store, "_fs", fs)
    return fs


def _listing(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("budget", [0, 1, 100, 1000])
def test_a_failed_table_write_leaves_the_old_table_and_no_temporary(tmp_path, budget):
    store = Store(str(tmp_path))
    old = pl.DataFrame({"x": list(range(50))})
    store.write_table(old, "r", "score", "t.parquet")
    before = _listing(tmp_path)
    new = pl.DataFrame({"x": [f"row {i}" * 20 for i in range(5000)]})
    fs = _failing(store, budget)
    with pytest.raises(_Boom):
        store.write_table(new, "r", "score", "t.parquet")
    assert fs.opened and all(p != store.path("r", "score", "t.parquet") for p in fs.opened)  # never in place
    assert _listing(tmp_path) == before  # the old table, byte for byte, and no temporary
    object.__setattr__(store, "_fs", fs.inner)
    assert store.read_table("r", "score", "t.parquet").equals(old)


def test_a_failed_first_write_leaves_nothing(tmp_path):
    store = Store(str(tmp_path))
    _failing(store, 10)
    with pytest.raises(_Boom):
        store.write_json({"a": 1}, "r", "manifest.json")
    assert _listing(tmp_path) == {} and not store.exists("r", "manifest.json")


def test_a_streamed_table_is_invisible_until_complete_and_gone_on_failure(tmp_path):
    """``RunFolder.write_parts`` streams row groups: while it writes, readers see no table under the
    final name (nor any file they would read); when the producer fails, nothing is left."""
    store = Store(str(tmp_path))
    run = RunFolder(str(tmp_path), "r")
    seen = []

    def parts(fail: bool):
        for i in range(3):
            yield pl.DataFrame({"i": list(range(i * 10, i * 10 + 10))})
            seen.append((store.exists("r", "score", "obs.parquet"), store.parquet_files("r", "score")))
        if fail:
            raise _Boom("producer died")

    empty = pl.DataFrame(schema={"i": pl.Int64})
    with pytest.raises(_Boom):
        run.write_parts(parts(fail=True), "score/obs.parquet", empty)
    assert seen == [(False, [])] * 3
    assert _listing(tmp_path) == {}
    assert run.write_parts(parts(fail=False), "score/obs.parquet", empty) == 30
    assert store.read_table("r", "score", "obs.parquet")["i"].to_list() == list(range(30))
    assert [p.name for p in (tmp_path / "r" / "score").iterdir()] == ["obs.parquet"]


# --- what the mutation run found unguarded (docs/testing.md, "Mutation testing") ---------------------------


def test_local_paths_and_s3_uris_get_their_filesystems(tmp_path):
    assert not Store(str(tmp_path)).is_s3 and Store(str(tmp_path)).path("r", "t.parquet") == f"{tmp_path}/r/t.parquet"
    s3 = Store("s3://bucket/runs/")
    assert s3.is_s3 and s3.path("r") == "bucket/runs/r" and s3.uri("r") == "s3://bucket/runs/r"


def test_read_input_relative_name_and_whole_file_schema(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "late.csv").write_text("x\n" + "\n".join(str(i) for i in range(150)) + "\n1.5\n")
    assert read_input("late.csv")["x"].dtype == pl.Float64  # every row decides the type
    for name in ("bad.ndjson", "bad.jsonl"):
        (tmp_path / name).write_text('{"a": 1}\n[2]\n')
        with pytest.raises(StoreError,
                           match=rf"^{name.replace('.', '[.]')}: line 2: expected a JSON object, got list$"):
            read_input(name)


def test_parquet_is_zstd_with_statistics_and_the_asked_row_groups(tmp_path):
    import pyarrow.parquet as pq

    store = Store(str(tmp_path))
    store.write_table(pl.DataFrame({"x": list(range(100))}), "t.parquet", row_group_size=10)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    assert meta.num_row_groups == 10
    col = meta.row_group(0).column(0)
    assert col.compression == "ZSTD" and col.statistics is not None and col.statistics.has_min_max


def test_read_table_columns_hive_folders_and_mixed_files(tmp_path):
    store = Store(str(tmp_path))
    store.write_table(pl.DataFrame({"a": [1], "b": ["x"]}), "t", "task=k=v", "day=1", "p0.parquet")
    store.write_table(pl.DataFrame({"a": [2.5], "c": [True]}), "t", "task=w", "day=2", "p1.parquet")
    got = store.read_table("t").sort("a")
    assert got.columns == ["a", "b", "task", "day", "c"]
    assert got.rows() == [(1.0, "x", "k=v", "1", None), (2.5, None, "w", "2", True)]
    assert store.read_table("t", columns=["a"]).columns == ["a", "task", "day"]
    assert store.read_table("t", "task=w", "day=2", "p1.parquet", columns=["c"]).rows() == [(True,)]


class _BrokenFS:
    """A filesystem whose every call fails like a lost mount."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise OSError("Input/output error")
        return fail


@pytest.mark.parametrize("call", ["exists", "read_table", "parquet_files", "table_ok", "delete", "read_text"])
def test_storage_errors_are_one_line_naming_the_table(tmp_path, call):
    store = Store(str(tmp_path))
    object.__setattr__(store, "_fs", _BrokenFS())
    with pytest.raises(StoreUnavailable) as err:
        getattr(store, call)("r", "t.parquet")
    assert str(err.value) == f"{tmp_path}/r/t.parquet: storage error: Input/output error"


def test_json_is_written_where_asked_sorted_indented_and_with_str_fallback(tmp_path):
    import datetime as dt

    store = Store(str(tmp_path))
    store.write_json({"b": 1, "a": {"when": dt.date(2026, 1, 2), "p": tmp_path}}, "r", "manifest.json")
    text = (tmp_path / "r" / "manifest.json").read_text()
    assert text == '{\n  "a": {\n    "p": "' + str(tmp_path) + '",\n    "when": "2026-01-02"\n  },\n  "b": 1\n}'
    assert store.read_json("r", "manifest.json") == {"a": {"p": str(tmp_path), "when": "2026-01-02"}, "b": 1}


def test_a_missing_table_is_one_line_naming_it(tmp_path):
    with pytest.raises(StoreError, match=rf"^{tmp_path}/r/nope\.parquet: no such table$"):
        Store(str(tmp_path)).read_table("r", "nope.parquet")


def test_a_json_list_file_with_leading_blank_lines_is_a_list(tmp_path):
    from raylc.io.store import json_records

    records = json_records("x.json", b"\n  \n[{\"a\": 1}, {\"a\": 2}]")
    assert [r for _, r in records] == [{"a": 1}, {"a": 2}]


def test_json_lines_errors_name_the_file_and_line(tmp_path):
    """Polars names no line; read_input's second pass does, with the file: a syntax error and a line that
    is not an object."""
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2,,}\n')
    (tmp_path / "b.jsonl").write_text('{"x": 1}\n[1, 2]\n')
    with pytest.raises(StoreError) as err:
        read_input(str(tmp_path / "a.jsonl"))
    assert str(err.value) == (f"{tmp_path / 'a.jsonl'}: line 2: invalid JSON at column 9: "
                              "Expecting property name enclosed in double quotes")
    with pytest.raises(StoreError) as err:
        read_input(str(tmp_path / "b.jsonl"))
    assert str(err.value) == f"{tmp_path / 'b.jsonl'}: line 2: expected a JSON object, got list"


def test_read_text_of_a_folder_is_bad_input_naming_the_location(tmp_path):
    """A folder where a file belongs (pyarrow's plain OSError) is one line naming the location,
    a StoreError (exit 2), not an outage (StoreUnavailable, exit 1)."""
    (tmp_path / "sub").mkdir()
    with pytest.raises(StoreError) as err:
        Store(str(tmp_path)).read_text("sub")
    assert not isinstance(err.value, StoreUnavailable)
    assert str(err.value) == f"{tmp_path / 'sub'}: a folder where a file belongs"


def test_a_parquet_folder_reads_with_or_without_a_trailing_slash(tmp_path):
    """read_input strips only trailing slashes: a folder of Parquet parts named "tableX" reads as itself."""
    folder = tmp_path / "tableX"
    folder.mkdir()
    pl.DataFrame({"a": [1, 2]}).write_parquet(folder / "part-0.parquet")
    for uri in (str(folder), f"{folder}/"):
        assert read_input(uri)["a"].to_list() == [1, 2]


def test_json_files_are_a_list_of_objects_or_one_object(tmp_path):
    """``.json``: a JSON list of objects (one row each), or one object (one row: RULER's
    PaulGrahamEssays.json); anything else is one line naming the record."""
    (tmp_path / "list.json").write_text(json.dumps([{"text": "a", "n": 1}, {"text": "b", "n": None}]))
    assert read_input(str(tmp_path / "list.json")).to_dicts() == [{"text": "a", "n": 1}, {"text": "b", "n": None}]
    (tmp_path / "one.json").write_text(json.dumps({"text": "Essay one.\n\nEssay two."}))
    assert read_input(str(tmp_path / "one.json")).to_dicts() == [{"text": "Essay one.\n\nEssay two."}]
    (tmp_path / "bad.json").write_text(json.dumps([{"text": "a"}, "b"]))
    with pytest.raises(StoreError, match=r"bad.json: record 1: expected a JSON object, got str$"):
        read_input(str(tmp_path / "bad.json"))
    (tmp_path / "broken.json").write_text('[{"text": "a"},\n {"text": }]')
    with pytest.raises(StoreError, match=r"broken.json: invalid JSON at line 2, column 11"):
        read_input(str(tmp_path / "broken.json"))


def test_outputs_with_a_folder_where_one_belongs_write_nothing(tmp_path):
    """``write_outputs`` looks for a folder in place of any of its files before it writes the
    first, so a refusal leaves no half of a result set (``raylc fit --out`` wrote problems.parquet,
    then refused tasks.parquet)."""
    (tmp_path / "tasks.parquet").mkdir()
    (tmp_path / "old.png").write_bytes(b"x")
    frame = pl.DataFrame({"a": [1]})
    with pytest.raises(StoreError) as err:
        Store(str(tmp_path)).write_outputs({"problems": frame, "tasks": frame}, {"fit.json": {}}, replaces=["old.png"])
    assert str(err.value) == f"{tmp_path / 'tasks.parquet'}: a folder where a file belongs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.png", "tasks.parquet"]


@pytest.mark.parametrize("suffix, where", [(".jsonl", ("line 2", "line 1")), (".json", ("record 1", "record 0"))])
def test_a_field_that_is_a_list_in_one_row_and_text_in_another_is_named(tmp_path, suffix, where):
    """pl.read_ndjson would turn the list into the text '["Two"]' and the table would pass every
    type check after it: JSON Lines are parsed as JSON lists are, and the mixed field is named."""
    rows = [{"id": "a1", "answer": ["Two"], "n": 1}, {"id": "a2", "answer": "Two", "n": 2.5}]
    path = tmp_path / f"mixed{suffix}"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) if suffix == ".jsonl" else json.dumps(rows))
    with pytest.raises(StoreError) as err:
        read_input(str(path))
    assert str(err.value) == f"{path}: {where[0]}: field 'answer' holds text where {where[1]} holds a list"
    rows[1]["answer"] = ["Two", "2"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) if suffix == ".jsonl" else json.dumps(rows))
    table = read_input(str(path))
    assert table["answer"].to_list() == [["Two"], ["Two", "2"]] and table.schema["n"] == pl.Float64
