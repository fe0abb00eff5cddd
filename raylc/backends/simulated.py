"""The simulated probe: a deterministic program standing in for an LLM in tests and demos.

It exists only to validate the pipeline and the DOLCE estimator; it is never a stand-in
for a real backend in results or claims. It reads the actual prompt text of the planted
suite (:mod:`raylc.suites.planted`), draws its randomness from a hash of the prompt and
the job seed, and behaves like the mixture of DOLCE Section 3.2: a closed-book noise
component (``knowledge_rate`` correct answers, ``guess_rate`` random codes) and an oracle
that answers iff a complete evidence run is visible, otherwise says "Unanswerable" or,
with ``wrong_rate``, gives the plausible wrong answer from the partial clues it saw.
"""

from __future__ import annotations

import hashlib

import numpy as np

from raylc.backends.base import Backend, Generation, generation
from raylc.prompts import IDK_ANSWER
from raylc.spec import SimulatedProbe
from raylc.suites.planted import CLUE_RE, QUESTION_RE
from raylc.tokenize import get_tokenizer


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

    def generate(self, prompts: list[str]) -> list[Generation]:
        tok = get_tokenizer(None)
        out = []
        for p in prompts:  # no model, no latency: None keeps repeated runs' tables identical
            text = self.answer(p)
            out.append(
                generation(
                    text, prompt_tokens=tok.count(p), generated_tokens=tok.count(text), finish_reason="stop",
                    latency_s=None,
                )
            )
        return out
