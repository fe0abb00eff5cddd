"""HELMET synthetic recall (Yen et al., Section 2.1 "Synthetic recall", Appendix B.5), length-controlled.

Four tasks, each sample rebuilt at every target length (tokens of the context, never over it,
as close below it as whole units allow):

* ``json_kv`` -- a JSON object of random UUID keys and values (Liu et al., 2023, as HELMET
  B.5 describes); the queried record sits at the sample's depth. Prompt: HELMET's
  ``load_json_kv`` template (the JSON first, then the instruction, ``Key: "<key>"`` and
  "Corresponding value:"). SubEM.
* ``mk_needle_number`` / ``mk_needle_uuid`` -- RULER NIAH MultiKey variants 2 and 3: the
  haystack is noisy needles "One of the special magic numbers for <key> is: <value>." with
  other keys (word keys and 7-digit numbers; UUID keys and values), the gold needle at the
  sample's depth (HELMET E.1: "RULER MK Needle, where the context is other distracting
  needles"). Scored with ``recall`` (RULER ``string_match_all``), as HELMET's
  ``scripts/collect_results.py`` reports ``ruler_niah_mk_2`` / ``ruler_niah_mk_3``
  (``ruler_recall``), not SubEM: a UUID written without hyphens, or a number with thousands
  separators, is a miss.
* ``mv_needle`` -- RULER NIAH MultiValue: four needles with the same key and different
  numbers in a haystack of RULER's repeated noise sentences, or of essay sentences when the
  suite's ``haystack`` names a pool (RULER's essays), at distinct random depths of RULER's
  40-point depth grid; scored with ``recall``, the fraction of the four values in the output
  (HELMET: "the percentage of the ground truth answers that are substrings in the
  generation"; RULER ``string_match_all``).

The RULER tasks use HELMET's ``load_ruler`` templates (``data.py``): the singular one for the
multi-key needles, the plural one for the multi-value needle, the question and the answer
prefix on two lines. Generation budgets are ``configs/recall.yaml``'s (50, 100, 50, 100 new
tokens) and, as that config sets ``use_chat_template: false``, prompts go to the model without
the chat template (``raw_prompt``; ``chat_template: probe`` gives them the probe's setting).
Not reproduced: JSON KV's two demonstrations (``shots: 2``, drawn from HELMET's released data
files) and the exact ``context`` / ``question`` text of those files, which raylc generates.

The key, values and the unit stream (noise records, noisy needles or haystack sentences) of a
sample are drawn once from ``(seed, task, sample)``, so a shorter context is a prefix of a
longer one with the gold placed at the same relative depth. Depths of the gold key or needle are
``linspace(0, 1, depths)`` cycled over samples (HELMET B.5: six evenly spaced depths; 0.0
is the start of the context); ``depth`` is null for ``mv_needle``, whose four needles have
no single depth.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, Optional

import numpy as np
import polars as pl
from pydantic import Field

from raylc.io.schemas import declare
from raylc.suites.context import load_distractors
from raylc.suites.registry import SuiteInfo, Task, register_suite
from raylc.suites.samples import LENGTHS_DEFAULT, SAMPLE_SCHEMA, LengthSuite, check_samples
from raylc.text.tokenize import Tokenizer, count_texts, get_tokenizer

HELMET_RECALL_TASKS = ("json_kv", "mk_needle_number", "mk_needle_uuid", "mv_needle")


class HelmetRecallSuite(LengthSuite):
    """HELMET's synthetic recall tasks (Section 2.1, Appendix B.5): JSON KV, RULER multi-key
    needle with number / UUID values (the haystack is noisy needles with other keys) and
    multi-value needle (four values for one key, in RULER's noise sentences unless ``haystack``
    names essays), JSON KV SubEM-scored,
    the needles by RULER recall (HELMET's ``ruler_recall``); the gold key or needle sits at
    ``depths`` evenly spaced depths across samples. ``haystack`` optionally names a document
    pool (JSONL/JSON/Parquet/CSV with a ``text`` column, local or s3://; RULER's
    ``PaulGrahamEssays.json`` as published) for the multi-value needle's essay; unset, RULER's
    repeated noise sentences are the filler."""

    kind: Literal["helmet_recall"] = Field(description="`helmet_recall`: HELMET's synthetic recall tasks.")
    tasks: list[Literal[HELMET_RECALL_TASKS]] = Field(  # type: ignore[valid-type]
        default=list(HELMET_RECALL_TASKS), min_length=1, description="The tasks to build.")
    depths: int = Field(default=6, ge=1, description=(
        "Depths of the gold key or needle, `linspace(0, 1, depths)` cycled over the samples (HELMET: six)."))
    haystack: Optional[str] = Field(default=None, description=(
        "A document pool (JSONL/JSON/Parquet/CSV with a `text` column, local or s3://; RULER's "
        "`PaulGrahamEssays.json` as published) whose sentences fill `mv_needle`'s context; null: RULER's repeated "
        "noise sentences."))
    chat_template: Literal["helmet", "probe"] = Field(default="helmet", description=(
        "`helmet`: prompts without the chat template (HELMET configs/recall.yaml `use_chat_template: false`); "
        "`probe`: the probe's `chat_template` setting."))

    columns = declare(("depth", pl.Float64, "Depth of the gold key or needle in the context (0: its start); null "
                                           "for `mv_needle`, whose four needles sit at random depths."))


__all__ = ["HelmetRecallError", "build_helmet_recall", "depth_grid", "fit_units", "needle", "uuids"]


class HelmetRecallError(ValueError):
    """A target length too short for a task's needles; the message is one line. (An unusable
    haystack pool raises :class:`raylc.suites.context.PoolError`.)"""


_ADJECTIVES = (
    "abundant", "agile", "amber", "ancient", "brave", "breezy", "brisk", "calm", "clever", "cobalt", "cosmic",
    "crimson", "curious", "dapper", "dusty", "eager", "electric", "elegant", "fancy", "fierce", "fluffy", "frosty",
    "gentle", "giant", "glossy", "golden", "grumpy", "hollow", "humble", "icy", "jolly", "lazy", "lively", "lucky",
    "mellow", "misty", "modern", "noisy", "odd", "olive", "patient", "plain", "polite", "proud", "quick", "quiet",
    "rapid", "rusty", "sandy", "scarlet", "shiny", "silent", "silver", "sleepy", "smooth", "sour", "spicy",
    "steady", "stormy", "sunny", "tame", "tidy", "velvet", "wild",
)
_NOUNS = (
    "anchor", "apple", "badge", "basket", "beacon", "bison", "blanket", "bridge", "bucket", "cabin", "camel",
    "candle", "canyon", "castle", "cedar", "comet", "coral", "crane", "desert", "dolphin", "engine", "falcon",
    "feather", "ferry", "forest", "galaxy", "garden", "glacier", "harbor", "helmet", "island", "jacket", "kettle",
    "ladder", "lantern", "lemon", "magnet", "meadow", "mirror", "monkey", "needle", "orchard", "otter", "parrot",
    "pebble", "pepper", "piano", "pillow", "planet", "pocket", "rabbit", "ray", "river", "rocket", "saddle",
    "shadow", "spider", "statue", "teapot", "tiger", "tunnel", "violin", "wagon", "window",
)
#: RULER's "noise" haystack (NIAH variant 1), the filler when no ``haystack`` pool is given
RULER_NOISE = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
#: RULER's needle depth grid (``np.round(np.linspace(0, 100, num=40))`` percent)
RULER_DEPTHS = np.round(np.linspace(0, 100, num=40)) / 100
_MV_VALUES = 4
_CHUNK = 512  # units drawn per step: fixed, so the unit stream does not depend on the target length
_TASK_INDEX = {t: i for i, t in enumerate(HELMET_RECALL_TASKS)}
#: HELMET configs/recall.yaml ``generation_max_length`` (ruler_niah_mk_2, mk_3, mv, json_kv; the same in
#: configs/recall_short.yaml), both with ``use_chat_template: false``
_MAX_TOKENS = {"json_kv": 100, "mk_needle_number": 50, "mk_needle_uuid": 100, "mv_needle": 50}
#: HELMET scripts/collect_results.py: json_kv substring_exact_match, the RULER needles ruler_recall;
#: json_kv's ``post_process`` (data.py ``load_json_kv``) also scores the text after "corresponding
#: value:" and keeps the max, which for a UUID answer is the raw output's SubEM
_METRIC = {"json_kv": "subem", "mk_needle_number": "recall", "mk_needle_uuid": "recall", "mv_needle": "recall"}

#: HELMET data.py ``load_json_kv``: ``{context}`` then this instruction, the demonstrations (none here) and the key
_JSON_KV_INSTRUCTION = "\n\nExtract the value corresponding to the specified key in the JSON object below.\n\n"


def uuids(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` random version-4 UUID strings drawn from ``rng``."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    hexes = pl.Series(np.frombuffer(raw.tobytes().hex().encode(), dtype="S32").astype(str))
    parts = [hexes.str.slice(a, b - a) for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))]
    return pl.select(pl.concat_str(parts, separator="-")).to_series().to_list()


def _numbers(rng: np.random.Generator, n: int, avoid: Sequence[int] = ()) -> np.ndarray:
    """7-digit numbers (RULER's ``numbers`` values), none equal to one in ``avoid``."""
    values = rng.integers(10**6, 10**7, size=n)
    for a in avoid:  # a collision becomes the next number: keeps the draw count fixed
        values = np.where(values == a, (values - 10**6 + 1) % (9 * 10**6) + 10**6, values)
    return values


def _word_keys(rng: np.random.Generator, n: int, avoid: int = -1) -> list[str]:
    """RULER ``words`` keys: adjective-noun pairs; pair index ``avoid`` (the gold key) never appears."""
    size = len(_ADJECTIVES) * len(_NOUNS)
    idx = rng.integers(0, size, size=n)
    idx = np.where(idx == avoid, (idx + 1) % size, idx)
    return [f"{_ADJECTIVES[i // len(_NOUNS)]}-{_NOUNS[i % len(_NOUNS)]}" for i in idx]


def needle(kind: str, key: str, value: str) -> str:
    """RULER's needle sentence; ``kind`` is ``numbers`` or ``uuids``."""
    return f"One of the special magic {kind} for {key} is: {value}."


#: HELMET ``data.py`` ``load_ruler``: (user template, answer prefix) of the multi-value needle (plural) and of
#: the other needles (singular); the prompt is ``user + "\n" + prefix``
HELMET_NIAH_PLURAL = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz "
    "you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for "
    "{query} mentioned in the provided text?",
    "The special magic {type_needle_v} for {query} mentioned in the provided text are")
