"""Cost-bounded planning without inference: ``raylc plan`` (DOLCE Section 3.1, Appendices G and K.1).

A plan runs the ``build`` and ``sample`` stages and counts what ``infer`` would send: requests,
observations per length, prompt tokens, generated tokens (``max_tokens`` per request, an upper
bound), prefill tokens with and without prefix reuse, and an optional cost estimate.

**Prompt tokens** are estimated from pieces tokenized once per problem, never per prompt: a
prompt is ``head + units[start] + sep + units[start+1] + ... + tail``
(:func:`raylc.text.prompts.render_prompts`; head, separator and tail are read off a prompt rendered
with sentinel units, so the estimate follows the template), estimated as ``tokens(head +
units[start]) + sum tokens(sep + unit) + tokens(tail)``; the C = 0 prompt is counted exactly.
For the offline default tokenizer this is an upper bound (its pieces only merge across a
boundary: ``count(a + b) <= count(a) + count(b)``, a hypothesis test) and exact on the planted
suite. For a Hugging Face tokenizer it is an estimate, as BPE merges rarely cross a ``sep +
unit`` boundary. ``tests/dolce/test_plan.py`` compares it with every rendered prompt of a small job:
exact for the default tokenizer and a byte-level BPE, +1 token per prompt for a Metaspace BPE.
Requests to a probe with ``max_model_len`` are capped at ``max_model_len - max_tokens`` (the
truncation window); ``overhead_tokens`` adds the tokens the backend adds to each prompt (a chat
template: vLLM ``chat_template: true``), which the estimate does not see; by default what the run's
prompt-token cap adds (:func:`raylc.backends.registry.plan_overhead`).

**Budget search** (``budget_tokens``): the plan switches to ``take_every`` with per-length strides
(``sampling.every`` as a mapping ``{C: stride}``, ``stride_fraction`` 0) and never exceeds the
budget in planned prompt tokens. For each partial length C the cost curve ``cost_C(s)`` (prompt
tokens of starts 0, s, 2s, ... over all problems, s = 1 .. max(L - C + 1)) is computed from a
padded problems x starts matrix. (1) The smallest *global* stride s* whose total fits (the
paper's take-every-N); (2) then, lengths in decreasing order, each length's stride is lowered
to the smallest s whose cost still fits the remaining budget: long lengths take the coarse
steps first and short, cheap lengths (fine steps) fill what is left, so the leftover is below
one step of a short length's cost curve. On the quickstart this keeps the plan within 10% of
the budget (``tests/dolce/test_plan.py``) whenever the budget lies between the cheapest plan (one
start per problem and length) and full enumeration. A budget below the cheapest plan is a
:class:`PlanError`; one above full enumeration gives full enumeration.

**Prefix reuse** (:func:`prefill_tokens`) models vLLM automatic prefix caching at block level:
the KV cache is hashed in full blocks of ``block_size`` = 16 tokens (vLLM's default) and a
request reuses ``block_size * floor(min(shared, n - 1) / block_size)`` tokens, where ``shared``
is the longest token prefix it shares with an earlier request (at most the previous ``lookback``
requests; None = any earlier one, an unbounded cache) and ``n - 1`` because vLLM always computes
the last prompt token. Block level, not token level, because vLLM caches only full blocks: a
token-level model would overstate the saving by up to 15 tokens per request. Shared prefixes
are modelled on the pieces: rows of the same problem and start share ``head + units[start :
start + min(C, C')]``, any two prompts with the same head text share the head but its last
token (which may merge with what follows), C = 0 prompts share the text they all start with,
nothing else (repeated unit texts at different starts are ignored, so the saving is, if
anything, understated; ``tests/dolce/test_plan.py`` checks the model against actual token
prefixes). With an unbounded cache the saving does not depend on the order; with a bounded
one it does, and :func:`prefix_order` (no-context prompts, then problem, start, C) puts rows
sharing a prefix next to each other so that the previous request holds it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

import numpy as np
import polars as pl
import yaml

from raylc.backends.config import BLOCK_SIZE
from raylc.backends.registry import plan_overhead
from raylc.io.plans import PlanError, capped, plan_tokenizer, write_whole
from raylc.text.prompts import DOCUMENT_COLUMNS, render_prompts
from raylc.text.sampling import Sampling, sample_spans, stride_expr
from raylc.text.tokenize import Tokenizer, count_texts, get_tokenizer

if TYPE_CHECKING:
    from raylc.spec import Job

_SENTINELS = ("\x00raylc-unit-a\x00", "\x00raylc-unit-b\x00")


@dataclass(frozen=True)
class PromptPieces:
    """Token counts of each problem's prompt pieces (problems in table order).

    ``head``/``tail``: tokens before and after the context; ``empty``: the whole C = 0 prompt;
    ``head_group``: problems with the same head text share an id; ``empty_shared``: tokens of
    the text all C = 0 prompts of the head group start with, less the last (it may merge);
    ``offset``: index of the problem's first unit in ``first`` / ``cum``; ``first[i]``: tokens
    unit i adds after the head (their boundary may merge); ``cum``: prefix sums (leading 0) of
    the tokens of ``sep + unit`` (a unit after another).
    """

    problem_id: pl.Series
    head: np.ndarray
    tail: np.ndarray
    empty: np.ndarray
    head_group: np.ndarray
    empty_shared: np.ndarray
    offset: np.ndarray
    first: np.ndarray
    cum: np.ndarray


def _one_span(problems: pl.DataFrame, C: int) -> pl.DataFrame:
    """The span (C, start 0) of every problem, to render one prompt per problem."""
    keys = [c for c in ("task", "problem_id", "L") if c in problems.columns]
    return problems.select(*keys, C=pl.lit(C, pl.Int64), start=pl.lit(0, pl.Int64))


def prompt_pieces(problems: pl.DataFrame, tokenizer: Tokenizer) -> PromptPieces:
    """Tokenize head, separator + unit and tail once per problem (not once per prompt).

    Document suites render a context as the document's own text between the first and last
    unit (:func:`raylc.text.prompts.render_prompts`); the plan counts it as the units joined by the
    template's separator, which differs from the document only in the whitespace between
    units."""
    problems = problems.drop(DOCUMENT_COLUMNS, strict=False)
    missing = {"problem_id", "L", "units", "question"} - set(problems.columns)
    if missing:
        raise PlanError(f"problems table lacks column(s) {sorted(missing)}: plan needs unit-sampled problems")
    if problems.height and (problems["units"].list.len() != problems["L"]).any():
        bad = problems.filter(problems["units"].list.len() != problems["L"])["problem_id"][0]
        raise PlanError(f"problem {bad!r}: L differs from its number of units")
    a, b = _SENTINELS
    probe = problems.with_columns(units=pl.lit(pl.Series([list(_SENTINELS)])).first(), L=pl.lit(2, pl.Int64))
    rendered = render_prompts(_one_span(probe, 2), probe)
    parts = pl.DataFrame({"t": rendered}).select(
        head=pl.col("t").str.split_exact(a, 1).struct.field("field_0"),
        rest=pl.col("t").str.split_exact(a, 1).struct.field("field_1"),
    ).with_columns(
        sep=pl.col("rest").str.split_exact(b, 1).struct.field("field_0"),
        tail=pl.col("rest").str.split_exact(b, 1).struct.field("field_1"),
    )
    if parts.height and parts["tail"].null_count():
        raise PlanError("the prompt template does not render a context as units joined by a separator")
    empty = render_prompts(_one_span(problems, 0), problems)
    n_units = problems["units"].list.len().to_numpy().astype(np.int64)
    flat = problems.select(head=parts["head"], sep=parts["sep"], unit=pl.col("units")).explode("unit").filter(
        pl.Series(np.repeat(n_units > 0, np.maximum(n_units, 1))))
    head = count_texts(parts["head"], tokenizer)
    head_group = parts["head"].rank("dense").to_numpy().astype(np.int64)
    common = {g: os.path.commonprefix(texts) for g, texts in
              pl.DataFrame({"g": head_group, "t": empty}).group_by("g").agg("t").iter_rows()}
    return PromptPieces(
        problem_id=problems["problem_id"],
        head=head,
        tail=count_texts(parts["tail"], tokenizer),
        empty=count_texts(empty, tokenizer),
        head_group=head_group,
        empty_shared=np.maximum(count_texts([common[g] for g in head_group], tokenizer) - 1, 0),
        offset=np.concatenate([[0], np.cumsum(n_units)[:-1]]).astype(np.int64) if len(n_units) else n_units,
        first=count_texts(flat.select(t=pl.concat_str("head", "unit"))["t"], tokenizer) - np.repeat(head, n_units),
        cum=np.concatenate([[0], np.cumsum(count_texts(flat.select(t=pl.concat_str("sep", "unit"))["t"], tokenizer))]),
    )


def _rows(spans: pl.DataFrame, pieces: PromptPieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(problem index, C, start) per span row."""
    index = pl.DataFrame({"problem_id": pieces.problem_id, "_p": np.arange(len(pieces.problem_id))})
    p = spans.select("problem_id").join(index, on="problem_id", how="left", maintain_order="left")["_p"]
    if p.null_count():
        raise PlanError(f"span refers to unknown problem_id {spans.filter(p.is_null())['problem_id'][0]!r}")
    return p.to_numpy(), spans["C"].to_numpy(), spans["start"].to_numpy()


