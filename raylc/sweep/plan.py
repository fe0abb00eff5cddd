"""``raylc plan`` for a length sweep: what a run would send, counted without inference."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import numpy as np
import polars as pl
import yaml

from raylc.io.plans import cost_rows, plan_tokenizer, write_whole
from raylc.sweep.stages import build_samples
from raylc.text.tokenize import Tokenizer, count_texts

if TYPE_CHECKING:
    from raylc.spec import Job


@dataclass(frozen=True)
class SweepPlan:
    """What a length-controlled run would send (:func:`plan_sweep`): per task and target length
    the samples, prompt tokens (as sent, after fitting into the probe's window) and the
    generated-token bound, and the cost. Two-call samples count both calls, the second with
    a completion of at most the first call's ``max_tokens``."""

    job: Job
    lengths: pl.DataFrame  # task, length, samples, requests, prompt_tokens, generated_tokens, truncated
    tokenizer: str
    price_per_mtok: Optional[float] = None
    tokens_per_s_per_gpu: Optional[float] = None

    @property
    def requests(self) -> int:
        return int(self.lengths["requests"].sum())

    @property
    def prompt_tokens(self) -> int:
        return int(self.lengths["prompt_tokens"].sum())

    @property
    def generated_tokens(self) -> int:
        return int(self.lengths["generated_tokens"].sum())

    def warnings(self) -> list[str]:
        """One line when samples do not fit the probe's window with their ``max_tokens``: the
        backend cuts their contexts (``probe.truncation``), and the scores flag them."""
        cut = self.lengths.filter(pl.col("truncated") > 0)
        if not cut.height:
            return []
        lengths = ", ".join(str(x) for x in sorted(set(cut["length"].to_list())))
        return [f"{int(cut['truncated'].sum()):,} of {int(self.lengths['samples'].sum()):,} samples (at lengths "
                f"{lengths}) do not fit probe.max_model_len {self.job.window():,} with their max_tokens: "
                f"truncation '{getattr(self.job.probe, 'truncation', 'middle')}' cuts their contexts, so the model "
                f"sees less than the target length (scores.parquet flags them: truncated, visible_tokens)"]

    def summary(self) -> pl.DataFrame:
        rows = [
            ("samples", f"{int(self.lengths['samples'].sum()):,}"),
            ("requests", f"{self.requests:,}"),
            ("prompt tokens (planned, no prefix reuse)", f"{self.prompt_tokens:,}"),
            ("generated tokens (<= max_tokens each)", f"{self.generated_tokens:,}"),
            ("tokenizer", self.tokenizer),
        ]
        rows += cost_rows(self.prompt_tokens + self.generated_tokens, self.price_per_mtok, self.tokens_per_s_per_gpu)
        return pl.DataFrame(rows, schema=["item", "value"], orient="row")

    def write(self, path: Union[str, Path]) -> None:
        """Write :meth:`to_yaml` to ``path`` (whole or not at all)."""
        write_whole(self.to_yaml(), path)

    def to_yaml(self) -> str:
        head = f"# Planned by `raylc plan`: {self.requests:,} requests, {self.prompt_tokens:,} prompt tokens"
        return head + "\n" + yaml.safe_dump(self.job.resolved(), sort_keys=False, allow_unicode=True)


def request_tokens(samples: pl.DataFrame, tok: Tokenizer, default_max: int, overhead_tokens: int = 0,
                   recount: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: (first call's prompt tokens, second call's (0 for one-call samples), their
    ``max_tokens``). Instruction and question pieces are tokenized once per distinct text; the
    context's count is the build's, recounted with ``tok`` when ``recount``. A second call's
    prompt holds a completion of at most the first call's ``max_tokens``; ``overhead_tokens`` (the
    chat template's) are not added to a ``raw_prompt`` request."""
    first_max = samples["max_tokens"].fill_null(default_max).to_numpy()
    second_max = samples["followup_max_tokens"].fill_null(default_max).to_numpy()
    context = count_texts(samples["context"], tok) if recount else samples["context_tokens"].to_numpy()
    raw = samples["raw_prompt"].fill_null(False).to_numpy() if "raw_prompt" in samples.columns else False
    first = count_texts(samples["head"], tok) + context + count_texts(samples["tail"], tok) + np.where(
        raw, 0, overhead_tokens)
    two = samples["followup"].is_not_null().to_numpy()
    second = np.where(two, count_texts(samples["followup"].fill_null(""), tok) + first_max + overhead_tokens, 0)
    return first, second, first_max, np.where(two, second_max, 0)


def plan_sweep(job: Job, *, tokenizer: Optional[str] = None, price_per_mtok: Optional[float] = None,
               tokens_per_s_per_gpu: Optional[float] = None, overhead_tokens: int = 0) -> SweepPlan:
    """Plan a length-controlled job without inference: build its samples and count the tokens of
    every request (:func:`request_tokens`; ``tokenizer`` overrides the suite's and recounts)."""
    samples = build_samples(job)
    spec = tokenizer or job.suite.tokenizer_spec()
    first, second, first_max, second_max = request_tokens(samples, plan_tokenizer(spec), job.max_tokens(),
                                                          overhead_tokens, recount=tokenizer is not None)
    max_len = job.window()
    cut = np.zeros(first.size, dtype=bool)
    if max_len:  # the backend cuts the context to fit prompt + max_tokens into the window
        cut = first + first_max > max_len
        first = np.minimum(first, np.maximum(max_len - first_max, 1))
    table = samples.select("task", "length").with_columns(
        truncated=pl.Series(cut.astype(np.int64)),
        requests=pl.Series(1 + (second > 0).astype(np.int64)),
        prompt_tokens=pl.Series(first + second, dtype=pl.Int64),
        generated_tokens=pl.Series(first_max + second_max, dtype=pl.Int64),
    )
    lengths = table.group_by("task", "length").agg(
        samples=pl.len(), requests=pl.col("requests").sum(), prompt_tokens=pl.col("prompt_tokens").sum(),
        generated_tokens=pl.col("generated_tokens").sum(), truncated=pl.col("truncated").sum(),
    ).sort("task", "length")
    return SweepPlan(job=job, lengths=lengths, tokenizer=spec or "default", price_per_mtok=price_per_mtok,
                     tokens_per_s_per_gpu=tokens_per_s_per_gpu)
