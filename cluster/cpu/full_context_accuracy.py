"""Score a DOLCE job's problems with the probe's model through transformers, without Ray or vLLM:
does the model answer them at all? Prompts are rendered, fitted and tokenized by raylc's own
prepare stage (``raylc.backends.stages.prepare``: the job's template, the chat template, the
window), generated greedily (``do_sample=False``, ``max_new_tokens`` = the probe's
``sampling.max_tokens``) and scored by the job's scoring (``raylc.scoring.score_spans``).

Usage (from the repository root, with the venv of cluster/cpu/install.sh):
  .venv-real/bin/python cluster/cpu/full_context_accuracy.py jobs/real-dolce-smollm2.yaml \
      [--length L|0|N ...] [--problem ID ...] [--per-task N] [--seed N] [--set KEY=VALUE ...] \
      [--dtype bfloat16|float16|float32] [--batch N] [--attn eager] [--out FILE]

``--length L`` (the default) is the full context; ``0`` closed-book; a number N the spans of
N units at every start (as the sample stage would draw them). Prints each answer, the accuracy
per task and length, and with ``--length 1`` the paragraph pattern: per problem the single
units answered right, and per task how many of the designed evidence units (``evidence_starts``,
a suite that plants them) and of the other units were answered right. ``--batch N`` generates N
prompts at a time (left-padded; 1, the default, is one prompt at a time). About 1-3 s per request
for SmolLM2-135M on an idle 2-core machine.
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


def paragraph_pattern(table, problems):
    """Spans of one unit: per problem the units answered right (and the designed ones, if the
    suite plants them); per task the designed and the other units answered right, and the
    problems answered from exactly their designed units."""
    import polars as pl

    ones = table.filter(pl.col("C") == 1).with_columns(right=pl.col("score") == 1.0)
    per_problem = ones.group_by("task", "problem_id", maintain_order=True).agg(
        right_units=pl.col("start").filter(pl.col("right")).sort())
    if "evidence_starts" not in problems.columns:
        n_right = pl.col("right_units").list.len()
        return per_problem, per_problem.group_by("task", maintain_order=True).agg(
            problems=pl.len(), one_unit=(n_right == 1).sum(), several_units=(n_right > 1).sum(),
            no_unit=(n_right == 0).sum())
    evidence = problems.select("problem_id", "evidence_starts")
    per_problem = per_problem.join(evidence, on="problem_id", how="left").with_columns(
        as_designed=pl.col("right_units") == pl.col("evidence_starts").list.sort())
    marked = ones.join(evidence, on="problem_id", how="left").with_columns(
        designed=pl.col("start").is_in(pl.col("evidence_starts")))
    per_task = marked.group_by("task", maintain_order=True).agg(
        designed_right=(pl.col("designed") & pl.col("right")).sum(), designed_units=pl.col("designed").sum(),
        other_right=(~pl.col("designed") & pl.col("right")).sum(), other_units=(~pl.col("designed")).sum()).join(
        per_problem.group_by("task").agg(problems=pl.len(), as_designed=pl.col("as_designed").sum()), on="task")
    return per_problem, per_task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--length", action="append", help="L (default), 0, or a number of units")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--attn", default=None, help="transformers attn_implementation (e.g. eager; default: its own)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch", type=int, default=1, help="prompts per generate call (left-padded)")
    parser.add_argument("--problem", action="append", help="only these problem ids (default: all)")
    parser.add_argument("--per-task", type=int, help="only the first N problems of each task")
    parser.add_argument("--seed", type=int, help="the job's seed (the suite's build)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="KEY.PATH=VALUE, as raylc run's")
    parser.add_argument("--out", help="write the completions and scores as Parquet")
    args = parser.parse_args()

    import polars as pl
    import torch
    from transformers import AutoModelForCausalLM

    from raylc.backends.stages import ProblemSource, PromptTokenizer, prepare
    from raylc.backends.vllm_engine import tokenizer_spec
    from raylc.scoring import score_spans
    from raylc.spec import load_job, parse_overrides

    if args.threads:
        torch.set_num_threads(args.threads)
    job = load_job(args.job, parse_overrides(args.sets))
    probe = job.probe
    problems = job.suite.build(job.seed if args.seed is None else args.seed)
    if args.problem:
        problems = problems.filter(pl.col("problem_id").is_in(args.problem))
    if args.per_task:
        problems = problems.filter(pl.int_range(pl.len()).over("task") < args.per_task)
    spans = pl.concat([spans_for(problems, n) for n in (args.length or ["L"])])
    tokenizer = PromptTokenizer.load(tokenizer_spec(probe), probe.chat_template)
    ready = prepare(spans, ProblemSource(problems=problems), job, tokenizer)
    extra = {"attn_implementation": args.attn} if args.attn else {}
    model = AutoModelForCausalLM.from_pretrained(probe.model, dtype=getattr(torch, args.dtype), **extra).eval()
    raw = tokenizer._tok  # the transformers tokenizer
    pad = raw.pad_token_id if raw.pad_token_id is not None else model.generation_config.eos_token_id
    prompts = ready["prompt_token_ids"].to_list()
    texts: list = [None] * len(prompts)
    todo = [i for i, ids in enumerate(prompts) if ids is not None]
    started = time.monotonic()
    for b in range(0, len(todo), args.batch):
        rows = todo[b: b + args.batch]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.tensor([[pad] * (width - len(prompts[i])) + list(prompts[i]) for i in rows])
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in rows])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=probe.generation.max_tokens, do_sample=False,
                                 pad_token_id=pad)
        for j, i in enumerate(rows):
            texts[i] = raw.decode(out[j, width:].tolist(), skip_special_tokens=True)
            print(f"[{b + j + 1}/{len(todo)}] {ready['problem_id'][i]} C={ready['C'][i]} start={ready['start'][i]} "
                  f"({len(prompts[i])} tokens): {texts[i]!r}", file=sys.stderr, flush=True)
    completions = ready.select("task", "problem_id", "L", "C", "start", "prompt_tokens").with_columns(
        completion=pl.Series(texts, dtype=pl.String))
    scored = score_spans(completions, problems, job.scoring.metric, job.scoring.idk_patterns)
    table = completions.with_columns(score=scored["score"]).join(
        problems.select("problem_id", "answers"), on="problem_id", how="left", maintain_order="left")
    if args.out:
        table.write_parquet(args.out)
    length = pl.when(pl.col("C") == pl.col("L")).then(pl.lit("L")).otherwise(pl.col("C").cast(pl.String))
    summary = table.group_by("task", length.alias("C"), maintain_order=True).agg(
        requests=pl.len(), correct=(pl.col("score") == 1.0).sum(), idk=pl.col("score").is_null().sum(),
        mean_score=pl.col("score").fill_null(0.0).mean())
    with pl.Config(tbl_rows=-1, tbl_width_chars=200, fmt_str_lengths=80, tbl_hide_dataframe_shape=True):
        print(table.select("problem_id", "C", "start", "answers", "completion", "score"))
        print(summary)
        if (table["C"] == 1).any():
            per_problem, per_task = paragraph_pattern(table, problems)
            print(per_problem)
            print(per_task)
    print(f"{table.height} requests in {time.monotonic() - started:.0f} s; {args.dtype}; batch {args.batch}; "
          f"max_new_tokens {probe.generation.max_tokens}; metric {job.scoring.metric}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
