"""Benchmark: planned prefill tokens with and without prefix sharing (issue #4, acceptance item 4).

Prompts are ``head + units[start : start + C] + tail``, so spans of one problem with the same
start nest: with vLLM's automatic prefix caching a request recomputes only what its longest
shared prefix with an earlier request does not cover, in full 16-token blocks
(:func:`raylc.dolce.plan.prefill_tokens`; block-level model, documented in :mod:`raylc.dolce.plan`).
Prints, for each setting, the planned prompt tokens without reuse, with reuse (unbounded cache:
any earlier request, independent of the order: an upper bound on the saving), and with a cache
that holds only the last N requests (``--lookback``) in the sample stage's order (task, problem,
C, start) and in :func:`raylc.dolce.plan.prefix_order` (problem, start, C), plus the time the counts took.

Settings: the quickstart job as written (``stride_fraction: 0.1``, partly aligned starts), the
quickstart with a global take-every-5 (every length starts at 0, 5, 10, ...: fully aligned), and
one synthetic planted problem of ~256K tokens (exponential ladder up to 20,000 units) with a global
take-every stride (aligned) and with proportional strides (``stride_fraction: 0.1``).

    .venv/bin/python tests/benchmarks/bench_prefix_sharing.py [--lookback 1 64] [--every 5] [--long-every 100]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from raylc.dolce.plan import plan, prefill_tokens, prefix_order  # noqa: E402
from raylc.spec import load_job  # noqa: E402
from raylc.suites.planted import PlantedSuite, build_planted  # noqa: E402
from raylc.text.sampling import Sampling  # noqa: E402
from raylc.text.tokenize import get_tokenizer  # noqa: E402

TARGET_TOKENS = 262_144


def long_problem(target: int = TARGET_TOKENS):
    """One planted problem whose full-context prompt has at least ``target`` default-tokenizer tokens."""
    tok = get_tokenizer(None)
    sample = build_planted(PlantedSuite(tasks=["long"], problems_per_task=1, lambdas=[10], ks=[1],
                                        min_units=2000, max_units=2000), seed=0)
    per_unit = sum(tok.count(" " + u) for u in sample["units"][0]) / 2000
    L = int(target / per_unit * 1.01)
    problems = build_planted(PlantedSuite(tasks=["long"], problems_per_task=1, lambdas=[10], ks=[1],
                                          min_units=L, max_units=L), seed=0)
    return problems


def measure(name: str, job, problems, lookbacks: list[int]) -> None:
    t0 = time.perf_counter()
    p = plan(job, problems=problems)
    t_plan = time.perf_counter() - t0
    stage_order = p.spans.drop("prompt_tokens").sort("task", "problem_id", "C", "start")
    t0 = time.perf_counter()
    without, unbounded = prefill_tokens(stage_order, problems)
    t_prefill = time.perf_counter() - t0
    assert without == p.prefill_without_reuse and unbounded == p.prefill_with_reuse
    longest = int(p.spans["prompt_tokens"].max())
    print(f"\n{name}: {p.problems} problem(s), {p.requests:,} requests, longest prompt {longest:,} tokens "
          f"(plan {t_plan:.2f} s, prefill counts {t_prefill:.2f} s)")
    print(f"  {'prefill without reuse':<47} {without:>16,}")
    rows = [("with reuse, unbounded cache", unbounded)]
    for n in lookbacks:
        for order, spans in (("stage", stage_order), ("prefix", prefix_order(stage_order))):
            rows.append((f"with reuse, last {n} request(s), {order} order",
                         prefill_tokens(spans, problems, lookback=n)[1]))
    for label, value in rows:
        print(f"  {label:<47} {value:>16,}  saving {1 - value / without:6.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lookback", type=int, nargs="+", default=[1, 64], help="Requests a bounded cache holds.")
    ap.add_argument("--every", type=int, default=5, help="Global take-every stride for the aligned quickstart.")
    ap.add_argument("--long-every", type=int, default=100, help="Global take-every stride for the 256K problem.")
    args = ap.parse_args()

    quick = load_job(ROOT / "jobs" / "quickstart.yaml")
    problems = build_planted(quick.suite, quick.seed)
    measure("quickstart as written (take_every, stride_fraction 0.1)", quick, problems, args.lookback)
    aligned = quick.model_copy(update={"sampling": Sampling(every=args.every)})
    measure(f"quickstart, take-every-{args.every} (aligned)", aligned, problems, args.lookback)

    t0 = time.perf_counter()
    long = long_problem()
    print(f"\nbuilt one planted problem of {long['L'][0]:,} units in {time.perf_counter() - t0:.2f} s")
    job = quick.model_copy(update={"sampling": Sampling(every=args.long_every)})
    measure(f"256K-token problem, exponential ladder, take-every-{args.long_every} (aligned)", job, long, args.lookback)
    job = quick.model_copy(update={"sampling": Sampling(every=1, stride_fraction=0.1)})
    measure("256K-token problem, exponential ladder, stride max(1, floor(0.1 C)) (partly aligned)", job, long,
            args.lookback)


if __name__ == "__main__":
    main()
