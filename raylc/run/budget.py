"""The run-time cap on prompt tokens (``inference.max_prompt_tokens``, ``raylc run --max-prompt-tokens``).

Before a stage sends its pending requests (the probe's in the infer stage, an LLM judge's in a
length run's score stage: both share the cap), :class:`TokenBudget` walks them in the order the
scheduler sends them (each chunk's rows in order, chunk after chunk) and keeps every request
whose prompt tokens fit in what is left of the cap (:func:`first_fit`): a request that does not
fit is not sent, and those after it are still offered what is left. What is left at the start
is the cap less the prompt tokens the run has sent (the backend's count: its stored successes,
as ``raylc status`` shows them, and each stored failure the server answered,
:meth:`raylc.run.runner.Run._sent`); a pending request is counted by the backend, exactly,
when it can (:meth:`~raylc.backends.registry.BackendPlugin.prompt_counter`: vLLM's prepare
stage), else as ``raylc plan`` counts it (the family's ``count``), plus what the backend adds to
its text, at most (its chat template: :meth:`~raylc.backends.registry.BackendPlugin.added_tokens`).
When a request was left out, the stage stops once the kept ones are stored
(:class:`~raylc.run.errors.BudgetReached`); the same run with a higher cap sends the rest, and
nothing twice.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np
import polars as pl

from raylc.run.errors import BudgetReached
from raylc.run.manifest import Budget

Count = Callable[[pl.DataFrame], np.ndarray]  #: prompt tokens of each request row, as the plan counts them


def first_fit(tokens: np.ndarray, room: int) -> tuple[np.ndarray, int]:
    """Which requests to send, in order: each one whose ``tokens`` fit in ``room`` less those
    taken before it; and what is left of ``room``. The taken ones sum to at most ``room``, and
    any one left out would take the sum over ``room``."""
    tokens = np.asarray(tokens, dtype=np.int64)
    take = np.zeros(tokens.size, dtype=bool)
    cum = np.cumsum(tokens)
    n = int(np.searchsorted(cum, room, side="right"))  # the longest prefix that fits, at once
    take[:n] = True
    left = room - (int(cum[n - 1]) if n else 0)
    for i in np.flatnonzero(tokens[n:] <= left) + n:  # what is left only shrinks: no other row can fit
        if tokens[i] <= left:
            take[i] = True
            left -= int(tokens[i])
    return take, left


class TokenBudget:
    """The cap ``max_prompt_tokens`` of a stage whose stored requests were sent with ``sent``
    prompt tokens: :meth:`select` keeps the pending requests that fit and counts those left out."""

    def __init__(self, max_prompt_tokens: int, sent: int):
        self.max_prompt_tokens = max_prompt_tokens
        self.left = max_prompt_tokens - sent
        self.kept = self.left_out = self.left_out_tokens = 0

    def select(self, chunks: Iterable[pl.DataFrame], count: Count) -> Iterator[pl.DataFrame]:
        """The rows of ``chunks`` that fit, chunk by chunk (:func:`first_fit` over the rows in order)."""
        for chunk in chunks:
            tokens = np.asarray(count(chunk), dtype=np.int64)
            take, self.left = first_fit(tokens, self.left)
            self.kept += int(take.sum())
            self.left_out += int((~take).sum())
            self.left_out_tokens += int(tokens[~take].sum())
            yield chunk.filter(pl.Series(take, dtype=pl.Boolean))

    def reached(self, sent: int, stored: int, stage: str, run_id: str) -> BudgetReached:
        """The stop, once the kept requests are stored: ``sent`` prompt tokens and ``stored``
        requests of the run in its shards, the probe's and the judge's (the backend's count)."""
        budget = Budget(max_prompt_tokens=self.max_prompt_tokens, sent=sent, stored=stored, left=self.left_out,
                        left_tokens=self.left_out_tokens)
        return BudgetReached(f"stopped at its budget during {stage}: {budget_line(budget)}; re-run with --run-id "
                             f"{run_id} and a higher --max-prompt-tokens to resume", budget)


def budget_line(budget: Budget) -> str:
    """A stopped stage's budget in words (the stop's line, ``raylc status``, ``raylc report``)."""
    return (f"{budget.sent:,} of {budget.max_prompt_tokens:,} prompt tokens sent (inference.max_prompt_tokens); "
            f"{budget.stored:,} requests stored, {budget.left:,} not sent (about {budget.left_tokens:,} prompt tokens "
            "more)")
