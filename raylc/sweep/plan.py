"""``raylc plan`` for a length sweep: what a run would send, counted without inference.

With a budget (``--budget-tokens N``) the plan takes the most samples per axis point (the
suite's ``samples_per_length`` or ``samples_per_setting``, at most the job's own) whose planned
prompt tokens are at most N: one more sample at every point would go over N (the search builds
the suite at each count it tries, as contexts and depths may depend on the count).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

import numpy as np
import polars as pl
import yaml

from raylc.backends.registry import plan_overhead
from raylc.io.plans import PlanError, capped, cost_rows, plan_tokenizer, write_whole
from raylc.sweep.stages import build_samples
from raylc.text.tokenize import Tokenizer, count_texts

if TYPE_CHECKING:
    from raylc.spec import Job


@dataclass(frozen=True)
class SweepPlan:
    """What a length-controlled run would send (:func:`plan_sweep`): per task and target length
    the samples, prompt tokens (as sent, after fitting into the probe's window) and the
    generated-token bound, and the cost. Two-call samples count both calls, the second with
    a completion of at most the first call's ``max_tokens``. A job with judge metrics also
    has the judge's calls and their prompt tokens, at most (:func:`judge_plan`)."""

    job: Job
    #: task, length, samples, requests, prompt_tokens, generated_tokens, truncated (and judge_calls,
    #: judge_prompt_tokens when a sample has a judge metric)
    lengths: pl.DataFrame
    tokenizer: str
    price_per_mtok: Optional[float] = None
    tokens_per_s_per_gpu: Optional[float] = None
    budget_tokens: Optional[int] = None
    samples_asked: Optional[int] = None  # the job's samples per axis point, when a budget chose fewer or as many

    @property
    def requests(self) -> int:
        return int(self.lengths["requests"].sum())

    @property
    def prompt_tokens(self) -> int:
        return int(self.lengths["prompt_tokens"].sum())

    @property
    def generated_tokens(self) -> int:
        return int(self.lengths["generated_tokens"].sum())

    @property
    def judge_prompt_tokens(self) -> int:
        """The judge calls' prompt tokens, at most (0 without judge metrics)."""
        return int(self.lengths["judge_prompt_tokens"].sum()) if "judge_prompt_tokens" in self.lengths.columns else 0

    @property
    def capped_tokens(self) -> int:
        """What the run's prompt-token cap counts: the probe's prompt tokens and the judge's."""
        return self.prompt_tokens + self.judge_prompt_tokens

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
        if "judge_calls" in self.lengths.columns:
            rows[4:4] = [("judge calls (at most)", f"{int(self.lengths['judge_calls'].sum()):,}"),
                         ("judge prompt tokens (at most; the cap counts them)", f"{self.judge_prompt_tokens:,}")]
        if self.budget_tokens is not None:
            field = self.job.suite.samples_field
            rows.insert(3, ("budget (prompt tokens)",
                            f"{self.budget_tokens:,} ({self.capped_tokens / self.budget_tokens:.1%} used)"))
            rows.insert(1, (f"suite.{field} (budget)",
                            f"{self.job.suite.samples_per_point():,} of the job's {self.samples_asked:,}"))
        rows += cost_rows(self.prompt_tokens + self.generated_tokens, self.price_per_mtok, self.tokens_per_s_per_gpu)
        return pl.DataFrame(rows, schema=["item", "value"], orient="row")

    def write(self, path: Union[str, Path]) -> None:
        """Write :meth:`to_yaml` to ``path`` (whole or not at all)."""
        write_whole(self.to_yaml(), path)

    def to_yaml(self) -> str:
        head = f"# Planned by `raylc plan`: {self.requests:,} requests, {self.prompt_tokens:,} prompt tokens"
        if self.judge_prompt_tokens:
            head += f" and at most {self.judge_prompt_tokens:,} in judge calls"
        if self.budget_tokens is not None:
            head += f" (budget {self.budget_tokens:,})"
        return head + "\n" + yaml.safe_dump(self.job.resolved(), sort_keys=False, allow_unicode=True)


def _added(frame: pl.DataFrame, overhead_tokens: int, raw_overhead: int) -> np.ndarray:
    """Tokens the backend adds to each request row: ``raw_overhead`` to a ``raw_prompt`` one (sent
    without the chat template), ``overhead_tokens`` to the others."""
    raw = frame["raw_prompt"].fill_null(False).to_numpy() if "raw_prompt" in frame.columns else False
    return np.where(raw, raw_overhead, overhead_tokens)


def request_tokens(samples: pl.DataFrame, tok: Tokenizer, default_max: int, overhead_tokens: int = 0,
                   recount: bool = False,
                   raw_overhead: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: (first call's prompt tokens, second call's (0 for one-call samples), their
    ``max_tokens``). Instruction and question pieces are tokenized once per distinct text; the
    context's count is the build's, recounted with ``tok`` when ``recount``. A second call's
    prompt holds a completion of at most the first call's ``max_tokens``. Each call adds
    ``overhead_tokens`` (a chat template's), or ``raw_overhead`` for a ``raw_prompt`` sample."""
    first_max = samples["max_tokens"].fill_null(default_max).to_numpy()
    second_max = samples["followup_max_tokens"].fill_null(default_max).to_numpy()
    context = count_texts(samples["context"], tok) if recount else samples["context_tokens"].to_numpy()
    added = _added(samples, overhead_tokens, raw_overhead)
    first = count_texts(samples["head"], tok) + context + count_texts(samples["tail"], tok) + added
    two = samples["followup"].is_not_null().to_numpy()
    second = np.where(two, count_texts(samples["followup"].fill_null(""), tok) + first_max + added, 0)
    return first, second, first_max, np.where(two, second_max, 0)


def fitted(prompt: np.ndarray, max_tokens: np.ndarray, window: Optional[int]) -> np.ndarray:
    """Prompt tokens as sent into a probe ``window`` (None: no limit): the backend cuts a prompt
    to ``window - max_tokens``."""
    return np.minimum(prompt, np.maximum(window - max_tokens, 1)) if window else prompt


def sent_tokens(requests: pl.DataFrame, samples: pl.DataFrame, tok: Tokenizer, job: Job, overhead_tokens: int = 0,
                raw_overhead: int = 0) -> np.ndarray:
    """Prompt tokens of request rows (:func:`raylc.sweep.stages.requests`, either round) as the
    plan counts them: head and tail counted with ``tok``, a first call's context as the build
    counted it (a second call has none), plus what the backend adds (``overhead_tokens``, or
    ``raw_overhead`` for a ``raw_prompt`` row), fitted into the probe's window; what the run's
    prompt-token cap counts a pending request as."""
    keys = ["task", "sample_id", "length"]
    context = requests.select(keys).join(samples.select(*keys, "context_tokens"), on=keys, how="left",
                                         maintain_order="left")["context_tokens"].fill_null(0).to_numpy()
    first = requests["round"].to_numpy() == 1
    n = count_texts(requests["head"], tok) + np.where(first, context, 0) + count_texts(requests["tail"], tok)
    n = n + _added(requests, overhead_tokens, raw_overhead)
    return fitted(n, requests["max_tokens"].fill_null(job.max_tokens()).to_numpy(), job.window())


def judge_tokens(prompts: pl.Series, tok: Tokenizer, judge: Job, overhead_tokens: int = 0,
                 answer_tokens: Union[int, np.ndarray] = 0) -> np.ndarray:
    """Prompt tokens of judge calls as the plan counts them (``judge``: the job with the judge as
    its probe, :meth:`~raylc.spec.Job.as_judge`): the prompt's text with ``tok``, plus what the
    judge's backend adds (``overhead_tokens``) and ``answer_tokens`` (the plan's bound on the
    prediction a prompt will hold), fitted into the judge's window; what the run's prompt-token
    cap counts a pending judge call as."""
    n = count_texts(prompts, tok) + overhead_tokens + answer_tokens
    return fitted(n, np.full(len(prompts), judge.max_tokens()), judge.window())


def judge_plan(samples: pl.DataFrame, job: Job, answer_max: np.ndarray) -> Optional[pl.DataFrame]:
    """Per task and length, the judge's calls and their prompt tokens at most (None when no
    sample has a judge metric or the job has no judge): every sample answered
    (:func:`raylc.scoring.judge.judge_sample_prompts`; an empty answer makes no call, and equal
    prompts are sent once), its prediction at ``answer_max`` tokens (the answering call's
    ``max_tokens``), counted with the judge's tokenizer as the cap counts it."""
    from raylc.scoring.judge import judge_sample_prompts
    from raylc.sweep.stages import JUDGE_METRICS

    judged = np.flatnonzero(samples["metric"].is_in(list(JUDGE_METRICS)).to_numpy())
    if job.judge is None or not judged.size:
        return None
    rows = samples[judged]
    calls = judge_sample_prompts(rows.with_columns(prediction=pl.lit("")))
    judge = job.as_judge()
    tokens = judge_tokens(calls["judge_prompt"], plan_tokenizer(judge.count_tokenizer(), "judge"), judge,
                          plan_overhead(judge.probe), answer_max[judged][calls["row"].to_numpy()])
    keys = rows.select("task", "length")[calls["row"]]
    return keys.with_columns(judge_prompt_tokens=pl.Series(tokens, dtype=pl.Int64)).group_by("task", "length").agg(
        judge_calls=pl.len().cast(pl.Int64), judge_prompt_tokens=pl.col("judge_prompt_tokens").sum())


def within_budget(job: Job, budget_tokens: int, plan_of: Callable[[Job], SweepPlan]) -> SweepPlan:
    """The plan (``plan_of``) with the most samples per axis point, at most the job's, whose
    prompt tokens (the judge's included, at most) are at most ``budget_tokens``; its job carries
    the budget as its run-time cap."""
    suite = job.suite
    most = suite.samples_per_point()
    if budget_tokens < 1:
        raise PlanError(f"--budget-tokens must be >= 1, got {budget_tokens}")
    if most is None:
        raise PlanError(f"suite kind {suite.kind!r} runs every record of its data: --budget-tokens chooses samples "
                        "per length, which it has none of; narrow its data, or cap the run with --max-prompt-tokens")
    plans: dict[int, SweepPlan] = {}

    def at(n: int) -> SweepPlan:
        if n not in plans:
            plans[n] = plan_of(job.model_copy(update={"suite": suite.with_samples(n)}))
        return plans[n]

    if at(1).capped_tokens > budget_tokens:
        raise PlanError(f"budget of {budget_tokens:,} prompt tokens is below the cheapest plan "
                        f"({at(1).capped_tokens:,} tokens: one sample per task and length); raise --budget-tokens "
                        "or plan fewer lengths or tasks")
    fits, over = 1, most  # at(fits) fits, at(over) does not (more than the job asks counts as not fitting)
    if at(most).capped_tokens <= budget_tokens:
        fits, over = most, most + 1
    while over - fits > 1:
        mid = (fits + over) // 2
        fits, over = (mid, over) if at(mid).capped_tokens <= budget_tokens else (fits, mid)
    chosen = at(fits)
    return replace(chosen, job=capped(chosen.job, budget_tokens), budget_tokens=budget_tokens, samples_asked=most)


def plan_sweep(job: Job, budget_tokens: Optional[int] = None, *, tokenizer: Optional[str] = None,
               price_per_mtok: Optional[float] = None, tokens_per_s_per_gpu: Optional[float] = None,
               overhead_tokens: Optional[int] = None) -> SweepPlan:
    """Plan a length-controlled job without inference: build its samples and count the tokens of
    every request (:func:`request_tokens`; ``tokenizer`` overrides the suite's and recounts);
    with ``budget_tokens``, the samples per axis point that fit (:func:`within_budget`).
    ``overhead_tokens``: a chat template's tokens per request (None: what the run's cap adds,
    :func:`raylc.backends.registry.plan_overhead`, ``raw_prompt`` requests included)."""
    if budget_tokens is not None:
        return within_budget(job, budget_tokens, lambda j: plan_sweep(
            j, tokenizer=tokenizer, price_per_mtok=price_per_mtok, tokens_per_s_per_gpu=tokens_per_s_per_gpu,
            overhead_tokens=overhead_tokens))
    samples = build_samples(job)
    spec = tokenizer or job.suite.tokenizer_spec()
    chat, raw = ((plan_overhead(job.probe), plan_overhead(job.probe, raw=True)) if overhead_tokens is None
                 else (overhead_tokens, 0))
    first, second, first_max, second_max = request_tokens(samples, plan_tokenizer(spec), job.max_tokens(), chat,
                                                          recount=tokenizer is not None, raw_overhead=raw)
    max_len = job.window()
    cut = first + first_max > max_len if max_len else np.zeros(first.size, dtype=bool)
    first = fitted(first, first_max, max_len)  # the backend cuts the context to fit prompt + max_tokens
    second = np.where(second > 0, fitted(second, second_max, max_len), 0)  # a second call too (sent_tokens)
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
    judged = judge_plan(samples, job, np.where(second_max > 0, second_max, first_max))
    if judged is not None:
        lengths = lengths.join(judged, on=["task", "length"], how="left").with_columns(
            pl.col("judge_calls", "judge_prompt_tokens").fill_null(0))
    return SweepPlan(job=job, lengths=lengths, tokenizer=spec or "default", price_per_mtok=price_per_mtok,
                     tokens_per_s_per_gpu=tokens_per_s_per_gpu)
