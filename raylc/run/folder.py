"""A run's folder ``<store>/<run_id>/``: the only door to a run's storage.

A :class:`RunFolder` owns what a run keeps: its stage tables by run-relative path
(``build/problems.parquet``), its manifest (:mod:`raylc.run.manifest`) and lock, its request
table and its checkpoint shards with their request ids (:mod:`raylc.run.checkpoint`, whose
functions take the folder). Nothing outside this module pairs a store with a run id: the rest
of raylc names a run by its folder, and every path goes through the store (:mod:`raylc.io.store`,
local or S3). A folder is two strings, so it pickles to the Ray workers that read its tables.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, ContextManager, Iterable, Iterator, Mapping, Optional, Union

import polars as pl
import pyarrow.parquet as pq
from pydantic import ValidationError

from raylc.io.schemas import TableSchema, stored_table
from raylc.io.store import Store, StoreError, StoreUnavailable, locate
from raylc.run import checkpoint
from raylc.run.errors import RunError
from raylc.run.manifest import Manifest

MANIFEST = "manifest.json"
LOCK = "_lock.json"
LOCK_STALE_S = 900.0  # a lock whose owner has not written for this long is taken over
LOCK_BEAT_S = LOCK_STALE_S / 6  #: how often a run that holds its lock rewrites it, whatever its stage is doing
#: how long a process that wrote a lock it did not create in one step waits before reading it
#: back (:meth:`RunFolder.acquire`): longer than another process takes from reading the lock to writing its own
LOCK_SETTLE_S = 1.0
_BEATS: dict[str, "_Heartbeat"] = {}  # by lock URI: a RunFolder pickles without them
SHARDS = checkpoint.SHARD_DIR  #: the infer stage's shards
JUDGE_SHARDS = "judge"  #: the judge calls' shards (a length sweep's score stage)

_STARTED = dt.datetime.now(dt.timezone.utc).isoformat()


def _lock_record() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started_at": _STARTED, "heartbeat": time.time()}


def _owner(held: dict[str, Any]) -> tuple[Any, Any]:
    return held.get("host"), held.get("pid")


def lock_alive(held: dict[str, Any]) -> bool:
    """Whether the lock's owner may still be running: same host -> its pid exists; else a recent
    heartbeat. A lock without a usable pid or heartbeat (raylc did not write it) is not alive."""
    if held.get("host") == socket.gethostname():
        pid = held.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
            return False  # os.kill(0 or -1, 0) would ask about a process group, not the owner
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, OverflowError):
            return False
        except PermissionError:  # another user's live process
            return True
        return True
    try:
        return time.time() - float(held.get("heartbeat", 0)) < LOCK_STALE_S
    except (TypeError, ValueError):
        return False


class _Heartbeat:
    """Calls ``write`` every :data:`LOCK_BEAT_S` on a daemon thread until :meth:`stop`, after
    which it writes no more (a write under way is waited for, up to 30 s)."""

    def __init__(self, write: Callable[[], None], name: str):
        self._stop, self._writing = threading.Event(), threading.Lock()
        self._write = write
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(LOCK_BEAT_S):
            with self._writing:
                if self._stop.is_set():
                    return
                with suppress(Exception):  # a store outage: the stage's own writes report it
                    self._write()

    def stop(self) -> None:
        self._stop.set()
        if self._writing.acquire(timeout=30.0):
            self._writing.release()


@dataclass(frozen=True)
class RunFolder:
    """The folder of run ``run_id`` in the store at ``root`` (a local path or ``s3://`` URI)."""

    root: str
    run_id: str

    @classmethod
    def at(cls, uri: str) -> "RunFolder":
        """The folder a ``<store>/<run_id>`` path or URI names."""
        store, run_id = locate(uri)
        return cls(store.root, run_id)

    @cached_property
    def _store(self) -> Store:
        return Store(self.root)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunFolder, (self.root, self.run_id))

    def _parts(self, rel: str) -> tuple[str, ...]:
        return (self.run_id, *rel.split("/")) if rel else (self.run_id,)

    def uri(self, rel: str = "") -> str:
        """The user-facing location of ``rel`` (what to open in Polars or DuckDB)."""
        return self._store.uri(*self._parts(rel))

    # ---- tables and files -------------------------------------------------------------------
    def read(self, rel: str, columns: Optional[list[str]] = None) -> pl.DataFrame:
        return self._store.read_table(*self._parts(rel), columns=columns)

    def read_declared(self, schema: TableSchema, columns: Optional[list[str]] = None, stage: Optional[str] = None,
                      missing_ok: bool = False) -> Any:
        """The stored table ``schema.path`` (its ``columns`` only, if given), checked: its columns
        are the declaration's (a column the declaration lacks, such as a suite's own, is kept)
        and, given the ``stage`` that wrote it, it is there and holds the rows the manifest
        records for it. Else a :class:`StoreError` naming the file: a table edited, deleted or
        written by something other than raylc. ``missing_ok``: None for a table that is not
        there and that the manifest does not record."""
        uri, wrote, there = self._expected(schema, stage)
        if not there and missing_ok:
            return None
        return stored_table(schema, self.read(schema.path), uri, columns, wrote, stage)

    def check_declared(self, schema: TableSchema, stage: Optional[str] = None, rel: Optional[str] = None,
                       meta: Optional[pq.FileMetaData] = None) -> None:
        """:meth:`read_declared`'s checks of one stored Parquet file from its footer alone (its
        columns and rows), for a table read in chunks; ``rel``: one file of the table, if not
        ``schema.path``; ``meta``: its footer, when already read."""
        rel = rel or schema.path
        uri, wrote, _ = self._expected(schema, stage) if rel == schema.path else (self.uri(rel), None, True)
        if meta is None:
            with self._store.open_input(*self._parts(rel)) as fh:
                meta = pq.read_metadata(fh)
        columns = pl.from_arrow(meta.schema.to_arrow_schema().empty_table())
        stored_table(schema, columns, uri, wrote=wrote, stage=stage, rows=meta.num_rows)  # type: ignore[arg-type]

    def _expected(self, schema: TableSchema, stage: Optional[str]) -> tuple[str, Optional[int], bool]:
        """The table's address, the rows the manifest records for it under ``stage`` (None: not
        recorded) and whether it exists; a :class:`StoreError` when it is recorded and missing."""
        uri, wrote, there = self.uri(schema.path), None, self.exists(schema.path)
        manifest = None if stage is None else self.manifest()
        record = None if manifest is None else manifest.stages.get(stage)
        if record is not None and record.status == "done" and record.rows:
            rows = record.rows.get(schema.name)
            wrote = rows if isinstance(rows, int) else None
        if wrote is not None and not there:
            raise StoreError(f"{uri}: missing; the run's {stage} stage wrote it ({wrote:,} rows)")
        return uri, wrote, there

    def write(self, df: pl.DataFrame, rel: str, row_group_size: Optional[int] = None) -> None:
        self._store.write_table(df, *self._parts(rel), row_group_size=row_group_size)

    def write_parts(self, parts: Iterable[pl.DataFrame], rel: str, empty: pl.DataFrame) -> int:
        """Write frames of one schema as one Parquet file, a row group each, streamed to the
        store as they come (memory holds one frame; the file appears when complete); ``empty``
        is written when there are none. Returns the number of rows."""
        rows = 0
        with self._store.open_output(*self._parts(rel)) as out:
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

    def write_outputs(self, under: str, tables: Mapping[str, pl.DataFrame],
                      files: Mapping[str, Union[bytes, str, dict]] = {}) -> None:
        """A stage's results under ``under`` (:meth:`raylc.io.store.Store.write_outputs`), in place
        of what an earlier attempt left there (a table this attempt does not write, such as the
        recovery of problems that no longer carry their planted truth, is not left behind)."""
        self.delete(under)
        self._store.write_outputs(tables, files, *self._parts(under))

    def iter_rows(self, rel: str, rows: int) -> Iterator[pl.DataFrame]:
        """A Parquet file in frames of at most ``rows`` rows, read one row group at a time."""
        with self._store.open_input(*self._parts(rel)) as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=rows):
                yield pl.from_arrow(batch)  # type: ignore[misc]

    def num_rows(self, rel: str) -> int:
        """Rows of a Parquet file, from its footer."""
        with self._store.open_input(*self._parts(rel)) as fh:
            return pq.read_metadata(fh).num_rows

    def scan(self, rel: str) -> pl.LazyFrame:
        """A stored table, scanned lazily."""
        import pyarrow.dataset as pads

        return pl.scan_pyarrow_dataset(pads.dataset(self._store.path(*self._parts(rel)), filesystem=self._store.fs,
                                                    format="parquet"))

    def open_input(self, rel: str) -> ContextManager[Any]:
        """A stored file opened for random-access reading, closed with the block."""
        return self._store.open_input(*self._parts(rel))

    def input_file(self, rel: str) -> Any:
        """A stored file opened for random-access reading, for its caller to keep (a reader of row groups)."""
        return self._store.fs.open_input_file(self._store.path(*self._parts(rel)))

    def read_bytes(self, rel: str) -> Optional[bytes]:
        """A stored file's bytes (None when it does not exist)."""
        if not self.exists(rel):
            return None
        with self.open_input(rel) as fh:
            return fh.read()

    def parquet_files(self, rel: str) -> list[str]:
        """Run-relative paths of a table's Parquet files (the file, or every one below a folder), in name order."""
        start = len(self._store.path(self.run_id)) + 1
        return [f[start:] for f in self._store.parquet_files(*self._parts(rel))]

    def table_ok(self, rel: str) -> bool:
        """A readable Parquet file, or a folder of them (footers checked)."""
        return self._store.table_ok(*self._parts(rel))

    def footer(self, rel: str) -> Optional[pq.FileMetaData]:
        """The footer of the Parquet file ``rel``; None when it is corrupt or truncated."""
        return self._store.footer(*self._parts(rel))

    def exists(self, rel: str = "") -> bool:
        return self._store.exists(*self._parts(rel))

    def has(self, rel: str) -> bool:
        """Whether a stage output is present and readable: a table (a ``.parquet`` file or a
        folder of them) whose footers read, else a file that exists."""
        if rel.endswith(".parquet") or "." not in rel:
            return self.table_ok(rel)
        return self.exists(rel)

    def delete(self, rel: str) -> None:
        """Remove a file or a folder (with everything under it) if it exists."""
        self._store.delete(*self._parts(rel))

    # ---- manifest and lock ------------------------------------------------------------------
    def manifest(self) -> Optional[Manifest]:
        """The run's manifest; None when there is none; a :class:`StoreError` (one line) when it
        is not one this raylc reads."""
        data = self._store.read_json(*self._parts(MANIFEST))
        if data is None:
            return None
        try:
            return Manifest.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(map(str, error["loc"]))
            raise StoreError(f"{self.uri(MANIFEST)}: not a raylc manifest ({where + ': ' if where else ''}"
                             f"{str(error['msg']).removeprefix('Value error, ')})") from None

    def save(self, manifest: Manifest) -> None:
        """Write the manifest (after the tables it describes) and refresh the lock's heartbeat."""
        manifest.updated_at = dt.datetime.now(dt.timezone.utc).isoformat()
        self._store.write_json(manifest.record(), *self._parts(MANIFEST))
        self._store.write_json(_lock_record(), *self._parts(LOCK))

    def lock(self) -> Optional[dict[str, Any]]:
        """The run's lock record (host, pid, start, heartbeat); None when the run holds none, or
        holds one that is not a record (not UTF-8, not JSON, not an object: raylc did not write it,
        or its write was cut short). A store that cannot be read is still an error."""
        try:
            held = self._store.read_json(*self._parts(LOCK))
        except StoreUnavailable:
            raise
        except StoreError:
            return None
        return held if isinstance(held, dict) else None

    def acquire(self) -> None:
        """Take the run's lock; refuse (:class:`RunError`) while another live process holds it.

        Two processes that start together never both take it: with no lock there, a local store
        creates it in one atomic step (:meth:`Store.create_json`); a stale lock, or any lock on
        S3, is written, read back after :data:`LOCK_SETTLE_S` and kept only if still this
        process's (the last writer wins, and every writer reads the same last one)."""
        held = self.lock()
        if held is None and self._store.create_json(_lock_record(), *self._parts(LOCK)):
            self._beat()
            return
        held = self.lock() if held is None else held  # another process may have just created it
        if held and lock_alive(held):
            raise self._in_use(held)
        record = _lock_record()
        self._store.write_json(record, *self._parts(LOCK))
        if not (held and _owner(held) == _owner(record)):  # taken over, or created on S3: did it stay ours?
            time.sleep(LOCK_SETTLE_S)
            now = self.lock()
            if not now or _owner(now) != _owner(record):
                raise self._in_use(now or {})
        self._beat()

    def _in_use(self, held: dict[str, Any]) -> RunError:
        return RunError(f"{self.uri()}: run is in use by pid {held.get('pid')} on {held.get('host')} "
                        f"since {held.get('started_at')} (lock {LOCK}); wait for it or choose another --run-id")

    def _beat(self) -> None:
        """Rewrite the lock every :data:`LOCK_BEAT_S` on a daemon thread until :meth:`release`: a
        stage that writes nothing for longer than :data:`LOCK_STALE_S` (a long batch, the wait for
        a GPU node) still shows a live owner to other hosts, which would take a stale lock over."""
        earlier = _BEATS.pop(self.uri(LOCK), None)
        if earlier is not None:  # the same run taken again by this process: one timer
            earlier.stop()
        _BEATS[self.uri(LOCK)] = _Heartbeat(lambda: self._store.write_json(_lock_record(), *self._parts(LOCK)),
                                            f"raylc-lock-{self.run_id}")

    def release(self) -> None:
        """Stop the lock's timer, then remove the lock if this process holds it. A store that
        fails here is left to the error already on its way (or to the lock's staleness)."""
        beat = _BEATS.pop(self.uri(LOCK), None)
        if beat is not None:
            beat.stop()
        with suppress(StoreError):
            held = self.lock()
            if held and held.get("pid") == os.getpid() and held.get("host") == socket.gethostname():
                self.delete(LOCK)

    # ---- requests and checkpoint shards (raylc.run.checkpoint) ------------------------------
    def write_requests(self, chunks: Iterable[pl.DataFrame], part_rows: int) -> tuple[str, ...]:
        """Pending request rows as the request table, in files of ``part_rows`` rows; their run-relative paths."""
        return checkpoint.write_requests(self, chunks, part_rows)

    def drop_requests(self) -> None:
        self.delete(checkpoint.REQUEST_DIR)

    def shard_writer(self, max_rows: int, max_seconds: float, on_flush: Optional[Callable[[pl.DataFrame], None]] = None,
                     shards: str = SHARDS) -> checkpoint.ShardWriter:
        """The writer of completions into checkpoint shards under ``shards``."""
        return checkpoint.ShardWriter(self, max_rows, max_seconds, on_flush, shards)

    def completed(self, shards: str = SHARDS) -> checkpoint.Completed:
        """The requests stored with a completion, which a resumed run skips."""
        return checkpoint.Completed(checkpoint.completed_keys(self, shards))

    def completions(self, shards: str = SHARDS) -> pl.DataFrame:
        """Every stored completion, one row per request id (a success preferred over an error)."""
        return checkpoint.load_completions(self, shards)

    def shards(self, shards: str = SHARDS) -> Iterator[pl.DataFrame]:
        """The stored checkpoint shards, one frame each."""
        return checkpoint.iter_shards(self, shards)

    def accounting(self, reused: int, shards: str = SHARDS) -> tuple[dict[str, Optional[int]], Optional[str]]:
        """The counts of the completions under ``shards`` (default: the infer stage's), and one
        error of a request that never succeeded."""
        return checkpoint.stored_accounting(self, reused, shards)


