"""Inference throughput and driver memory on the simulated probe (issue: inference at scale).

Prints, measured in one run on this machine:
  * rows/s through the run's inference path (request table in a store, Ray Data actor pool)
    with 1 and with 2 actors (10,000 requests);
  * the pipeline overhead ratio: Ray Data path time / the same stage functions in-process;
  * the driver's peak memory for a whole `raylc run` of the quickstart (results stream to
    shards, so it should not grow with the number of requests), in two series: more problems
    (5 / 45 / 450 per task: ~10,000 / ~100,000 / ~1,000,000 requests; the problems table, an
    input, grows too) and more requests for the same 200 problems (take-every 20 / 2 / 1 with
    no stride widening: ~17,000 / ~156,000 / ~310,000 requests). The figure is the peak
    private memory of the driver process (Private_* pages from /proc/self/smaps, sampled
    every 0.1 s) without the pages of Ray's shared-memory object store (/dev/shm/plasma*,
    which the kernel counts as private to whichever process touched them first; it is Ray's
    memory, capped by the object store size), and peak RSS (which counts those pages too).
    The problems series runs again with Polars' jemalloc returning freed pages at once
    (``_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0``; by default it keeps them ~10 s
    for reuse), which shows the memory actually in use.

Run: .venv/bin/python tests/benchmarks/bench_infer.py [--problems-per-task 5,45,450]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.backends.stages import PROBLEM_ROW_GROUP  # noqa: E402
from raylc.dolce import stages  # noqa: E402
from raylc.dolce.stages import with_request_ids  # noqa: E402
from raylc.run import pipeline, session  # noqa: E402
from raylc.run.folder import RunFolder  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from in_process import infer_frame  # noqa: E402

from raylc.spec import load_job  # noqa: E402

N = 10_000

PEAK = """
import resource, sys, threading, time
from raylc.evaluate import evaluate
from raylc.spec import load_job

peak = {"private": 0}
def private_kib():  # the driver's private pages, without Ray's shared-memory object store
    total, store = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:  # a mapping's header line
                store = "plasma" in line
            elif not store and head in ("Private_Clean:", "Private_Dirty:", "Private_Hugetlb:"):
                total += int(line.split()[1])
    return total
def sample():
    while True:
        peak["private"] = max(peak["private"], private_kib())
        time.sleep(0.1)
threading.Thread(target=sample, daemon=True).start()
evaluate(load_job(sys.argv[1]), "bench", log=lambda m: None)
peak["private"] = max(peak["private"], private_kib())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, peak["private"])
"""


def ray_rows_per_s(job, spans, problems) -> float:
    """Rows/s of the run's inference path: the request table written to a store, read by the
    actors, prompts rendered from the stored problems (timed from writing the table)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = RunFolder(tmp, "bench")
        folder.write(problems, "build/problems.parquet", row_group_size=PROBLEM_ROW_GROUP)
        t0 = time.perf_counter()
        files = folder.write_requests([spans], pipeline.block_rows(job))
        source = pipeline.RequestFiles(folder, files, table="build/problems.parquet")
        n = sum(b.height for b in pipeline.stream(source, job))
        rate = n / (time.perf_counter() - t0)
    assert n == spans.height
    return rate


DECAY_NOW = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}


def peak_rss_mb(overrides: dict, store: Path, env_extra: dict[str, str]) -> tuple[int, float, float]:
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    for key, value in overrides.items():
        section, field = key.split(".")
        spec[section][field] = value
    tag = f"run{len(list(store.iterdir()))}"
    spec["store"] = {"path": str(store / tag)}
    job_file = store / f"{tag}.yaml"
    job_file.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | env_extra
    out = subprocess.run([sys.executable, "-c", PEAK, str(job_file)],
                         capture_output=True, text=True, env=env, check=True)
    job = load_job(job_file)
    n = stages.sample(stages.build(job), job).height
    rss, private = out.stdout.strip().splitlines()[-1].split()
    return n, int(rss) / 1024, int(private) / 1024


def memory_series(label: str, runs: list[dict], env_extra: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        peaks = [peak_rss_mb(overrides, Path(tmp), env_extra) for overrides in runs]
    print(f"driver peak, whole run, {label}:")
    for n, rss, private in peaks:
        print(f"  {n:>9,} requests: private {private:,.0f} MiB (RSS {rss:,.0f} MiB)")
    for (n, _, private) in peaks[1:]:
        print(f"  private memory, {n:,} / {peaks[0][0]:,} requests: {private / peaks[0][2]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems-per-task", default="5,45,450",
                    help="problems per task of the first memory series (5 / 45 / 450: ~10K / ~100K / ~1M requests)")
    args = ap.parse_args()
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    problems = stages.build(job)
    spans = (with_request_ids(stages.sample(problems, job), problems, job)
             .sample(n=N, seed=0).sort("problem_id", "C", "start"))

    t0 = time.perf_counter()
    infer_frame(spans, problems, job)
    in_process = time.perf_counter() - t0

    session.ensure_ray(job)
    rates = {}
    for actors in (1, 2):
        j = job.model_copy(update={"ray": job.ray.model_copy(update={"actors": actors})})
        ray_rows_per_s(j, spans.head(1000), problems)  # warm-up: actor start, imports
        rates[actors] = ray_rows_per_s(j, spans, problems)
    print(f"requests: {N:,} (simulated probe, {os.cpu_count()} cores)")
    print(f"in-process stage functions: {N / in_process:,.0f} rows/s")
    for actors, rate in rates.items():
        print(f"Ray Data actor pool, {actors} actor(s): {rate:,.0f} rows/s")
    print(f"pipeline overhead ratio (Ray Data 1 actor / in-process time): {(N / rates[1]) / in_process:.2f}")
    print(f"speed-up 2 actors / 1 actor: {rates[2] / rates[1]:.2f}")

    problems = [{"suite.problems_per_task": int(x)} for x in args.problems_per_task.split(",")]
    memory_series("more problems", problems, {})
    memory_series("more problems, jemalloc returning freed pages at once", problems, DECAY_NOW)
    memory_series("more requests for the same 200 problems",
                  [{"sampling.every": every, "sampling.stride_fraction": 0.0} for every in (20, 2, 1)], {})


if __name__ == "__main__":
    main()