HELMET_NIAH_SINGULAR = (
    "A special magic {type_needle_v} is hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {type_needle_v} afterwards.\n{context}\nWhat is the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?",
    "The special magic {type_needle_v} for {query} mentioned in the provided text is")


def _ruler_prompt(kind: str, key: str, n_answers: int) -> tuple[str, str, str]:
    """HELMET's RULER needle prompt (head, tail, question): the singular template for one answer
    (the multi-key needles), with the needle type in the singular as RULER's ``niah.py`` makes it
    ("numbers" -> "number"), the plural one for several (the multi-value needle)."""
    user, prefix = HELMET_NIAH_SINGULAR if n_answers == 1 else HELMET_NIAH_PLURAL
    kind = kind[:-1] if n_answers == 1 else kind
    filled = f"{user}\n{prefix}".replace("{type_needle_v}", kind).replace("{query}", key)
    head, tail = filled.split("{context}")
    return head, tail, tail[1:tail.index("?") + 1]


def depth_grid(n_samples: int, depths: int) -> np.ndarray:
    """Depth of each sample's gold: ``linspace(0, 1, depths)`` cycled over the samples."""
    return np.linspace(0.0, 1.0, depths)[np.arange(n_samples) % depths]


# --------------------------------------------------------------------------------------------- #
# fitting a unit stream with needles at fixed depths into a token budget
# --------------------------------------------------------------------------------------------- #