def _context(pieces: PromptPieces, p: np.ndarray, C: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Tokens of units[start : start + C] joined (C >= 1), from the per-unit counts."""
    i = pieces.offset[p] + start
    last = np.minimum(i + C, len(pieces.cum) - 1)
    return np.where(C > 0, pieces.first[np.minimum(i, max(len(pieces.first) - 1, 0))] + pieces.cum[last]
                    - pieces.cum[np.minimum(i + 1, last)], 0)


def prompt_tokens(spans: pl.DataFrame, pieces: PromptPieces, overhead_tokens: int = 0,
                  window: Optional[int] = None) -> np.ndarray:
    """Estimated prompt tokens per span row (see the module docstring), plus ``overhead_tokens``,
    capped at ``window`` (the truncation window) when given."""
    p, C, start = _rows(spans, pieces)
    n = np.where(C == 0, pieces.empty[p], pieces.head[p] + pieces.tail[p] + _context(pieces, p, C, start))
    n = n + overhead_tokens
    return np.minimum(n, window) if window is not None else n


def span_tokens(job: Job, pieces: PromptPieces, overhead_tokens: int = 0) -> Callable[[pl.DataFrame], np.ndarray]:
    """:func:`prompt_tokens` of span rows for ``job``'s probe: capped at its truncation window
    (``max_model_len - max_tokens``) when it has one. What the plan counts, and what the run's
    prompt-token cap counts a pending request as."""
    max_len = job.window()
    window = max(max_len - job.max_tokens(), 1) if max_len else None

    def tokens(spans: pl.DataFrame) -> np.ndarray:
        return prompt_tokens(spans, pieces, overhead_tokens, window)

    return tokens


def prefix_order(spans: pl.DataFrame) -> pl.DataFrame:
    """Request rows ordered so that rows sharing a prompt prefix run together: the C = 0 (no
    context) prompts first, then by problem, start and C (each length extends the previous
    one's context), so the request just before each one holds its longest shared prefix."""
    keys = [k for k in ("task", "problem_id") if k in spans.columns]
    return spans.sort([pl.col("C") > 0, *keys, "start", "C"], maintain_order=True)


def _reused(spans: pl.DataFrame, pieces: PromptPieces, n: np.ndarray, block_size: int,
            lookback: Optional[int]) -> np.ndarray:
    """Prefix-cache hits per row in the given row order (block-level model, module docstring)."""
    if lookback is not None and lookback < 1:
        raise PlanError(f"lookback must be >= 1 or None, got {lookback}")
    p, C, start = _rows(spans, pieces)
    frame = pl.DataFrame({"r": np.arange(len(p)), "p": p, "g": np.where(C > 0, start, -1), "C": C,
                          "h": pieces.head_group[p], "empty": C == 0})

    def near(previous: pl.Expr) -> pl.Expr:  # an earlier row within the lookback
        return (previous.is_not_null() if lookback is None else (pl.col("r") - previous) <= lookback).fill_null(False)

    if lookback is None:
        prev_c = pl.col("C").cum_max().shift(1).over("p", "g")
    else:
        prev_c = pl.col("C").rolling_max_by("r", window_size=f"{lookback}i", closed="left").over("p", "g")
    hits = frame.select(prev_c=prev_c.fill_null(0), head=near(pl.col("r").shift(1).over("h")),
                        empty=pl.col("empty") & near(pl.col("r").shift(1).over("h", "empty")))
    shared_c = np.minimum(C, hits["prev_c"].to_numpy())
    ctx = np.where(shared_c > 0, pieces.head[p] + _context(pieces, p, shared_c, start), 0)
    shared = np.maximum(ctx, np.where(hits["head"].to_numpy(), pieces.head[p] - 1, 0))
    shared = np.maximum(shared, np.where(hits["empty"].to_numpy(), pieces.empty_shared[p], 0))
    shared = np.minimum(shared, n - 1)
    return np.maximum(shared, 0) // block_size * block_size


def _as_tokenizer(tokenizer: Union[Tokenizer, str, None]) -> Tokenizer:
    return tokenizer if isinstance(tokenizer, Tokenizer) else get_tokenizer(tokenizer)


def prefill_tokens(spans: pl.DataFrame, problems: pl.DataFrame, tokenizer: Union[Tokenizer, str, None] = None, *,
                   block_size: int = BLOCK_SIZE, lookback: Optional[int] = None) -> tuple[int, int]:
    """``(without_reuse, with_reuse)``: prompt prefill tokens of ``spans`` in their row order,
    without and with vLLM-style block-level prefix caching (module docstring; ``lookback``
    requests back, None = unbounded cache)."""
    pieces = prompt_pieces(problems, _as_tokenizer(tokenizer))
    n = prompt_tokens(spans, pieces)
    return int(n.sum()), int((n - _reused(spans, pieces, n, block_size, lookback)).sum())


def _cost_curves(cheapest: pl.DataFrame, tokens: Callable[[pl.DataFrame], np.ndarray]) -> dict[int, np.ndarray]:
    """Per partial length C: ``curve[s - 1]`` = prompt tokens of starts 0, s, 2s, ... over all problems."""
    curves = {}
    partial = cheapest.filter((pl.col("C") > 0) & (pl.col("C") < pl.col("L")))
    for C, rows in partial.group_by("C", maintain_order=True):
        C = int(C[0])
        m = (rows["L"] - C + 1).to_numpy()
        width = int(m.max())
        row = np.repeat(np.arange(len(m)), m)
        starts = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
        grid = rows.select("problem_id", "L", "C")[row].with_columns(start=pl.Series(starts))
        mat = np.zeros((len(m), width), dtype=np.int64)
        mat[row, starts] = tokens(grid)
        curves[C] = np.array([mat[:, ::s].sum() for s in range(1, width + 1)], dtype=np.int64)
    return curves


def _budget_sampling(sampling: Sampling, problems: pl.DataFrame, budget: int,
                     tokens: Callable[[pl.DataFrame], np.ndarray]) -> Sampling:
    """Take-every strides whose planned prompt tokens fit ``budget`` (search in the module docstring)."""
    def with_every(every) -> Sampling:
        return Sampling(**{**sampling.model_dump(), "strategy": "take_every", "stride_fraction": 0.0, "every": every})

    cheapest = sample_spans(problems, with_every(int(problems["L"].max()) + 1))
    single = (cheapest["C"] == 0) | (cheapest["C"] == cheapest["L"])
    fixed = int(tokens(cheapest.filter(single)).sum())
    curves = _cost_curves(cheapest.filter(~single), tokens)
    widest = max((len(c) for c in curves.values()), default=1)
    by_stride = np.full(widest, fixed, dtype=np.int64)
    for curve in curves.values():
        by_stride += curve[np.minimum(np.arange(widest), len(curve) - 1)]
    if by_stride[-1] > budget:
        raise PlanError(f"budget of {budget:,} prompt tokens is below the cheapest plan ({int(by_stride[-1]):,} "
                        "tokens: "
                        "one start per problem and length); raise --budget-tokens or sample fewer lengths")
    s_star = int(np.flatnonzero(by_stride <= budget)[0]) + 1
    strides = {C: min(s_star, len(curve)) for C, curve in curves.items()}
    left = budget - int(by_stride[s_star - 1])
    for C in sorted(curves, reverse=True):
        curve = curves[C]
        now = int(curve[strides[C] - 1])
        s = int(np.flatnonzero(curve <= now + left)[0]) + 1
        left -= int(curve[s - 1]) - now
        strides[C] = s
    if all(s == min(s_star, len(curves[C])) for C, s in strides.items()):
        return with_every(s_star)
    return with_every(strides)


#: Documents of at most this many units (and at least 4, where the ladder skips a length) on
#: the exponential ladder get :func:`short_documents_warning` (measured on 5-12 units).
SHORT_DOCUMENT_UNITS = 12


def short_documents_warning(L: pl.Series, sampling: Sampling) -> Optional[str]:
    """One line when problems of 4 .. :data:`SHORT_DOCUMENT_UNITS` units are sampled on the
    exponential ladder (C = 1, 2, 5, 10 below L): on such documents about a third of the
    problems stay below confidence 0.9, about one in six with every length listed
    (docs/dolce.md, the "short" and "short every" calibration generators); else None."""
    if sampling.lengths != "exponential":
        return None
    n = int(L.is_between(4, SHORT_DOCUMENT_UNITS).sum())
    if not n:
        return None
    return (f"{n:,} of {L.len():,} problems have 4 to {SHORT_DOCUMENT_UNITS} units: the exponential ladder gives "
            "them no span lengths but 1, 2, 5 and 10, and on such documents about a third of the problems stay "
            "below confidence 0.9, against about one in six with every length sampled; sampling.lengths can list "
            "every length (about L^2/2 spans a problem; lambda_p and k_p move with the lengths, docs/dolce.md)")


@dataclass(frozen=True)
class Plan:
    """What a run of ``job`` would send, counted without inference (:func:`plan`)."""

    job: Job
    spans: pl.DataFrame  # the sample stage's rows in prefix order, with ``prompt_tokens``
    lengths: pl.DataFrame  # per length: length, stride, observations, prompt_tokens
    tokenizer: str
    max_tokens: int
    prefill_without_reuse: int
    prefill_with_reuse: int
    budget_tokens: Optional[int] = None
    price_per_mtok: Optional[float] = None
    tokens_per_s_per_gpu: Optional[float] = None
    block_size: int = BLOCK_SIZE
    problems: int = 0

    @property
    def requests(self) -> int:
        return self.spans.height

    @property
    def prompt_tokens(self) -> int:
        return int(self.spans["prompt_tokens"].sum())

    @property
    def generated_tokens(self) -> int:
        """Upper bound: ``max_tokens`` per request."""
        return self.requests * self.max_tokens

    def gpu_hours(self, with_reuse: bool = True) -> Optional[float]:
        """(Prefill + generated tokens) / (tokens/s per GPU) / 3600, or None without a throughput."""
        if not self.tokens_per_s_per_gpu:
            return None
        prefill = self.prefill_with_reuse if with_reuse else self.prefill_without_reuse
        return (prefill + self.generated_tokens) / self.tokens_per_s_per_gpu / 3600.0

    @property
    def dollars(self) -> Optional[float]:
        """Price per million tokens x (prompt + generated tokens), or None without a price."""
        if self.price_per_mtok is None:
            return None
        return self.price_per_mtok * (self.prompt_tokens + self.generated_tokens) / 1e6

    def warnings(self) -> list[str]:
        """:func:`short_documents_warning` of the planned problems (DOLCE prompts report their
        fit in ``raylc check``)."""
        note = short_documents_warning(self.spans.unique(["task", "problem_id"])["L"], self.job.sampling)
        return [note] if note else []

    def summary(self) -> pl.DataFrame:
        """The plan as ``item, value`` rows (what ``raylc plan`` prints)."""
        saving = 1 - self.prefill_with_reuse / self.prefill_without_reuse if self.prefill_without_reuse else 0.0
        rows = [
            ("problems", f"{self.problems:,}"),
            ("requests (observations)", f"{self.requests:,}"),
            ("strategy", self.job.sampling.strategy),
            ("prompt tokens (planned)", f"{self.prompt_tokens:,}"),
            ("generated tokens (<= max_tokens each)", f"{self.generated_tokens:,} ({self.max_tokens} per request)"),
            ("tokenizer", self.tokenizer),
            ("prefill without prefix reuse", f"{self.prefill_without_reuse:,}"),
            (f"prefill with prefix reuse ({self.block_size}-token blocks)", f"{self.prefill_with_reuse:,}"),
            ("prefix reuse saving", f"{saving:.1%}"),
        ]
        if self.budget_tokens is not None:
            rows.insert(4, ("budget (prompt tokens)",
                            f"{self.budget_tokens:,} ({self.prompt_tokens / self.budget_tokens:.1%} used)"))
        if self.tokens_per_s_per_gpu:
            rows.append(("GPU-hours (with / without reuse)",
                         f"{self.gpu_hours(True):,.2f} / {self.gpu_hours(False):,.2f} at "
                         f"{self.tokens_per_s_per_gpu:,g} tokens/s/GPU"))
        if self.dollars is not None:
            rows.append(("cost", f"${self.dollars:,.2f} at ${self.price_per_mtok:g} per million tokens"))
        return pl.DataFrame(rows, schema=["item", "value"], orient="row")

    def to_yaml(self) -> str:
        """The planned job as YAML that ``raylc run`` accepts (every default filled in)."""
        data = self.job.resolved()
        data["sampling"] = self.job.sampling.model_dump()  # int keys for a per-length ``every``
        head = f"# Planned by `raylc plan`: {self.requests:,} requests, {self.prompt_tokens:,} prompt tokens"
        if self.budget_tokens is not None:
            head += f" (budget {self.budget_tokens:,})"
        return head + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def write(self, path: Union[str, Path]) -> None:
        """Write :meth:`to_yaml` to ``path`` (whole or not at all)."""
        write_whole(self.to_yaml(), path)


def _length_table(spans: pl.DataFrame, sampling: Sampling) -> pl.DataFrame:
    """Per length (C = 0, the partial lengths, ``L``): stride (None for single spans and random strategies),
    observations and prompt tokens."""
    random = sampling.strategy in ("sample_rate", "sample_ip_rate")
    single = (pl.col("C") == 0) | (pl.col("C") == pl.col("L"))
    return (
        spans.with_columns(length=pl.when(pl.col("C") == pl.col("L")).then(pl.lit("L"))
                           .otherwise(pl.col("C").cast(pl.String)),
                           order=pl.when(pl.col("C") == pl.col("L")).then(pl.lit(None)).otherwise(pl.col("C")),
                           stride=pl.when(single | pl.lit(random)).then(None).otherwise(stride_expr(sampling)))
        .group_by("length")
        .agg(order=pl.col("order").first(), stride=pl.col("stride").max(), observations=pl.len(),
             prompt_tokens=pl.col("prompt_tokens").sum())
        .sort("order", nulls_last=True)
        .drop("order")
    )


def plan(job: Job, budget_tokens: Optional[int] = None, *, tokenizer: Optional[str] = None,
         price_per_mtok: Optional[float] = None, tokens_per_s_per_gpu: Optional[float] = None,
         overhead_tokens: Optional[int] = None, block_size: int = BLOCK_SIZE, problems: Optional[pl.DataFrame] = None,
         pieces: Optional[PromptPieces] = None) -> Plan:
    """Plan ``job`` without inference: build + sample, count tokens, prefix reuse and cost.

    With ``budget_tokens`` the sampling becomes take-every with the per-length strides of the
    budget search (module docstring); ``tokenizer`` overrides :func:`job_tokenizer`;
    ``problems`` skips the build stage and ``pieces`` (:func:`prompt_pieces` of those problems
    with that tokenizer) the tokenization, e.g. to plan several budgets.
    """
    from raylc.dolce import stages  # here, not at import: stages may import prefix_order

    if budget_tokens is not None and budget_tokens < 1:
        raise PlanError(f"--budget-tokens must be >= 1, got {budget_tokens}")
    if price_per_mtok is not None and not (math.isfinite(price_per_mtok) and price_per_mtok >= 0):
        raise PlanError(f"--price-per-mtok must be a number >= 0, got {price_per_mtok}")
    if tokens_per_s_per_gpu is not None and not (math.isfinite(tokens_per_s_per_gpu) and tokens_per_s_per_gpu > 0):
        raise PlanError(f"--tokens-per-s-per-gpu must be a number > 0, got {tokens_per_s_per_gpu}")
    overhead_tokens = plan_overhead(job.probe) if overhead_tokens is None else overhead_tokens
    if block_size < 1 or overhead_tokens < 0:
        raise PlanError("block_size must be >= 1 and overhead_tokens >= 0")
    problems = stages.build(job) if problems is None else problems
    spec = tokenizer or job.count_tokenizer()
    pieces = prompt_pieces(problems, plan_tokenizer(spec)) if pieces is None else pieces
    max_tokens = job.max_tokens()
    tokens = span_tokens(job, pieces, overhead_tokens)
    if budget_tokens is not None and problems.height:
        job = capped(job.model_copy(update={"sampling": _budget_sampling(job.sampling, problems, budget_tokens,
                                                                         tokens)}), budget_tokens)
    spans = prefix_order(stages.sample(problems, job))
    spans = spans.with_columns(prompt_tokens=pl.Series(tokens(spans), dtype=pl.Int64))
    n = spans["prompt_tokens"].to_numpy()
    reused = _reused(spans, pieces, n, block_size, None)
    return Plan(
        job=job, spans=spans, lengths=_length_table(spans, job.sampling), tokenizer=spec or "default",
        max_tokens=max_tokens, prefill_without_reuse=int(n.sum()), prefill_with_reuse=int((n - reused).sum()),
        budget_tokens=budget_tokens, price_per_mtok=price_per_mtok, tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        block_size=block_size, problems=problems.height,
    )
