"""Where the CPU of a pytest run goes: per test, its wall time, the CPU this process spent on it
(its subprocesses and Ray's workers aside) and the whole machine's busy CPU over it
(``/proc/stat``: every core and process, so run it on an otherwise idle machine). A module's
fixture counts in its first test. Writes a tab-separated table and prints the tests that kept
the machine busiest:

    .venv/bin/python tests/benchmarks/cpu_by_test.py --out ray.tsv -- -m ray -n 0
    .venv/bin/python tests/benchmarks/cpu_by_test.py --out fast.tsv -- -m "not ray" -n 0
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import polars as pl
import pytest


def machine_busy_s() -> float:
    """CPU seconds the machine spent busy since boot (every core; idle and iowait left out)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class CPUByTest:
    """The plugin: one row per test (run in one process: ``-n 0``)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item):
        wall, cpu, busy = time.monotonic(), time.process_time(), machine_busy_s()
        yield
        self.rows.append((item.nodeid, time.monotonic() - wall, time.process_time() - cpu, machine_busy_s() - busy))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="cpu-by-test.tsv", help="the table (tab-separated)")
    ap.add_argument("--top", type=int, default=20, help="tests printed, busiest first")
    ap.add_argument("pytest_args", nargs="*", help="pytest's arguments (after --)")
    args = ap.parse_args()
    plugin = CPUByTest()
    code = pytest.main([*args.pytest_args, "-p", "no:randomly"], plugins=[plugin])
    table = pl.DataFrame(plugin.rows, schema=["test", "wall_s", "process_cpu_s", "machine_busy_cpu_s"], orient="row")
    table.write_csv(args.out, separator="\t")
    with pl.Config(tbl_rows=args.top, fmt_str_lengths=120, tbl_width_chars=200):
        busiest = table.sort("machine_busy_cpu_s", descending=True).head(args.top)
        print(busiest.with_columns(pl.selectors.float().round(1)))
    total = table.select(pl.col("wall_s", "process_cpu_s", "machine_busy_cpu_s").sum()).row(0)
    print(f"{table.height} tests: wall {total[0]:.0f} s, this process {total[1]:.0f} s of CPU, "
          f"the machine busy {total[2]:.0f} CPU-seconds")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
