"""raylc.io.store.read_input: user tables in Parquet, CSV or JSONL."""

import json

import polars as pl
import pytest

from raylc.io.store import StoreError, read_input


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
