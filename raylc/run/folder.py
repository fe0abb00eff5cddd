"""A run's folder ``<store>/<run_id>/``: its tables and files by run-relative path (``build/problems.parquet``).

:class:`RunFolder` is the storage half of a run: :class:`raylc.run.skeleton.Run` adds the
manifest, lock, stage loop, inference and Ray. Every path goes through the store
(:mod:`raylc.io.store`, local or S3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import polars as pl
import pyarrow.parquet as pq

from raylc.io.store import Store


@dataclass
class RunFolder:
    """The tables of one run folder, by run-relative path."""

    store: Store
    run_id: str

    def read(self, rel: str) -> pl.DataFrame:
        return self.store.read_table(self.run_id, *rel.split("/"))

    def write(self, df: pl.DataFrame, rel: str, row_group_size: Optional[int] = None) -> None:
        self.store.write_table(df, self.run_id, *rel.split("/"), row_group_size=row_group_size)

    def write_parts(self, parts: Iterable[pl.DataFrame], rel: str, empty: pl.DataFrame) -> int:
        """Write frames of one schema as one Parquet file, a row group each, streamed to the
        store as they come (memory holds one frame; the file appears when complete); ``empty``
        is written when there are none. Returns the number of rows."""
        rows = 0
        with self.store.open_output(self.run_id, *rel.split("/")) as out:
            writer = None
            try:
                for part in parts:
                    table = part.to_arrow()
                    writer = writer or pq.ParquetWriter(out, table.schema, compression="zstd")
                    writer.write_table(table, row_group_size=max(table.num_rows, 1))
                    rows += part.height
                if writer is None:
                    writer = pq.ParquetWriter(out, empty.to_arrow().schema, compression="zstd")
                    writer.write_table(empty.to_arrow())
            finally:  # also when a part fails: the writer closes before its stream, never in __del__
                if writer is not None:
                    writer.close()
        return rows

    def iter_rows(self, rel: str, rows: int) -> Iterator[pl.DataFrame]:
        """A Parquet file in frames of at most ``rows`` rows, read one row group at a time."""
        with self.store.open_input(self.run_id, *rel.split("/")) as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=rows):
                yield pl.from_arrow(batch)  # type: ignore[misc]

    def num_rows(self, rel: str) -> int:
        """Rows of a Parquet file, from its footer."""
        with self.store.open_input(self.run_id, *rel.split("/")) as fh:
            return pq.read_metadata(fh).num_rows

    def has(self, rel: str) -> bool:
        """Whether a stage output is present and readable: a table (a ``.parquet`` file or a
        folder of them) whose footers read, else a file that exists."""
        parts = rel.split("/")
        if rel.endswith(".parquet") or "." not in rel:
            return self.store.table_ok(self.run_id, *parts)
        return self.store.exists(self.run_id, *parts)
