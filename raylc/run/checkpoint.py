"""Row-level checkpoints for inference: request keys, the request table, atomic shards, resume.

A request id is a hash of what determines its completion: for a DOLCE span, of the probe
configuration (backend, model, sampling parameters, seed), the problem's content (units and
question) and the span (C, start), made by the family's stages; for a judge call, of the judge's
configuration and the prompt (:func:`prompt_request_ids`). The same prompt sent to the same
model with the same sampling always has the same id. Completions are written as Parquet
shards, hive-partitioned by task (``infer/task=<task>/part-<attempt>-<n>.parquet``; the task is a
safe name, :func:`raylc.io.names.path_segment`, so the folder's value is the task itself), each
an atomic write, as they stream out of the actor pool; a re-run skips every request that already
has a completion (a failed request, stored with its ``error``, is tried again).

Every function takes the run's folder (:class:`raylc.run.folder.RunFolder`), which calls them.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

import numpy as np
import polars as pl

from raylc.backends.base import GENERATION
from raylc.io.names import path_segment
from raylc.io.schemas import TableSchema, declare, stored_table

if TYPE_CHECKING:
    from raylc.run.folder import RunFolder

SHARD_DIR = "infer"

_REQUEST_COLUMNS = ("the request's columns but `task`, which names the folder (DOLCE: the span and `request_id`; "
                    "length runs and judge calls: their request table's)")
#: the checkpoint shards of the probe's and of the judge's requests
SHARDS = (
    TableSchema("infer", "infer/task=<task>/part-<attempt>-<n>.parquet", (
        "The probe's completions, checkpointed as they stream in (hive-partitioned by task; a request stored twice "
        "keeps one success: the newest attempt's, the last in the shards' name order)."), GENERATION,
        extra=_REQUEST_COLUMNS),
    TableSchema("judge", "judge/task=judge/part-<attempt>-<n>.parquet", (
        "A length run's judge calls (100-LongBench's judged tasks), checkpointed like the probe's."), GENERATION,
        extra=_REQUEST_COLUMNS),
)
_SHARD_OF = {schema.path.split("/")[0]: schema for schema in SHARDS}  # by folder: infer, judge
#: the shard columns every reader needs (the others are counts, which a shard of an earlier
#: raylc may lack), checked in each shard as it is read
SHARD_READ = ("completion", "error")
#: the request table of judge calls (the families declare their own)
JUDGE_REQUESTS = TableSchema("judge requests", "requests/<attempt>/part-<n>.parquet", (
    "A length run's pending judge calls (removed when the stage ends)."), declare(
    ("request_id", pl.String, "The call's id: a hash of the judge's settings and the prompt."),
    ("task", pl.String, "`judge`."),
    ("head", pl.String, "Empty: the prompt is whole in `context`."),
    ("context", pl.String, "The judge prompt."),
    ("tail", pl.String, "Empty.")))


def _shard_files(folder: RunFolder, shards: str, checked: bool = False) -> list[str]:
    """Run-relative paths of every readable shard under ``shards``, in name order; ``checked``:
    each one's :data:`SHARD_READ` columns checked from the same footer (a :class:`StoreError`
    naming the shard).

    Unreadable shards (cut off by a crash mid-write on a filesystem without atomic rename)
    are deleted, so their requests run again.
    """
    good = []
    schema = _SHARD_OF[shards.split("/")[0]].only(SHARD_READ)
    for rel in folder.parquet_files(shards):
        meta = folder.footer(rel)
        if meta is None:
            folder.delete(rel)
            continue
        if checked:
            folder.check_declared(schema, rel=rel, meta=meta)
        good.append(rel)
    return good


def iter_shards(folder: RunFolder, shards: str = SHARD_DIR,
                columns: Optional[list[str]] = None) -> Iterator[pl.DataFrame]:
    """Each stored shard, one at a time, with its hive columns (``task``): memory holds one
    shard, never the whole stage. ``columns``: read only these (hive columns are always added)."""
    schema = _SHARD_OF[shards.split("/")[0]].only(columns or SHARD_READ)
    for rel in _shard_files(folder, shards):
        hive = [seg.split("=", 1) for seg in rel.split("/")[1:-1] if "=" in seg]
        frame = stored_table(schema, folder.read(rel, columns=columns), folder.uri(rel))
        yield frame.with_columns(pl.lit(v, pl.String).alias(k) for k, v in hive)


def request_keys(ids: pl.Series) -> np.ndarray:
    """64-bit keys of request ids (Polars' hash, the same for equal ids within a process):
    the resume check and the accounting hold 8 bytes per stored request, not the id strings.
    Two ids share a key with probability about n^2 / 2^65 (3e-8 for a million requests)."""
    return ids.hash(seed=0).to_numpy()


def prompt_request_ids(fingerprint: str, prompts: pl.Series) -> pl.Series:
    """Request ids of whole prompts sent to the probe whose :meth:`raylc.spec.Job.probe_fingerprint`
    is ``fingerprint`` (judge calls)."""
    return pl.Series("request_id", [hashlib.blake2b(f"{fingerprint}|{p}".encode(), digest_size=12).hexdigest()
                                    for p in prompts], dtype=pl.String)


def completed_keys(folder: RunFolder, shards: str = SHARD_DIR) -> np.ndarray:
    """Sorted unique :func:`request_keys` of the requests with a stored success (the requests a
    resumed run skips), read shard by shard."""
    keys = [request_keys(shard.filter(pl.col("error").is_null())["request_id"])
            for shard in iter_shards(folder, shards, ["request_id", "error"])]
    return _sorted_unique(keys)


def _sorted_unique(parts: list[np.ndarray]) -> np.ndarray:
    """``numpy.unique`` of the concatenated key arrays, sorted in place (a fraction of its
    transient memory)."""
    keys = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    keys.sort()
    return keys[np.r_[True, keys[1:] != keys[:-1]]] if keys.size else keys


def is_completed(ids: pl.Series, keys: np.ndarray) -> pl.Series:
    """Which of ``ids`` are among the sorted unique ``keys`` (of :func:`completed_keys`)."""
    k = request_keys(ids)
    if not keys.size:
        return pl.Series(np.zeros(k.size, dtype=bool))
    return pl.Series(keys[np.minimum(np.searchsorted(keys, k), keys.size - 1)] == k)


class Completed:
    """The requests stored with a completion, as sorted unique 64-bit keys (:func:`completed_keys`):
    ``len()`` of them, and :meth:`among` which of some ids they hold."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys

    def __len__(self) -> int:
        return int(self.keys.size)

    def among(self, ids: pl.Series) -> pl.Series:
        """Which of ``ids`` are completed (:func:`is_completed`)."""
        return is_completed(ids, self.keys)


def load_completions(folder: RunFolder, shards: str = SHARD_DIR) -> pl.DataFrame:
    """Every stored completion, one row per request id (a success preferred over an error).

    Unreadable shards are deleted first (see :func:`_shard_files`).
    """
    # each shard's own columns checked: read together, a column one shard lacks would be nulls
    if not _shard_files(folder, shards, checked=True):
        return pl.DataFrame()
    table = folder.read(shards)
    return (
        table.with_columns(_ok=pl.col("error").is_null())
        .sort("request_id", "_ok", maintain_order=True)
        .unique("request_id", keep="last", maintain_order=True)
        .drop("_ok")
    )


REQUEST_DIR = "requests"


def attempt_id() -> str:
    """A new attempt's name in shard and part names: its UTC start to the microsecond, then 6
    random hex digits, so that name order is start order (the newest attempt's shards read last)."""
    now = time.time_ns() // 1000
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now // 10**6))}{now % 10**6:06d}-{uuid.uuid4().hex[:6]}"


def write_requests(folder: RunFolder, chunks: Iterable[pl.DataFrame], part_rows: int) -> tuple[str, ...]:
    """Pending request rows as Parquet parts of ``part_rows`` rows,
    ``requests/<attempt>/part-<n>.parquet`` (run-relative paths, in order), written chunk by
    chunk: the driver holds one chunk. A part is one Ray Data block, so it bounds how much work
    finishes before its completions reach the shards."""
    attempt = attempt_id()
    files = []
    n = 0
    for chunk in chunks:
        for i in range(0, chunk.height, part_rows):
            rel = f"{REQUEST_DIR}/{attempt}/part-{n:05d}.parquet"
            folder.write(chunk.slice(i, part_rows), rel)
            files.append(rel)
            n += 1
    return tuple(files)


class ShardWriter:
    """Collects completion batches and writes them as atomic shards per task under ``shards``."""

    def __init__(self, folder: RunFolder, max_rows: int, max_seconds: float,
                 on_flush: Optional[Callable[[pl.DataFrame], None]] = None, shards: str = SHARD_DIR):
        self.folder, self.shards_dir, self.on_flush = folder, shards, on_flush
        self.max_rows, self.max_seconds = max_rows, max_seconds
        self.attempt = attempt_id()
        self.pending: list[pl.DataFrame] = []
        self.rows = 0
        self.shards = 0
        self.last = time.monotonic()

    def add(self, batch: pl.DataFrame) -> None:
        self.pending.append(batch)
        self.rows += batch.height
        if self.rows >= self.max_rows or time.monotonic() - self.last >= self.max_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows as shard ``self.shards`` (one file per task). Safe to call again
        after a signal interrupted it (the driver flushes on SIGINT): until every file is stored
        the pending rows stay and a second call rewrites the same names; the one store of
        ``self.pending = []`` commits, after which a second call writes nothing. Rows are never
        stored twice."""
        if not self.pending:
            return
        frame = pl.concat(self.pending, how="vertical_relaxed")
        parts = frame.partition_by("task", as_dict=True, maintain_order=True)
        for (task,) in parts:  # every task checked before any shard is written (raises UnsafeName)
            path_segment(task, "task")
        name = f"part-{self.attempt}-{self.shards:05d}.parquet"
        for (task,), part in parts.items():
            self.folder.write(part.drop("task"), f"{self.shards_dir}/task={task}/{name}")
        self.pending = []  # the commit: one attribute store
        self.rows, self.shards, self.last = 0, self.shards + 1, time.monotonic()
        if self.on_flush is not None:  # after the shards are stored (progress, heartbeat)
            self.on_flush(frame)


TOKEN_COUNTS = ("prompt_tokens", "generated_tokens", "cached_tokens", "truncated_tokens")  #: summed per stage
#: counts a backend may not report (null): unknown, not 0, unless some row reports them
#: (vLLM's OpenAI server sends no cached_tokens without --enable-prompt-tokens-details)
REPORTED_COLUMNS = ("cached_tokens",)


def _total(column: pl.Series) -> Optional[int]:
    """The sum of a token column over successful rows; None (unknown) for a :data:`REPORTED_COLUMNS`
    column that none of them reports (no rows: 0)."""
    if column.name in REPORTED_COLUMNS and column.len() and column.null_count() == column.len():
        return None
    return int(column.sum() or 0)


def accounting(completions: pl.DataFrame, reused: int) -> dict[str, Optional[int]]:
    """Requests, tokens and errors of the stage, for the manifest and the end-of-stage table;
    ``cached_tokens`` sums the successful rows that report it, None when there are some and none does."""
    ok = completions.filter(pl.col("error").is_null())
    return {
        "requests": completions.height,
        "reused": reused,
        "errors": completions.height - ok.height,
        **{c: _total(ok[c]) for c in TOKEN_COUNTS},
    }


def sent_tokens(folder: RunFolder, shards: str = SHARD_DIR) -> tuple[int, int]:
    """Prompt tokens the run has sent under ``shards`` (the backend's count), read in one pass:
    each stored success's once (a request stored twice counts once) and each stored failure's
    that the server answered (the row has a ``finish_reason``: an empty completion, a content
    filter), whose prompt was processed however often the request is sent again; a request
    refused, timed out or never sent has none. And the number of stored successes. The token
    cap's count (:meth:`raylc.run.runner.Run._sent`)."""
    answered, keys, tokens = 0, [], []
    for shard in iter_shards(folder, shards, ["request_id", "error", "finish_reason", "prompt_tokens"]):
        failed = pl.col("error").is_not_null()
        answered += int(shard.filter(failed & pl.col("finish_reason").is_not_null())["prompt_tokens"].sum() or 0)
        ok = shard.filter(~failed)
        keys.append(request_keys(ok["request_id"]))
        tokens.append(ok["prompt_tokens"].fill_null(0).cast(pl.Int64).to_numpy())
    if not keys:
        return answered, 0
    _, first = np.unique(np.concatenate(keys), return_index=True)
    return answered + int(np.concatenate(tokens)[first].sum()), int(first.size)


def stored_accounting(folder: RunFolder, reused: int,
                      shards: str = SHARD_DIR) -> tuple[dict[str, Optional[int]], Optional[str]]:
    """:func:`accounting` of the completions stored under ``shards``, computed shard by shard
    (memory holds an 8-byte key per request, not the completions), and the error of one request
    that never succeeded (None when none failed). Falls back to :func:`load_completions` if a
    success was stored twice."""
    totals: Counter[str] = Counter()
    told: dict[str, bool] = {}  # a REPORTED_COLUMNS column: whether a success reported it (absent: no success)
    ok_keys, failed = [], []
    for shard in iter_shards(folder, shards, ["request_id", "error", *TOKEN_COUNTS]):
        ok = shard.filter(pl.col("error").is_null())
        part = accounting(ok, 0)
        for c in REPORTED_COLUMNS if ok.height else ():
            told[c] = told.get(c, False) or part[c] is not None
        totals.update({k: v for k, v in part.items() if v is not None})
        ok_keys.append(request_keys(ok["request_id"]))
        failed.append(shard.filter(pl.col("error").is_not_null()).select("request_id", "error"))
    done = _sorted_unique(ok_keys)
    if done.size != sum(k.size for k in ok_keys):
        completions = load_completions(folder, shards)
        errors = completions.filter(pl.col("error").is_not_null())["error"]
        return accounting(completions, reused), (errors[0] if errors.len() else None)
    errors = (pl.concat(failed).unique("request_id", keep="first", maintain_order=True) if failed
              else pl.DataFrame(schema={"request_id": pl.String, "error": pl.String}))
    errors = errors.filter(~is_completed(errors["request_id"], done))
    rows = {"requests": done.size + errors.height, "reused": reused, "errors": errors.height,
            **{c: None if told.get(c) is False else totals[c] for c in TOKEN_COUNTS}}
    return rows, (errors["error"][0] if errors.height else None)
