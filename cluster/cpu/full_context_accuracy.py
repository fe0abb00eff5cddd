"""Score a DOLCE job's problems with the probe's model through transformers, without Ray or vLLM:
does the model answer them at all? Prompts are rendered, fitted and tokenized by raylc's own
prepare stage (``raylc.backends.stages.prepare``: the job's template, the chat template, the
window), generated greedily (``do_sample=False``, ``max_new_tokens`` = the probe's
``sampling.max_tokens``) and scored by the job's scoring (``raylc.scoring.score_spans``).

Usage (from the repository root, with the venv of cluster/cpu/install.sh):
  .venv-real/bin/python cluster/cpu/full_context_accuracy.py jobs/real-dolce-smollm2.yaml \
      [--length L|0|N ...] [--problem ID ...] [--dtype bfloat16|float16|float32] [--attn eager] [--out FILE]

``--length L`` (the default) is the full context; ``0`` closed-book; a number N the spans of
N units at every start (as the sample stage would draw them). One request at a time on the
CPU: about 1-3 s per request for SmolLM2-135M on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def spans_for(problems, length: str):
    import polars as pl

    rows = []
    for pid, task, big_l in problems.select("problem_id", "task", "L").iter_rows():
        c = big_l if length == "L" else min(int(length), big_l)
        rows += [(task, pid, big_l, c, s) for s in range(big_l - c + 1)] if 0 < c < big_l else [(task, pid, big_l, c, 0)]
    return pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                      "start": pl.Int64}, orient="row")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--length", action="append", help="L (default), 0, or a number of units")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--attn", default=None, help="transformers attn_implementation (e.g. eager; default: its own)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--problem", action="append", help="only these problem ids (default: all)")
    parser.add_argument("--out", help="write the completions and scores as Parquet")
    args = parser.parse_args()

    import polars as pl
    import torch
    from transformers import AutoModelForCausalLM

    from raylc.backends.stages import ProblemSource, PromptTokenizer, prepare
    from raylc.backends.vllm_engine import tokenizer_spec
    from raylc.scoring import score_spans
    from raylc.spec import load_job

    if args.threads:
        torch.set_num_threads(args.threads)
    job = load_job(args.job)
    probe = job.probe
    problems = job.suite.build(job.seed)
    if args.problem:
        problems = problems.filter(pl.col("problem_id").is_in(args.problem))
    spans = pl.concat([spans_for(problems, n) for n in (args.length or ["L"])])
    tokenizer = PromptTokenizer.load(tokenizer_spec(probe), probe.chat_template)
    ready = prepare(spans, ProblemSource(problems=problems), job, tokenizer)
    extra = {"attn_implementation": args.attn} if args.attn else {}
    model = AutoModelForCausalLM.from_pretrained(probe.model, dtype=getattr(torch, args.dtype), **extra).eval()
    raw = tokenizer._tok  # the transformers tokenizer
    texts, started = [], time.monotonic()
    for i, ids in enumerate(ready["prompt_token_ids"].to_list()):
        if ids is None:
            texts.append(None)
            continue
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=probe.sampling.max_tokens, do_sample=False)
        texts.append(raw.decode(out[0, len(ids):].tolist(), skip_special_tokens=True))
        print(f"[{i + 1}/{ready.height}] {ready['problem_id'][i]} C={ready['C'][i]} start={ready['start'][i]} "
              f"({len(ids)} tokens): {texts[-1]!r}", file=sys.stderr, flush=True)
    completions = ready.select("task", "problem_id", "L", "C", "start", "prompt_tokens").with_columns(
        completion=pl.Series(texts, dtype=pl.String))
    scored = score_spans(completions, problems, job.scoring.metric, job.scoring.idk_patterns)
    table = completions.with_columns(score=scored["score"]).join(
        problems.select("problem_id", "answers"), on="problem_id", how="left", maintain_order="left")
    if args.out:
        table.write_parquet(args.out)
    summary = table.group_by("task", "C" if args.length and args.length != ["L"] else pl.lit("L").alias("C"),
                             maintain_order=True).agg(
        requests=pl.len(), correct=(pl.col("score") == 1.0).sum(), idk=pl.col("score").is_null().sum(),
        mean_score=pl.col("score").fill_null(0.0).mean())
    with pl.Config(tbl_rows=-1, tbl_width_chars=200, fmt_str_lengths=80):
        print(table.select("problem_id", "C", "start", "answers", "completion", "score"))
        print(summary)
    print(f"{table.height} requests in {time.monotonic() - started:.0f} s; {args.dtype}; "
          f"max_new_tokens {probe.sampling.max_tokens}; metric {job.scoring.metric}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
