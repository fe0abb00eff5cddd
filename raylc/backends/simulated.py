"""The simulated probe: a deterministic program standing in for an LLM in tests and demos.

It exists only to validate the pipeline and the DOLCE estimator; it is never a stand-in
for a real backend in results or claims. It reads the actual prompt text of the planted
suite (:mod:`raylc.suites.planted`), draws its randomness from a hash of the prompt and
the job seed, and behaves like the mixture of DOLCE Section 3.2: a closed-book noise
component (``knowledge_rate`` correct answers, ``guess_rate`` random codes) and an oracle
that answers iff a complete evidence run is visible, otherwise says "Unanswerable" or,
with ``wrong_rate``, gives the plausible wrong answer from the partial clues it saw. Given a
judge prompt it grades by word overlap (:func:`raylc.scoring.judge.simulated_judgement`).
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence

import numpy as np
import polars as pl

from raylc.backends.base import (
    PROMPT_PARTS,
    Backend,
    Generation,
    MaxTokens,
    Prompt,
    RawFlags,
    generation,
    prompt_text,
)
from raylc.backends.config import SimulatedProbe
from raylc.scoring.judge import simulated_judgement
from raylc.suites.planted import CLUE_RE, QUESTION_RE
from raylc.text.prompts import IDK_ANSWER
from raylc.text.tokenize import count_texts, get_tokenizer


def _complete_run(clues: list[tuple[int, int, int]]) -> int | None:
    """Code from the first run of clues 1..n appearing consecutively, else None."""
    for i, (idx, n, _) in enumerate(clues):
        if idx == 1 and i + n <= len(clues):
            run = clues[i : i + n]
            if all(c[0] == j + 1 and c[1] == n for j, c in enumerate(run)):
                return sum(c[2] for c in run) % 1000
    return None


class SimulatedBackend(Backend):
    """``generate(prompts) -> result dicts`` with the simulated probe's behaviour.

    ``answer(prompt)`` is the completion text; token counts use the default tokenizer,
    ``cached_tokens`` and ``latency_s`` are None and ``finish_reason`` is ``"stop"``.
    """

    name = "simulated"

    def __init__(self, config: SimulatedProbe, knowledge: dict[str, str], seed: int = 0):
        self.config = config
        self.knowledge = knowledge  # what the probe "memorized": vault -> code
        self.seed = seed

    def _rng(self, prompt: str) -> np.random.Generator:
        digest = hashlib.blake2b(prompt.encode(), digest_size=8, key=str(self.seed).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest, "little"))

    def answer(self, prompt: str) -> str:
        judged = simulated_judgement(prompt)  # as a judge (``judge: {backend: simulated}``)
        if judged is not None:
            return judged
        cfg = self.config
        rng = self._rng(prompt)
        u_know, u_miss, u_noise, guess = rng.random(), rng.random(), rng.random(), int(rng.integers(0, 1000))
        q = QUESTION_RE.search(prompt)
        vault = q.group(1) if q else ""
        if u_know < cfg.knowledge_rate and vault in self.knowledge:
            return self.knowledge[vault]
        clues = [(int(a), int(b), int(d)) for a, b, v, d in CLUE_RE.findall(prompt) if v == vault]
        code = _complete_run(clues)
        if code is not None and u_miss >= cfg.idk_rate:
            return str(code)
        if u_noise < cfg.guess_rate:
            return str(guess)
        if u_noise < cfg.guess_rate + cfg.wrong_rate:
            return str(sum(c[2] for c in clues) % 1000) if clues else str(guess)
        return IDK_ANSWER

    def generate(self, prompts: Sequence[Prompt], max_tokens: MaxTokens = None,
                 raw: RawFlags = None) -> list[Generation]:
        tok = get_tokenizer(None)
        texts = [prompt_text(p) for p in prompts]
        answers = [self.answer(p) for p in texts]
        n_prompt = count_texts(texts, tok)
        n_answer = count_texts(answers, tok)
        # no model, no latency: None keeps repeated runs' tables identical
        return [generation(text, prompt_tokens=int(n), generated_tokens=int(m), finish_reason="stop", latency_s=None)
                for text, n, m in zip(answers, n_prompt, n_answer)]


SIMULATED_COT = "Let me read the context step by step. (simulated reasoning)"


class SimulatedLengthBackend(SimulatedBackend):
    """The simulated probe on a length-controlled suite (:mod:`raylc.suites.samples`).

    It knows the ``cases`` it is given (``prompt -> (answer, context tokens)``, see
    :class:`SimulatedSamplesBackend`) and answers such a prompt correctly with probability
    ``accuracy * 2 ** (-context_tokens / half_life_tokens)`` (``knowledge_rate`` with no
    context), else "Unanswerable", seeded by the prompt; a case with -1 context tokens (a
    chain-of-thought first call) always gets its answer. Other prompts get the planted behaviour.
    """

    def __init__(self, config: SimulatedProbe, cases: dict[str, tuple[str, int]], seed: int = 0):
        super().__init__(config, {}, seed)
        self.cases = cases

    def answer(self, prompt: str) -> str:
        case = self.cases.get(prompt)
        if case is None:
            return super().answer(prompt)
        gold, n = case
        if n < 0:
            return gold
        cfg = self.config
        p = cfg.knowledge_rate if n == 0 else cfg.accuracy * 2.0 ** (-n / cfg.half_life_tokens)
        return gold if self._rng(prompt).random() < p else IDK_ANSWER


SAMPLE_KEYS = ("task", "sample_id", "length")


class SimulatedSamplesBackend(SimulatedBackend):
    """The simulated probe of a length-sweep run: it knows the samples table it was built with,
    and serves a batch of request rows (found by their ``task, sample_id, length, round``) with a
    :class:`SimulatedLengthBackend` knowing each prompt's gold answer and context tokens, or
    :data:`SIMULATED_COT` (-1) for the first call of a two-call sample. Without rows (judge
    calls) it has the planted behaviour."""

    def __init__(self, config: SimulatedProbe, samples: pl.LazyFrame, seed: int = 0):
        super().__init__(config, {}, seed)
        self.samples = samples.select(*SAMPLE_KEYS, "gold", pl.col("context_tokens").cast(pl.Int64),
                                      two_calls=pl.col("followup").is_not_null()).collect()

    def for_rows(self, rows: pl.DataFrame) -> SimulatedBackend:
        if not set(SAMPLE_KEYS) <= set(rows.columns):
            return self
        first_of_two = (pl.col("round") == 1) & pl.col("two_calls")
        known = rows.join(self.samples, on=list(SAMPLE_KEYS), how="left", maintain_order="left").select(
            prompt=pl.concat_str(PROMPT_PARTS),
            answer=pl.when(first_of_two).then(pl.lit(SIMULATED_COT)).otherwise(pl.col("gold")),
            tokens=pl.when(first_of_two).then(pl.lit(-1, pl.Int64)).otherwise(pl.col("context_tokens")),
        )
        cases = dict(zip(known["prompt"].to_list(), zip(known["answer"].to_list(), known["tokens"].to_list())))
        return SimulatedLengthBackend(self.config, cases, seed=self.seed)


def simulated_backend(config: SimulatedProbe, table: Optional[pl.LazyFrame], seed: int = 0) -> SimulatedBackend:
    """The simulated probe knowing the suite's built ``table``: a length sweep's samples
    (:class:`SimulatedSamplesBackend`), or a DOLCE problems table (its answers, by problem id)."""
    names = table.collect_schema().names() if table is not None else []
    if "gold" in names:
        return SimulatedSamplesBackend(config, table, seed)  # type: ignore[arg-type]
    if {"problem_id", "answer"} <= set(names):
        known = table.select("problem_id", pl.col("answer").cast(pl.String)).collect()  # type: ignore[union-attr]
        return SimulatedBackend(config, dict(zip(known["problem_id"].to_list(), known["answer"].to_list())), seed)
    return SimulatedBackend(config, {}, seed)
