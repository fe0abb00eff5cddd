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

# numpy's SeedSequence (numpy/random/bit_generator.pyx: hashmix, mix, mix_entropy,
# generate_state) and PCG64 (numpy/random/src/pcg64/pcg64.h: pcg_setseq_128_srandom_r, the
# XSL-RR output), restated over many seeds at once: the draws of ``np.random.default_rng(seed)``.
_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645


def _seed_state(seeds: np.ndarray) -> list[np.ndarray]:
    """``SeedSequence(seed).generate_state(4, np.uint64)`` per uint64 seed: 4 arrays (N,). A seed
    is its little-endian 32-bit words (one or two: the second is 0 where absent, as a pool word
    beyond the entropy is hashmix(0)); the pool has 4 words."""
    hc = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hc
        value = value ^ np.uint32(hc)
        hc = (hc * _MULT_A) & _M32
        value = value * np.uint32(hc)
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return out ^ (out >> np.uint32(16))

    zero = np.zeros(seeds.shape, dtype=np.uint32)
    pool = [hashmix((seeds & np.uint64(_M32)).astype(np.uint32)), hashmix((seeds >> np.uint64(32)).astype(np.uint32)),
            hashmix(zero), hashmix(zero)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    hc, words = _INIT_B, []
    for i in range(8):
        value = pool[i % 4] ^ np.uint32(hc)
        hc = (hc * _MULT_B) & _M32
        value = value * np.uint32(hc)
        words.append((value ^ (value >> np.uint32(16))).astype(np.uint64))
    return [words[2 * j] | (words[2 * j + 1] << np.uint64(32)) for j in range(4)]


def _mul_hi(a: np.ndarray, b: int) -> np.ndarray:
    """The high 64 bits of a * b (a uint64 array, b < 2**64), by 32-bit limbs."""
    m = np.uint64(_M32)
    a0, a1, b0, b1 = a & m, a >> np.uint64(32), np.uint64(b & _M32), np.uint64(b >> 32)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> np.uint64(32)) + (p01 & m) + (p10 & m)
    return p11 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (mid >> np.uint64(32))


def _pcg_step(hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray):
    """state * multiplier + inc (mod 2**128) on (hi, lo) halves."""
    m_hi, m_lo = _PCG_MULT >> 64, _PCG_MULT & (2**64 - 1)
    new_hi = _mul_hi(lo, m_lo) + lo * np.uint64(m_hi) + hi * np.uint64(m_lo)
    new_lo = lo * np.uint64(m_lo)
    out_lo = new_lo + inc_lo
    return new_hi + inc_hi + (out_lo < new_lo).astype(np.uint64), out_lo


def prompt_draws(seeds: np.ndarray) -> np.ndarray:
    """(N, 4): what ``g = np.random.default_rng(seed)`` draws first for each uint64 seed,
    ``g.random()`` three times and ``g.integers(0, 1000)``: PCG64's first four outputs, a double
    from the top 53 bits, the integer by Lemire's method on the low 32 bits (the generator itself
    where that method would draw again, about once in 14 million)."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    s_hi, s_lo, q_hi, q_lo = _seed_state(seeds)
    one = np.uint64(1)
    inc_hi, inc_lo = (q_hi << one) | (q_lo >> np.uint64(63)), (q_lo << one) | one
    hi, lo = inc_hi, inc_lo  # state 0, one step
    lo2 = lo + s_lo
    hi, lo = _pcg_step(hi + s_hi + (lo2 < lo).astype(np.uint64), lo2, inc_hi, inc_lo)
    out = np.empty((seeds.size, 4), dtype=np.uint64)
    for j in range(4):
        hi, lo = _pcg_step(hi, lo, inc_hi, inc_lo)
        x, rot = hi ^ lo, hi >> np.uint64(58)
        out[:, j] = (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))
    draws = np.empty((seeds.size, 4))
    draws[:, :3] = (out[:, :3] >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    scaled = (out[:, 3] & np.uint64(_M32)) * np.uint64(1000)
    draws[:, 3] = (scaled >> np.uint64(32)).astype(np.float64)
    for i in np.flatnonzero((scaled & np.uint64(_M32)) < np.uint64((_M32 - 999) % 1000)):
        g = np.random.default_rng(int(seeds[i]))
        draws[i] = (g.random(), g.random(), g.random(), g.integers(0, 1000))
    return draws


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

    def draws(self, prompts: Sequence[str]) -> np.ndarray:
        """Per prompt, :func:`prompt_draws` of its seed: the keyed hash of the prompt and the job
        seed (blake2b, 8 bytes, little-endian)."""
        key = str(self.seed).encode()
        seeds = np.fromiter((int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8, key=key).digest(), "little")
                             for p in prompts), dtype=np.uint64, count=len(prompts))
        return prompt_draws(seeds)

    def answer(self, prompt: str, draws: Optional[np.ndarray] = None) -> str:
        """The completion of ``prompt``; ``draws``: its row of :meth:`draws` (else drawn here)."""
        judged = simulated_judgement(prompt)  # as a judge (``judge: {backend: simulated}``)
        if judged is not None:
            return judged
        cfg = self.config
        u_know, u_miss, u_noise, guess = self.draws([prompt])[0] if draws is None else draws
        guess = int(guess)
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
        answers = [self.answer(p, d) for p, d in zip(texts, self.draws(texts))]
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

    def answer(self, prompt: str, draws: Optional[np.ndarray] = None) -> str:
        case = self.cases.get(prompt)
        if case is None:
            return super().answer(prompt, draws)
        gold, n = case
        if n < 0:
            return gold
        cfg = self.config
        p = cfg.knowledge_rate if n == 0 else cfg.accuracy * 2.0 ** (-n / cfg.half_life_tokens)
        u = self.draws([prompt])[0, 0] if draws is None else draws[0]
        return gold if u < p else IDK_ANSWER


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
