"""Inference throughput and driver memory on the simulated probe (issue: inference at scale).

Prints, measured in one run on this machine:
  * rows/s through the Ray Data actor pool with 1 and with 2 actors (10,000 requests);
  * the pipeline overhead ratio: Ray Data path time / the same stage functions in-process;
  * the driver's peak memory for a whole `raylc run` at ~10,000 and ~100,000 requests
    (results stream to shards, so it should not grow with the number of requests): peak
    RSS, which also counts the pages of Ray's shared-memory object store the driver has
    touched, and peak private memory (sampled every 0.1 s from /proc/self/smaps_rollup).

Run: .venv/bin/python tests/benchmarks/bench_infer.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.pipeline import ray_exec, stages  # noqa: E402
from raylc.pipeline.checkpoint import with_request_ids  # noqa: E402
from raylc.spec import load_job  # noqa: E402

N = 10_000

PEAK = """
import resource, sys, threading, time
from raylc.pipeline.runner import run_job
from raylc.spec import load_job

peak = {"private": 0}
def private_kib():  # memory private to the driver (excludes Ray's shared-memory object store pages)
    with open("/proc/self/smaps_rollup") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    return sum(int(fields[k].split()[0]) for k in ("Private_Clean", "Private_Dirty", "Private_Hugetlb") if k in fields)
def sample():
    while True:
        peak["private"] = max(peak["private"], private_kib())
        time.sleep(0.1)
threading.Thread(target=sample, daemon=True).start()
run_job(load_job(sys.argv[1]), "bench", log=lambda m: None)
peak["private"] = max(peak["private"], private_kib())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, peak["private"])
"""


def ray_rows_per_s(job, spans, problems) -> float:
    t0 = time.perf_counter()
    n = sum(b.height for b in ray_exec.infer_on_ray(spans, problems, job))
    assert n == spans.height
    return n / (time.perf_counter() - t0)


def peak_rss_mb(problems_per_task: int, store: Path) -> tuple[int, float, float]:
    spec = yaml.safe_load((ROOT / "jobs" / "quickstart.yaml").read_text())
    spec["suite"]["problems_per_task"] = problems_per_task
    spec["store"] = {"path": str(store / f"p{problems_per_task}")}
    job_file = store / f"p{problems_per_task}.yaml"
    job_file.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", PEAK, str(job_file)], capture_output=True, text=True, env=env, check=True)
    job = load_job(job_file)
    n = stages.sample(stages.build(job), job).height
    rss, private = out.stdout.strip().splitlines()[-1].split()
    return n, int(rss) / 1024, int(private) / 1024


def main() -> None:
    job = load_job(ROOT / "jobs" / "quickstart.yaml")
    problems = stages.build(job)
    spans = with_request_ids(stages.sample(problems, job), problems, job).sample(n=N, seed=0).sort("problem_id", "C", "start")

    t0 = time.perf_counter()
    stages.infer(spans, problems, job)
    in_process = time.perf_counter() - t0

    ray_exec.ensure_ray(job)
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

    with tempfile.TemporaryDirectory() as tmp:
        for per_task in (5, 45):
            n, rss, private = peak_rss_mb(per_task, Path(tmp))
            print(f"driver peak, whole run with {n:,} requests: RSS {rss:,.0f} MiB, private {private:,.0f} MiB")


if __name__ == "__main__":
    main()
