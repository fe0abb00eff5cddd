"""The one module that knows where tables live: a local folder or ``s3://bucket/prefix``.

Everything goes through :mod:`pyarrow.fs`, so the same code writes locally and to S3
(credentials from the standard AWS chain; ``AWS_ENDPOINT_URL`` for S3-compatible
services). Writes are atomic: a table is written to a temporary name and renamed into
place, so a reader never sees a partial file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional, Union

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from raylc.io.errors import StoreError, StoreUnavailable, why_unreadable

__all__ = ["Store", "StoreError", "StoreUnavailable", "json_records", "locate", "read_input"]


@contextlib.contextmanager
def _io(where: str) -> Iterator[None]:
    """Turn filesystem errors into one line naming ``where``: a file where a folder belongs (or
    the reverse) is bad input (:class:`StoreError`), anything else :class:`StoreUnavailable`."""
    try:
        yield
    except StoreError:
        raise
    except (NotADirectoryError, FileExistsError, IsADirectoryError) as exc:
        what = ("a folder where a file belongs" if isinstance(exc, IsADirectoryError)
                else "a file where a folder belongs")
        raise StoreError(f"{where}: {what} ({exc.strerror or type(exc).__name__})") from None
    except OSError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if detail.endswith("is a directory"):  # pyarrow's local filesystem: a plain OSError, no errno
            raise StoreError(f"{where}: a folder where a file belongs") from None
        raise StoreUnavailable(f"{where}: storage error: {detail}") from None


def check_address(uri: str) -> None:
    """A :class:`StoreError` unless ``uri`` is a store address (a folder, or ``s3://bucket[/prefix]``);
    nothing is contacted (``raylc submit``: the store is the cluster's)."""
    _split(uri)


def _split(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of a store address; an empty or malformed one is :class:`StoreError`."""
    if not uri.strip():
        raise StoreError("the store path is empty: give a folder or an s3://bucket/prefix URI")
    if "://" in uri:
        if uri.startswith("s3://"):
            if not uri[len("s3://"):].split("/", 1)[0]:
                raise StoreError(f"{uri}: no bucket: give s3://bucket/prefix")
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            kwargs: dict[str, Any] = {}
            if endpoint:
                scheme, _, host = endpoint.partition("://")
                kwargs.update(endpoint_override=host or scheme, scheme=scheme if host else "https")
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                kwargs["region"] = region
            try:
                return pafs.S3FileSystem(**kwargs), uri[len("s3://"):].rstrip("/")
            except ValueError as exc:  # ArrowInvalid: e.g. an endpoint scheme S3 does not speak
                raise StoreError(f"{uri}: AWS_ENDPOINT_URL {endpoint!r}: {exc}") from None
        if not uri.startswith("file://"):  # pyarrow would open gs://, hdfs://, abfs://, mock:// too
            raise StoreError(f"{uri}: not a store address: give a folder (or file://) or s3://bucket/prefix")
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
        except ValueError as exc:  # pyarrow's ArrowInvalid: a malformed file:// URI
            raise StoreError(f"{uri}: not a store address ({exc}); give a folder or s3://bucket/prefix") from None
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def json_records(uri: str, data: bytes) -> list[tuple[str, Any]]:
    """The one parser of users' JSON files: ``(where, record)`` pairs of a JSON list (``record i``,
    from 0) or of JSON Lines (``line n``, from 1; blank lines skipped). Bad UTF-8 or a syntax
    error raises :class:`StoreError`, one line naming ``uri`` and the line (and column)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise StoreError(f"{uri}: line {line}: not UTF-8 text (byte {exc.start})") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{uri}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{uri}: unreadable JSON ({why_unreadable(exc)})") from None
        return [(f"record {i}", item) for i, item in enumerate(items)]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise StoreError(f"{uri}: line {n}: invalid JSON at column {exc.colno}: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{uri}: line {n}: unreadable JSON ({why_unreadable(exc)})") from None
    return out


def _kind(value: Any) -> str:
    return ("a list" if isinstance(value, list) else "an object" if isinstance(value, dict)
            else "text" if isinstance(value, str) else "a number or a boolean")


def _mixed_kinds(uri: str, records: list[tuple[str, Any]]) -> None:
    """A :class:`StoreError` naming the first field whose JSON kind (list, object, text, scalar)
    differs from the kind it has in an earlier record, if there is one."""
    first: dict[str, tuple[str, str]] = {}
    for where, record in records:
        for key, value in record.items():
            if value is None:
                continue
            kind = _kind(value)
            seen = first.setdefault(key, (kind, where))
            if seen[0] != kind:
                raise StoreError(f"{uri}: {where}: field {key!r} holds {kind} where {seen[1]} holds {seen[0]}")


def _temp_beside(final: str) -> tuple[str, str]:
    """(the folder of ``final``, a new temporary dot-name beside it, which readers skip)."""
    parent, name = final.rsplit("/", 1)
    return parent, f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"


def locate(uri: str) -> tuple["Store", str]:
    """The store holding the file or folder ``uri`` names (a local path or URI), and its name there.
    An address that names no file (empty, a bare bucket, a malformed URI) is :class:`StoreError`."""
    path = uri.rstrip("/")
    _, sep, rest = path.partition("://")
    if sep and "/" not in rest:
        _split(path)  # a malformed URI or an unknown scheme says so
        raise StoreError(f"{uri}: names a bucket, not a file or folder in it")
    root, _, name = path.rpartition("/")
    if not name:
        raise StoreError(f"{uri!r}: names no file or folder")
    return Store(root or ("/" if path.startswith("/") else ".")), name


def read_input(uri: str) -> pl.DataFrame:
    """Read a user's input table (Parquet, CSV, JSON Lines, or ``.json``: a list of objects or one
    object, as RULER publishes its essay haystack ``PaulGrahamEssays.json``) from a local path or
    s3:// URI. A JSON syntax error names its line (:func:`json_records`)."""
    store, name = locate(uri)
    if not store.exists(name):
        raise StoreError(f"{uri}: no such file")
    if name.endswith(".parquet") or store.fs.get_file_info(store.path(name)).type == pafs.FileType.Directory:
        return store.read_table(name)
    with store.open_input(name) as fh:
        data = fh.read()
    try:
        if name.endswith(".csv"):
            return pl.read_csv(io.BytesIO(data), infer_schema_length=None)
        if name.endswith((".json", ".jsonl", ".ndjson")):
            # parsed here, not by pl.read_ndjson, which turns a field holding a list in one row and
            # text in another into text; every row decides the schema (a field may first appear late)
            records = json_records(uri, data)
            for where, record in records:
                if not isinstance(record, dict):
                    raise StoreError(f"{uri}: {where}: expected a JSON object, got {type(record).__name__}")
            try:
                return pl.DataFrame([record for _, record in records], infer_schema_length=None)
            except pl.exceptions.PolarsError:
                _mixed_kinds(uri, records)
                raise
    except pl.exceptions.PolarsError as exc:
        raise StoreError(f"{uri}: cannot parse ({str(exc).splitlines()[0]})") from None
    raise StoreError(f"{uri}: unsupported format (use .parquet, .csv, .jsonl or .json)")


@dataclass(frozen=True)
class Store:
    """A root folder (local path or URI) holding runs: ``<root>/<run_id>/<stage>/``."""

    root: str

    def __post_init__(self) -> None:
        fs, base = _split(self.root)
        object.__setattr__(self, "_fs", fs)
        object.__setattr__(self, "_base", base)

    @property
    def fs(self) -> pafs.FileSystem:
        return self._fs  # type: ignore[attr-defined]

    def path(self, *parts: str) -> str:
        """Filesystem path of ``parts`` under the root."""
        return "/".join([self._base, *parts])  # type: ignore[attr-defined]

    def uri(self, *parts: str) -> str:
        """User-facing location of ``parts`` (what to open in Polars or DuckDB)."""
        return "/".join([self.root.rstrip("/"), *parts])

    def exists(self, *parts: str) -> bool:
        with _io(self.uri(*parts)):
            return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def kind(self, *parts: str) -> str:
        """What is at ``parts``: ``folder``, ``file`` or ``missing``."""
        with _io(self.uri(*parts)):
            found = self.fs.get_file_info(self.path(*parts)).type
        return {pafs.FileType.Directory: "folder", pafs.FileType.NotFound: "missing"}.get(found, "file")

    @property
    def is_s3(self) -> bool:
        return isinstance(self.fs, pafs.S3FileSystem)

    def _write_bytes(self, data: bytes, *parts: str) -> None:
        """Atomic write: an S3 PUT is atomic by itself; locally through :meth:`open_output`."""
        if self.is_s3:
            with _io(self.uri(*parts)), self.fs.open_output_stream(self.path(*parts)) as out:
                out.write(data)
            return
        with self.open_output(*parts) as out:
            out.write(data)

    @contextlib.contextmanager
    def open_output(self, *parts: str) -> Iterator[Any]:
        """A stream to a new file at ``parts`` that appears whole or not at all: written under a
        temporary dot-name beside it (which readers skip), renamed into place when the block
        ends (on S3 a server-side copy), removed if the block raises. For files written piece by
        piece, so that memory never holds the whole file."""
        final = self.path(*parts)
        parent, tmp = _temp_beside(final)
        with _io(self.uri(*parts)):
            if not self.is_s3:
                self.fs.create_dir(parent, recursive=True)
            try:
                with self.fs.open_output_stream(tmp) as out:
                    yield out
                self.fs.move(tmp, final)
            except BaseException:
                if self.fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                    self.fs.delete_file(tmp)
                raise

    def write_table(self, df: pl.DataFrame, *parts: str, row_group_size: Optional[int] = None) -> str:
        """Write ``df`` as one Parquet file at ``parts`` atomically (``row_group_size`` rows per
        row group, else Polars' default); return its URI."""
        buf = io.BytesIO()
        df.write_parquet(buf, compression="zstd", statistics=True, row_group_size=row_group_size)
        self._write_bytes(buf.getvalue(), *parts)
        return self.uri(*parts)

    def read_table(self, *parts: str, columns: Optional[list[str]] = None) -> pl.DataFrame:
        """Read one Parquet file, or every ``*.parquet`` file of a folder in name order
        (``columns``: only these)."""
        with _io(self.uri(*parts)):
            return self._read_table(self.path(*parts), self.uri(*parts), columns)

    def parquet_files(self, *parts: str) -> list[str]:
        """Parquet files of a table: the file itself, or every ``*.parquet`` below a folder
        (hive ``key=value`` sub-folders included), in name order; dot-files are skipped."""
        with _io(self.uri(*parts)):
            return self._files(self.path(*parts))

    def folders(self, *parts: str) -> list[str]:
        """Names of the folders directly under ``parts`` (dot-folders skipped), sorted."""
        with _io(self.uri(*parts)):
            target = self.path(*parts)
            if self.fs.get_file_info(target).type != pafs.FileType.Directory:
                return []
            found = self.fs.get_file_info(pafs.FileSelector(target, recursive=False))
        return sorted(f.base_name for f in found if f.type == pafs.FileType.Directory
                      and not f.base_name.startswith("."))

    def _files(self, target: str) -> list[str]:
        info = self.fs.get_file_info(target)
        if info.type == pafs.FileType.NotFound:
            return []
        if info.type != pafs.FileType.Directory:
            return [target]
        found = self.fs.get_file_info(pafs.FileSelector(target, recursive=True))
        return sorted(
            f.path for f in found
            if f.type == pafs.FileType.File and f.path.endswith(".parquet")
            and not any(seg.startswith(".") for seg in f.path[len(target):].split("/"))
        )

    def _read_table(self, target: str, uri: str, columns: Optional[list[str]] = None) -> pl.DataFrame:
        info = self.fs.get_file_info(target)
        if info.type == pafs.FileType.NotFound:
            raise StoreError(f"{uri}: no such table")
        files = self._files(target)
        frames = []
        for f in files:
            try:  # Polars' own reader (a fraction of pyarrow's transient memory) on a local path,
                # or on the object's bytes: reading through a pyarrow stream, an S3 failure mid-read
                # would be a panic inside Polars (a Rust backtrace on stderr), not an OSError here
                if self.is_s3:
                    with self.fs.open_input_file(f) as fh:
                        frame = pl.read_parquet(io.BytesIO(fh.read()), columns=columns)
                else:
                    frame = pl.read_parquet(f, columns=columns)
            except Exception as exc:  # corrupt or truncated file: never read silently
                if isinstance(exc, OSError) and not isinstance(exc, pa.ArrowInvalid):
                    raise
                raise StoreError(f"{f}: unreadable Parquet ({type(exc).__name__}: {why_unreadable(exc)})") from None
            hive = [seg.split("=", 1) for seg in f[len(target):].split("/")[:-1] if "=" in seg]
            frames.append(frame.with_columns(pl.lit(v, pl.String).alias(k) for k, v in hive))  # type: ignore[union-attr]
        if not frames:
            raise StoreError(f"{uri}: folder holds no Parquet files")
        if len(frames) == 1:
            return frames[0]
        for name in {c for f in frames for c in f.columns}:  # numbers widen; a list or record never becomes text
            kinds = {f.schema[name] for f in frames if name in f.columns}
            if len(kinds) > 1 and any(k.is_nested() for k in kinds):
                raise StoreError(f"{uri}: its Parquet files give column {name!r} different types "
                                 f"({', '.join(sorted(map(str, kinds)))})")
        try:
            return pl.concat(frames, how="diagonal_relaxed")
        except (pl.exceptions.SchemaError, pl.exceptions.InvalidOperationError) as exc:
            raise StoreError(f"{uri}: its Parquet files disagree on a column's type ({why_unreadable(exc)})") from None

    def table_ok(self, *parts: str) -> bool:
        """True when ``parts`` is a readable Parquet file, or a folder of them (footers checked)."""
        with _io(self.uri(*parts)):
            return self._table_ok(self.path(*parts))

    def _table_ok(self, target: str) -> bool:
        files = self._files(target)
        return bool(files) and all(self._footer(f) is not None for f in files)

    def footer(self, *parts: str) -> Optional[pq.FileMetaData]:
        """The footer of the Parquet file ``parts``; None when it is corrupt or truncated."""
        with _io(self.uri(*parts)):
            return self._footer(self.path(*parts))

    def _footer(self, target: str) -> Optional[pq.FileMetaData]:
        try:
            with self.fs.open_input_file(target) as fh:
                return pq.read_metadata(fh)
        except pa.ArrowInvalid:
            return None

    def write_outputs(self, tables: Mapping[str, pl.DataFrame], files: Mapping[str, Union[bytes, str, dict]] = {},
                      *parts: str, replaces: Iterable[str] = ()) -> None:
        """A command's or a stage's results under ``parts``: each table as ``<name>.parquet``, then
        each file by its name, in order: PNG figures (bytes), pages and summaries (text),
        settings (a dict, as JSON). The caller makes them all first, so a failure leaves nothing
        half-written, and lists last what says the rest is there. ``replaces``: every output name
        the command can write; those this write does not make are removed first (an earlier
        write's ``compare.parquet`` or figure must not stay beside results it does not describe),
        and nothing else in the folder is touched."""
        made = {f"{name}.parquet" for name in tables} | set(files)
        with _io(self.uri(*parts)):
            infos = self.fs.get_file_info([self.path(*parts, name) for name in sorted(made)])
        folder = next((info.path for info in infos if info.type == pafs.FileType.Directory), None)
        if folder is not None:  # found before anything is written, not after the tables before it
            raise StoreError(f"{self.uri(*parts, os.path.basename(folder))}: a folder where a file belongs")
        for name in replaces:
            if name not in made:
                self.delete(*parts, name)
        for name, frame in tables.items():
            self.write_table(frame, *parts, f"{name}.parquet")
        for name, data in files.items():
            if isinstance(data, dict):
                self.write_json(data, *parts, name)
            else:
                self._write_bytes(data.encode() if isinstance(data, str) else data, *parts, name)

    def write_json(self, obj: Any, *parts: str) -> None:
        self._write_bytes(json.dumps(obj, indent=2, sort_keys=True, default=str).encode(), *parts)

    def create_json(self, obj: Any, *parts: str) -> bool:
        """Write ``obj`` as JSON at ``parts`` only if nothing is there, in one atomic step; True
        when this call created it. Local stores: a hard link to a whole temporary file, which
        fails when the name exists. False on S3 (no such step through this filesystem) and on a
        local filesystem without hard links: the caller then writes and reads back."""
        if self.is_s3:
            return False
        final = self.path(*parts)
        parent, tmp = _temp_beside(final)
        with _io(self.uri(*parts)):
            self.fs.create_dir(parent, recursive=True)
            with open(tmp, "wb") as out:
                out.write(json.dumps(obj, indent=2, sort_keys=True, default=str).encode())
            try:
                os.link(tmp, final)
            except OSError:  # the name exists (FileExistsError), or no hard links here
                return False
            finally:
                os.unlink(tmp)
        return True

    def read_json(self, *parts: str) -> Optional[Any]:
        text = self.read_text(*parts)
        if text is None:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:  # a syntax error, an integer past Python's 4,300 digits, nesting
            raise StoreError(f"{self.uri(*parts)}: not valid JSON ({why_unreadable(exc)})") from None

    def write_text(self, text: str, *parts: str) -> None:
        self._write_bytes(text.encode(), *parts)

    def write_bytes(self, data: bytes, *parts: str) -> None:
        self._write_bytes(data, *parts)

    def delete(self, *parts: str) -> None:
        """Remove a file or a folder (with everything under it) if it exists."""
        with _io(self.uri(*parts)):
            info = self.fs.get_file_info(self.path(*parts))
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(self.path(*parts))
            elif info.type != pafs.FileType.NotFound:
                self.fs.delete_file(self.path(*parts))

    @contextlib.contextmanager
    def open_input(self, *parts: str) -> Iterator[Any]:
        """A stored file opened for random-access reading; errors as :class:`StoreUnavailable`."""
        with _io(self.uri(*parts)), self.fs.open_input_file(self.path(*parts)) as fh:
            yield fh

    def read_text(self, *parts: str) -> Optional[str]:
        if not self.exists(*parts):
            return None
        with _io(self.uri(*parts)), self.fs.open_input_stream(self.path(*parts)) as fh:
            data = fh.read()
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise StoreError(f"{self.uri(*parts)}: not UTF-8 text (byte {exc.start})") from None
