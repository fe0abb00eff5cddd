"""raylc.io.schemas: a declared table refuses a frame whose columns are not its declaration's, in
one line naming the table and the column; a declaration without a description cannot be made."""

from __future__ import annotations

import polars as pl
import pytest

from raylc.io.schemas import Column, SchemaError, TableSchema, check_tables, declare, described

TABLE = TableSchema("t", "out/t.parquet", "A table.", declare(
    ("a", pl.String, "A string."), ("b", pl.Int64, "A count."), ("c", pl.Float64, "Sometimes.", True)))


def test_a_frame_of_the_declared_columns_passes():
    frame = pl.DataFrame({"b": [1], "a": ["x"]})  # order free, optional column absent
    assert TABLE.check(frame) is frame
    assert TABLE.check(frame.with_columns(c=pl.lit(None))).height == 1  # a column of nulls
    assert TABLE.check(frame.with_columns(d=pl.lit(True)), extra=[Column("d", pl.Boolean(), "Own.")]).width == 3


@pytest.mark.parametrize("frame, message", [
    (pl.DataFrame({"a": ["x"], "b": [1], "d": [0]}), "table out/t.parquet: column 'd' is not declared"),
    (pl.DataFrame({"a": ["x"]}), "table out/t.parquet: column 'b' is missing"),
    (pl.DataFrame({"a": ["x"], "b": [1.5]}), "table out/t.parquet: column 'b' is Float64, declared Int64"),
])
def test_a_frame_of_other_columns_is_refused_in_one_line(frame, message):
    with pytest.raises(SchemaError) as err:
        TABLE.check(frame)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_tables_are_checked_by_name():
    assert check_tables([TABLE], {"t": pl.DataFrame({"a": ["x"], "b": [1]})})["t"].height == 1
    with pytest.raises(SchemaError, match=r"^table 'u' is not declared"):
        check_tables([TABLE], {"u": pl.DataFrame()})


def test_a_declaration_describes_every_column_once():
    with pytest.raises(ValueError, match="column 'a' has no description"):
        TableSchema("t", "t.parquet", "", declare(("a", pl.String, " ")))
    with pytest.raises(ValueError, match="column 'a' is declared twice"):
        TableSchema("t", "t.parquet", "", declare(("a", pl.String, "A."), ("a", pl.String, "A.")))
    with pytest.raises(ValueError, match="columns and descriptions differ: b"):
        described({"a": pl.String, "b": pl.Int64}, {"a": "A."})
    assert described({"a": pl.String}, {"a": "A."}) == (Column("a", pl.String(), "A."),)
    assert TABLE.relocated("t.parquet").path == "t.parquet" and TABLE.dtypes["b"] == pl.Int64()
