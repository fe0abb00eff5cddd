"""Throughput of raylc's vLLM pipeline against vLLM's own offline ``LLM.generate`` (``make bench-real``).

Both run here, one after the other, on vLLM's CPU build with SmolLM2-135M-Instruct
(``.models/SmolLM2-135M-Instruct``, or ``RAYLC_SMOLLM2``), the same engine arguments
(``probe.engine_args`` plus what raylc sets: :func:`raylc.backends.vllm_engine.engine_kwargs`) and
the same token prompts: ``--requests`` chat prompts built from the documents of
``jobs/data/real/smollm2-qa.jsonl`` (each problem's first ``c`` paragraphs and its question,
``c`` cycling over its paragraphs), tokenized with raylc's ``PromptTokenizer``.

* **vLLM offline** (first): ``vllm.LLM(**engine kwargs)``, then one ``LLM.generate`` of every
  ``TokensPrompt``: its window is the ``generate`` call alone; the engine's start is timed apart.
* **raylc**: ``pipeline.stream`` on a request table of ``ray.batch_size`` rows a file: Ray Data,
  a ``PrepareActor`` (chat template, tokenize) and an ``EngineActor`` (``AsyncLLM``, built in its
  constructor). Its stream is split by the stream's :class:`~raylc.run.pipeline.EngineLedger`
  (wall-clock records from the engine actor): *start-up* (the stream's start to the engine built:
  actor processes, ``import vllm``, the engine's own start), *first batch* (engine built to the
  first batch entering it: Ray Data and the prepare stage), the *engine window* (first batch in to
  last batch out: what ``LLM.generate``'s window measures offline) and the *tail* (to the stream's
  end).
* **raylc's engine in process** (between the two): ``VLLMEngine`` (the wrapper the engine actor
  drives: ``AsyncLLM``, one request per prompt) in the benchmark's own process with every request
  at once, which tells vLLM's async front end apart from Ray and from admission by batches.
  The engine start varies by seconds between runs, so use a workload of minutes (the
  default) and repeat the command.

Prints the requests, generated tokens and windows of each, the outputs that differ (the CPU
build's greedy output may change with the batch's makeup), the end-to-end ratio (raylc's stream
less the offline engine's start, against ``generate``), and last
``throughput ratio (raylc / vLLM offline): X``: the engine window against ``generate``, the
admission's own cost. ``--vllm-defaults`` adds a second offline run
with vLLM's own defaults (no ``enforce_eager``: the compiled CPU path, several minutes to start).
No timed asserts.

    make bench-real                                            # 780 requests
    .venv-real/bin/python tests/benchmarks/bench_real.py --requests 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("RAYLC_SMOLLM2", ROOT / ".models" / "SmolLM2-135M-Instruct")).resolve()
DATA = ROOT / "jobs" / "data" / "real" / "smollm2-qa.jsonl"


def prompts(n: int) -> list[str]:
    """``n`` chat prompts: a problem's first ``c`` paragraphs and its question."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    out: list[str] = []
    c = 1
    while len(out) < n:
        for row in rows:
            paras = row["context"].split("\n\n")
            context = "\n\n".join(paras[: 1 + (c - 1) % len(paras)])
            out.append(f"{context}\n\nAnswer the question from the text above in a few words.\n"
                       f"Question: {row['question']}\nAnswer:")
            if len(out) == n:
                break
        c += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=780)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--vllm-defaults", action="store_true")
    ap.add_argument("--max-concurrent-batches", type=int, default=None,
                    help="probe.max_concurrent_batches (default: raylc's, twice max_num_seqs in flight)")
    args = ap.parse_args()

    import tempfile

    import polars as pl

    from raylc.backends import vllm_engine
    from raylc.backends.stages import PromptTokenizer
    from raylc.backends.vllm_engine import engine_kwargs
    from raylc.run import pipeline, session
    from raylc.run.folder import RunFolder
    from raylc.spec import Job

    job = Job(name="bench-real", probe={
        "backend": "vllm", "model": str(MODEL), "max_model_len": 8192, "device": "cpu", "engine_num_cpus": 1,
        "cpu_kv_cache_gib": 2, "engine_args": {"enforce_eager": True},
        "max_concurrent_batches": args.max_concurrent_batches,
        "sampling": {"temperature": 0.0, "max_tokens": args.max_tokens}}, ray={"batch_size": 64})
    texts = prompts(args.requests)
    frame = pl.DataFrame({"row": range(len(texts)), "head": "", "context": texts, "tail": ""})

    tok = PromptTokenizer.load(str(MODEL), True)
    ids = [tok.prompt_ids(t) for t in texts]

    def offline(kwargs: dict) -> tuple[list[str], int, float, float]:
        import vllm

        t = time.perf_counter()
        llm = vllm.LLM(**kwargs)
        started = time.perf_counter() - t
        params = vllm.SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        t = time.perf_counter()
        outs = llm.generate([vllm.TokensPrompt(prompt_token_ids=i) for i in ids], params, use_tqdm=False)
        gen_s = time.perf_counter() - t
        llm.llm_engine.engine_core.shutdown()
        return [o.outputs[0].text for o in outs], sum(len(o.outputs[0].token_ids) for o in outs), gen_s, started

    def in_process() -> tuple[int, float, float]:
        """raylc's engine wrapper (``VLLMEngine``: ``AsyncLLM``, one request per prompt) in this
        process, every request at once: no Ray, no admission by batches."""
        import asyncio

        from raylc.backends.vllm_engine import VLLMEngine

        async def go() -> tuple[int, float, float]:
            t = time.perf_counter()
            engine = VLLMEngine(job.probe)
            started = time.perf_counter() - t
            t = time.perf_counter()
            outs = await engine.generate(ids, [args.max_tokens] * len(ids))
            gen_s = time.perf_counter() - t
            engine.shutdown()
            assert all(o["error"] is None for o in outs)
            return sum(o["generated_tokens"] for o in outs), gen_s, started

        return asyncio.run(go())

    kw = {k: v for k, v in engine_kwargs(job.probe).items() if k != "disable_log_stats"}
    texts_off, tokens_off, offline_s, offline_start = offline(kw)
    tokens_in, inproc_s, inproc_start = in_process()

    session.init_ray(None)
    import ray

    ledger = ray.remote(num_cpus=0)(pipeline.EngineLedger).remote()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:  # the request table in a run folder, as a run writes it
        folder = RunFolder(tmp, "bench-real")
        source = pipeline.RequestFiles(folder, folder.write_requests([frame], job.ray.batch_size))
        ours = pl.concat(list(pipeline.stream(source, job, ledger=ledger))).sort("row")
    t1 = time.time()
    stream_s = t1 - t0
    raylc_s = stream_s - offline_start
    for _ in range(100):  # the engine's last record is fire and forget
        led = ray.get(ledger.summary.remote(), timeout=60)
        if led["requests"] == len(texts):
            break
        time.sleep(0.1)
    ray.shutdown()
    ready = led["ready_at"][0]
    engine_s = led["last_out"] - led["first_in"]
    assert ours["error"].null_count() == ours.height, ours.filter(pl.col("error").is_not_null())["error"][0]
    differ = sum(a != b for a, b in zip(ours["completion"].to_list(), texts_off))
    print(f"workload: {len(texts)} requests, max_tokens {args.max_tokens}, engine arguments {kw}, "
          f"batch_size {job.ray.batch_size} x {vllm_engine.concurrent_batches(job.probe, job.ray.batch_size)} "
          "batches in flight")
    print(f"raylc:         {ours['generated_tokens'].sum():,} tokens generated; stream {stream_s:.1f} s = "
          f"start-up {ready - t0:.1f} s + first batch {led['first_in'] - ready:.1f} s + engine window {engine_s:.1f} s "
          f"+ tail {t1 - led['last_out']:.1f} s ({led['batches']} batches): {len(texts) / engine_s:.2f} requests/s "
          f"in the engine window")
    print(f"vLLM offline:  {tokens_off:,} tokens generated in {offline_s:.1f} s (engine start {offline_start:.1f} s "
          f"apart): {len(texts) / offline_s:.2f} requests/s")
    print(f"raylc's engine in process, no Ray: {tokens_in:,} tokens generated in {inproc_s:.1f} s (engine start "
          f"{inproc_start:.1f} s apart), every request at once: ratio to vLLM offline {offline_s / inproc_s:.3f}")
    print(f"completions that differ: {differ} of {len(texts)}")
    if args.vllm_defaults:
        plain = {"model": str(MODEL), "max_model_len": 8192, "kv_cache_memory_bytes": kw["kv_cache_memory_bytes"]}
        _, _, defaults_s, defaults_start = offline(plain)
        print(f"vLLM offline at its defaults {plain}: {defaults_s:.1f} s (engine start {defaults_start:.1f} s apart); "
              f"throughput ratio (raylc / vLLM offline at its defaults): {defaults_s / engine_s:.3f}")
    print(f"end-to-end ratio (raylc's stream less the offline engine start {offline_start:.1f} s = {raylc_s:.1f} s, "
          f"/ vLLM offline generate): {offline_s / raylc_s:.3f}")
    print(f"throughput ratio (raylc / vLLM offline): {offline_s / engine_s:.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