class _Stream:
    """Units drawn lazily in fixed chunks, each with its estimated cost ``count(sep + unit)``."""

    def __init__(self, draw: Callable[[int], list[str]], sep: str, tok: Tokenizer):
        self.draw, self.sep, self.tok = draw, sep, tok
        self.units: list[str] = []
        self.cum = np.zeros(1, dtype=np.int64)  # cum[k] = estimated cost of the first k units

    def _grow(self) -> None:
        new = self.draw(_CHUNK)
        if not new:
            raise HelmetRecallError("the haystack ran out of units")
        self.units.extend(new)
        costs = count_texts([self.sep + u for u in new], self.tok)
        self.cum = np.concatenate([self.cum, self.cum[-1] + np.cumsum(costs)])

    def fit(self, start: int, tokens: int) -> int:
        """How many units after the first ``start`` fit in ``tokens`` by the estimated costs."""
        while self.cum[-1] - self.cum[start] <= tokens:
            self._grow()
        return int(np.searchsorted(self.cum, self.cum[start] + tokens, side="right")) - 1 - start

    def drop(self, k: int, tokens: int) -> int:
        """How many of the first ``k`` units to drop from the end to save ``tokens`` (at least 1)."""
        saved = self.cum[k] - self.cum[: k + 1][::-1]
        return max(1, min(k, int(np.searchsorted(saved, tokens, side="left"))))


