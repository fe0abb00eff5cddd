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
from typing import Sequence

import numpy as np
import polars as pl

from raylc.backends.base import Backend, Generation, MaxTokens, Prompt, RawFlags, generation, prompt_text
from raylc.scoring.judge import simulated_judgement
from raylc.spec import SimulatedProbe
from raylc.suites.planted import CLUE_RE, QUESTION_RE
from raylc.suites.samples import COMPLETION
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


def length_cases(samples: pl.DataFrame) -> dict[str, tuple[str, int]]:
    """What :class:`SimulatedLengthBackend` knows of a samples table: ``prompt -> (answer,
    context tokens)``; a two-call sample's first call answers :data:`SIMULATED_COT` (-1), its
    second call (the follow-up holding that reasoning) the gold answer."""
    cases: dict[str, tuple[str, int]] = {}
    for head, context, tail, gold, n, follow in samples.select(
        "head", "context", "tail", "gold", "context_tokens", "followup"
    ).iter_rows():
        prompt = head + context + tail
        if follow is None:
            cases[prompt] = (gold, n)
        else:
            cases[prompt] = (SIMULATED_COT, -1)
            cases[follow.replace(COMPLETION, SIMULATED_COT, 1)] = (gold, n)
    return cases


class SimulatedLengthBackend(SimulatedBackend):
    """The simulated probe on a length-controlled suite (:mod:`raylc.suites.samples`).

    It knows the ``cases`` it is given (``prompt -> (answer, context tokens)``, see
    :func:`length_cases`) and answers such a prompt correctly with probability
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
