"""Hashes of every table a same-seed run writes: the check that a refactoring changes no result.

Runs ``jobs/quickstart.yaml`` and ``jobs/helmet-recall.yaml`` (the simulated probe; local Ray)
through the CLI into a fresh store, then prints one JSON object ``{job: {table path: sha256}}``
over the tables under each run (:func:`hashes`).
Run it before and after a change and diff the two outputs::

    .venv/bin/python tests/benchmarks/table_hashes.py > /tmp/before.json
    # ... change the code ...
    .venv/bin/python tests/benchmarks/table_hashes.py > /tmp/after.json && diff /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = ("quickstart", "helmet-recall")


def hashes(run_dir: Path) -> dict[str, str]:
    """sha256 of each table's bytes; the checkpoint shards of the infer stage and of judge calls
    (named by a random id, rows in the order they finished) each as one table sorted by every
    column, hashed by its CSV text."""
    import polars as pl

    shard_dirs = ("infer", "judge")
    out = {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(run_dir.rglob("*.parquet")) if not set(shard_dirs) & set(p.relative_to(run_dir).parts)}
    for name in shard_dirs:
        shards = sorted((run_dir / name).rglob("*.parquet"))
        if shards:
            rows = pl.read_parquet(shards, hive_partitioning=True)
            rows = rows.select(sorted(rows.columns))
            out[f"{name}/* (sorted rows)"] = hashlib.sha256(rows.sort(rows.columns).write_csv().encode()).hexdigest()
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options; --help
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in JOBS:
            store = Path(tmp) / name
            cmd = [sys.executable, "-m", "raylc", "run", str(ROOT / "jobs" / f"{name}.yaml"),
                   "--store", str(store), "--run-id", "same"]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=1800)
            if done.returncode != 0:
                sys.exit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
            out[name] = hashes(store / "same")
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