def fit_units(
    tok: Tokenizer,
    budget: int,
    stream: _Stream,
    needles: Sequence[str],
    depths: Sequence[float],
    wrap: tuple[str, str] = ("", ""),
) -> tuple[str, int]:
    """The context with the most stream units (and every needle at its depth) within ``budget``
    tokens: ``wrap[0] + sep.join(units[:k] with needle j before unit round(depths[j] * k)) +
    wrap[1]``, returned with its exact token count.

    The largest ``k`` is found from the units' estimated costs and checked with exact counts
    (token counts are not exactly additive), so the result is never over ``budget``.
    """
    order = np.argsort(np.asarray(depths, dtype=float), kind="stable")

    def text(k: int) -> str:
        at = np.round(np.asarray(depths, dtype=float)[order] * k).astype(int)
        items: list[str] = []
        prev = 0
        for pos, j in zip(at, order):
            items.extend(stream.units[prev:pos])
            items.append(needles[j])
            prev = pos
        items.extend(stream.units[prev:k])
        return wrap[0] + stream.sep.join(items) + wrap[1]

    n = tok.count(text(0))
    if n > budget:
        raise HelmetRecallError(f"target length {budget} is below the {n} tokens of the needles alone")
    k = stream.fit(0, budget - n)
    n = tok.count(text(k))
    while n > budget:  # estimates were low: drop units from the end
        k -= stream.drop(k, n - budget)
        n = tok.count(text(k))
    while True:  # estimates were high: add units while they fit
        m = max(1, stream.fit(k, budget - n))
        n_more = tok.count(text(k + m))
        if n_more <= budget:
            k, n = k + m, n_more
            continue
        lo, hi = k, k + m  # text(lo) fits, text(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            n_mid = tok.count(text(mid))
            lo, hi, n = (mid, hi, n_mid) if n_mid <= budget else (lo, mid, n)
        return text(lo), n


