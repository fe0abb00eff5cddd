"""Row-level checkpoints for inference: stable request ids, atomic shards, resume.

A request id is a hash of the probe configuration (backend, model, sampling parameters,
seed), the problem's content (units and question) and the span (C, start): the same
prompt sent to the same model with the same sampling always has the same id. Completions
are written as Parquet shards, hive-partitioned by task
(``infer/task=<task>/part-<attempt>-<n>.parquet``), each an atomic write, as they stream
out of the actor pool; a re-run skips every request that already has a completion (a
failed request, stored with its ``error``, is tried again).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import polars as pl

from raylc.spec import Job
from raylc.store import Store

SHARD_DIR = "infer"


def probe_fingerprint(job: Job) -> str:
    """What determines a completion besides the prompt: the whole probe section and the seed."""
    data = {"probe": job.probe.model_dump(mode="json"), "seed": job.seed}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def with_request_ids(spans: pl.DataFrame, problems: pl.DataFrame, job: Job) -> pl.DataFrame:
    """``spans`` plus ``request_id`` = hash(probe fingerprint, problem content, C, start)."""
    content = pl.DataFrame(
        {
            "problem_id": problems["problem_id"],
            "_content": [
                hashlib.blake2b(("\x1f".join(units) + "\x1e" + question).encode(), digest_size=16).hexdigest()
                for units, question in zip(problems["units"].to_list(), problems["question"].to_list())
            ],
        },
        schema={"problem_id": pl.String, "_content": pl.String},
    )
    key = pl.concat_str(
        [pl.lit(probe_fingerprint(job)), pl.col("problem_id"), pl.col("_content"),
         pl.col("C").cast(pl.String), pl.col("start").cast(pl.String)],
        separator="|",
    )
    return (
        spans.join(content, on="problem_id", how="left", maintain_order="left")
        .with_columns(request_id=key.map_batches(_sha, return_dtype=pl.String))
        .drop("_content")
    )


def _sha(keys: pl.Series) -> pl.Series:
    return pl.Series([hashlib.blake2b(k.encode(), digest_size=12).hexdigest() for k in keys], dtype=pl.String)


def load_completions(store: Store, run_id: str) -> pl.DataFrame:
    """Every stored completion, one row per request id (a success preferred over an error).

    Unreadable shards (cut off by a crash mid-write on a filesystem without atomic rename)
    are deleted, so their requests run again.
    """
    files = store.parquet_files(run_id, SHARD_DIR)
    good = []
    for f in files:
        rel = f[len(store.path(run_id)) + 1:].split("/")
        if store.table_ok(run_id, *rel):
            good.append(rel)
        else:
            store.delete(run_id, *rel)
    if not good:
        return pl.DataFrame()
    table = store.read_table(run_id, SHARD_DIR)
    return (
        table.with_columns(_ok=pl.col("error").is_null())
        .sort("request_id", "_ok", maintain_order=True)
        .unique("request_id", keep="last", maintain_order=True)
        .drop("_ok")
    )


class ShardWriter:
    """Collects completion batches and writes them as atomic shards per task."""

    def __init__(self, store: Store, run_id: str, max_rows: int, max_seconds: float):
        self.store, self.run_id = store, run_id
        self.max_rows, self.max_seconds = max_rows, max_seconds
        self.attempt = uuid.uuid4().hex[:8]
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
        if not self.pending:
            return
        frame = pl.concat(self.pending, how="vertical_relaxed")
        for (task,), part in frame.partition_by("task", as_dict=True, maintain_order=True).items():
            name = f"part-{self.attempt}-{self.shards:05d}.parquet"
            self.store.write_table(part.drop("task"), self.run_id, SHARD_DIR, f"task={task}", name)
        self.shards += 1
        self.pending, self.rows, self.last = [], 0, time.monotonic()


def accounting(completions: pl.DataFrame, reused: int) -> dict[str, int]:
    """Requests, tokens and errors of the stage, for the manifest and the end-of-stage table."""
    ok = completions.filter(pl.col("error").is_null())
    return {
        "requests": completions.height,
        "reused": reused,
        "errors": completions.height - ok.height,
        "prompt_tokens": int(ok["prompt_tokens"].sum() or 0),
        "generated_tokens": int(ok["generated_tokens"].sum() or 0),
        "cached_tokens": int(ok["cached_tokens"].fill_null(0).sum() or 0),
        "truncated_tokens": int(ok["truncated_tokens"].sum() or 0),
    }