def check_store(root: str) -> None:
    """A local store must be a folder this process can write (it is created when missing): else
    one :class:`RunError` line, before anything runs or is written. An ``s3://`` store is checked
    by the run's first write (:class:`NothingWritten`); a ``file://`` one is a local folder."""
    store = Store(root)
    if store.is_s3:
        return
    path = os.path.abspath(store.path())
    near = path
    while not os.path.exists(near) and os.path.dirname(near) != near:
        near = os.path.dirname(near)  # the folder the store will be created in
    if not os.path.isdir(near):
        what = "is a file" if near == path else f"is inside a file ({near})"
        raise RunError(f"{root}: the store {what}, not a folder (store.path or --store); nothing was written")
    if not os.access(near, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(near).f_flag & os.ST_RDONLY)
        why = "read-only file system" if read_only else "permission denied"
        where = "" if near == path else f" ({near})"
        raise RunError(f"{root}: the store is not writable{where}: {why}; nothing was written")


def store_kind(root: str) -> str:
    """What a store's root is: ``folder``, ``missing`` or ``file`` (:meth:`Store.kind`); an
    ``s3://`` root is always a folder (a prefix exists once written to)."""
    store = Store(root)
    return "folder" if store.is_s3 else store.kind()


def run_folders(root: str) -> list[RunFolder]:
    """The folders under a store's root (runs or not), in name order."""
    return [RunFolder(root, name) for name in Store(root).folders()]