# --------------------------------------------------------------------------------------------- #
# the four tasks: per-sample core (key, values, unit stream) and prompt pieces
# --------------------------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=4)
def _pool_sentences(uri: str, tokenizer: str | None) -> tuple[str, ...]:
    """Sentences of the haystack pool's documents (:func:`raylc.suites.context.load_distractors`:
    a ``text`` column, duplicates dropped), in pool order."""
    pool = load_distractors(uri, get_tokenizer(tokenizer))
    return tuple(s for doc in pool.texts for s in re.split(r"(?<=[.!?])\s+", doc) if s)


def _cycle(units: Sequence[str], offset: int) -> Callable[[int], list[str]]:
    it: Iterator[str] = itertools.islice(itertools.cycle(units), offset, None)
    return lambda n: list(itertools.islice(it, n))


class _Sample:
    """One sample of a task: what is asked and the unit stream its contexts are cut from."""

    def __init__(self, task: str, rng: np.random.Generator, depth: float, haystack: tuple[str, ...] | None,
                 tok: Tokenizer):
        self.task, self.depth = task, depth
        if task == "json_kv":
            key, value = uuids(rng, 2)
            self.needles, self.depths = [f'"{key}": "{value}"'], [depth]
            self.answers, self.gold = [value], value
            self.head, self.tail, self.question = "", f'{_JSON_KV_INSTRUCTION}Key: "{key}"\nCorresponding value:', key

            def draw(n: int) -> list[str]:
                pairs = uuids(rng, 2 * n)
                return [f'"{k}": "{v}"' for k, v in zip(pairs[::2], pairs[1::2]) if k != key]

            self.stream, self.wrap = _Stream(draw, ",\n ", tok), ("{", "}")
        elif task in ("mk_needle_number", "mk_needle_uuid"):
            kind = "numbers" if task == "mk_needle_number" else "uuids"
            if kind == "numbers":
                gold_idx = int(rng.integers(0, len(_ADJECTIVES) * len(_NOUNS)))
                key = f"{_ADJECTIVES[gold_idx // len(_NOUNS)]}-{_NOUNS[gold_idx % len(_NOUNS)]}"
                value = str(int(_numbers(rng, 1)[0]))

                def draw(n: int) -> list[str]:
                    keys, vals = _word_keys(rng, n, avoid=gold_idx), _numbers(rng, n, avoid=[int(value)])
                    return [needle(kind, k, str(v)) for k, v in zip(keys, vals)]
            else:
                key, value = uuids(rng, 2)

                def draw(n: int) -> list[str]:
                    pairs = uuids(rng, 2 * n)
                    return [needle(kind, k, v) for k, v in zip(pairs[::2], pairs[1::2]) if k != key and v != value]

            self.needles, self.depths = [needle(kind, key, value)], [depth]
            self.answers, self.gold = [value], value
            self.head, self.tail, self.question = _ruler_prompt(kind, key, 1)
            self.stream, self.wrap = _Stream(draw, "\n", tok), ("", "")
        else:  # mv_needle
            key = _word_keys(rng, 1)[0]
            values = _numbers(rng, _MV_VALUES)
            while len(set(values.tolist())) < _MV_VALUES:
                values = _numbers(rng, _MV_VALUES)
            self.depths = rng.choice(RULER_DEPTHS, size=_MV_VALUES, replace=False).tolist()
            self.needles = [needle("numbers", key, str(v)) for v in values]
            self.answers = [str(v) for v in values]
            self.gold = ", ".join(self.answers)
            self.head, self.tail, self.question = _ruler_prompt("numbers", key, _MV_VALUES)
            source = haystack if haystack is not None else RULER_NOISE
            offset = int(rng.integers(0, len(source))) if haystack is not None else 0
            self.stream, self.wrap = _Stream(_cycle(source, offset), " ", tok), ("", "")
            self.depth = None

    def at(self, length: int, tok: Tokenizer) -> tuple[str, int]:
        try:
            return fit_units(tok, length, self.stream, self.needles, self.depths, self.wrap)
        except HelmetRecallError as exc:
            raise HelmetRecallError(f"helmet_recall task {self.task}: {exc}") from None


_RULER_NIAH = "NVIDIA/RULER `scripts/data/synthetic/niah.py`; HELMET `data.py` (`load_ruler`)"
_HELMET_OFFICIAL = {
    "json_kv": ("HELMET `data.py` (`load_json_kv`), `configs/recall.yaml`, `scripts/collect_results.py`",
                "raylc generates the JSON object; HELMET's two demonstrations (`shots: 2`) are not reproduced."),
    "mk_needle_number": (_RULER_NIAH, "RULER NIAH multi-key 2: the haystack is other keys' needles."),
    "mk_needle_uuid": (_RULER_NIAH, "RULER NIAH multi-key 3: UUID keys and values among other keys' needles."),
    "mv_needle": (_RULER_NIAH, "RULER NIAH multi-value: four values for one key. Its haystack is RULER's repeated "
                               "noise sentences unless `suite.haystack` names an essay pool (RULER's "
                               "`PaulGrahamEssays.json`): by default it is not an essay haystack."),
}
HELMET_RECALL_INFO = SuiteInfo(
    title="HELMET synthetic recall",
    tasks=tuple(Task(t, _METRIC[t], _MAX_TOKENS[t], _HELMET_OFFICIAL[t][0], note=_HELMET_OFFICIAL[t][1])
                for t in HELMET_RECALL_TASKS),
    lengths="`suite.lengths` (tokens of the context): " + ", ".join(map(str, LENGTHS_DEFAULT)),
    data="Nothing but `suite.haystack` when set: the JSON objects, keys, values and needles are generated.",
    real_data="HELMET's own data files: `data.tar.gz` of the Hugging Face dataset `princeton-nlp/HELMET` "
              "(HELMET `scripts/download_data.sh`; raylc generates its recall data instead). RULER's essays: "
              "`PaulGrahamEssays.json`, written by RULER's `scripts/data/synthetic/json/download_paulgraham_essay.py`, "
              "for `suite.haystack`.",
    official="princeton-nlp/HELMET; NVIDIA/RULER for the needles",
)


@register_suite(HelmetRecallSuite, HELMET_RECALL_INFO)
def build_helmet_recall(suite: HelmetRecallSuite, seed: int) -> pl.DataFrame:
    """The samples table (:mod:`raylc.suites.samples`) of the suite's tasks: ``samples_per_length``
    samples per task, each at every length of ``suite.lengths``; extra column ``depth``.
    Deterministic per ``seed``."""
    tok = get_tokenizer(suite.tokenizer)
    haystack = (_pool_sentences(suite.data_path(suite.haystack), suite.tokenizer) if suite.haystack
                and "mv_needle" in suite.tasks else None)
    depths = depth_grid(suite.samples_per_length, suite.depths)
    lengths = sorted(set(suite.lengths))
    extra = {"raw_prompt": pl.Boolean(), **{c.name: c.dtype for c in HelmetRecallSuite.columns}}
    cols: dict[str, list] = {c: [] for c in (*SAMPLE_SCHEMA, *extra)}
    for task in suite.tasks:
        for i in range(suite.samples_per_length):
            sample = _Sample(task, np.random.default_rng([seed, _TASK_INDEX[task], i]), float(depths[i]), haystack, tok)
            for length in lengths:
                context, n = sample.at(length, tok)
                row = {
                    "task": task, "sample_id": f"{task}-{i:04d}", "length": length, "context_tokens": n,
                    "head": sample.head, "context": context, "tail": sample.tail, "question": sample.question,
                    "answers": sample.answers, "gold": sample.gold, "metric": _METRIC[task],
                    "extractor": "none", "followup": None, "max_tokens": _MAX_TOKENS[task], "followup_max_tokens": None,
                    "raw_prompt": suite.chat_template == "helmet", "depth": sample.depth,
                }
                for c, v in row.items():
                    cols[c].append(v)
    frame = pl.DataFrame(cols, schema={**SAMPLE_SCHEMA, **extra})
    return check_samples(frame, "helmet_recall")
