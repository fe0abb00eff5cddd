"""Unit splitting (DOLCE Section 3.1, Appendix G, Table 3): a context becomes ``L`` units.

A *unit spec* is a string of letters from Table 3 applied left to right, each to the units
the previous letters produced (``"ls"``: lines, then the sentences of each line; ``"rlt"``:
commas to periods, lines, then sentences of pretokenized text). The whole context is the
single unit before the first letter.

Offsets. :func:`split_units` returns :class:`Units`: ``text`` plus ``starts``/``ends``
character offsets (Python ``str`` indices, i.e. code points) with
``text[starts[i]:ends[i]] == units[i]``. ``text`` is the document itself unless the spec
contains ``r``, whose rewrite is length-preserving, so the offsets index the original
document as well. Whitespace (``str.isspace``) never begins or ends a unit: every unit is
trimmed, whitespace-only pieces are dropped, and separators between units belong to no
unit. Units are increasing and non-overlapping, and every non-whitespace character of
the document lies in exactly one unit: no splitter drops text (markers such as
``Review #3`` stay at the head of their unit; text outside ``q``/``u`` matches becomes
units of its own).

Letters (Table 3 gives a name and sometimes a regex; where it is terse, our reading):

- ``b`` blocks: cut at runs of two or more line breaks, ``(?:\\n[^\\S\\n]*){2,}`` (Table 3's
  ``(?:\\n *){2,}``, also allowing tabs and ``\\r`` on the blank lines, so CRLF files split too);
- ``c`` every two lines: the lines of each unit (as ``l``) grouped in consecutive pairs,
  counting from the unit's first non-blank line; an odd last line is a unit by itself;
- ``l`` lines: cut at every ``\\n`` (blank lines vanish, ``\\r`` is trimmed);
- ``n`` reviews: cut before every ``Review #<digits>``;
- ``o`` passages: cut before every ``Passage <digits>:``;
- ``q`` passage/question/answer triplets: each match of
  ``Passage:.*?Question:.*?Answer:\\n.*?\\n`` (``.`` matching newlines; a triplet holds no
  second ``Passage:``; the answer line may end at the end of the unit) is a unit;
- ``r`` replace commas with periods (TTS transcripts use only commas): every ``,`` followed by
  whitespace or the end of the text becomes ``.`` (so ``1,000`` and ``a,b`` stay); no cut;
- ``s`` sentences (NLTK's in the paper; here the offline rule-based ``sentencex`` segmenter,
  English rules, no data downloads);
- ``t`` sentences of pretokenized text: runs of spaces before a ``.``, ``!`` or ``?`` token are
  moved after it (``sat . It`` is read as ``sat.  It``, same length) before segmenting as ``s``;
- ``u`` dialogue/summary pairs: each match of ``Dialogue:.*?Summary:.*?\\n`` (``.`` matching
  newlines, no second ``Dialogue:`` inside, the summary line may end at the end of the unit).

Cut-point letters (``b l n o s t``) find their cuts once over the whole text and keep every
previous unit boundary, which equals cutting each unit separately (for ``s``/``t`` the
segmenter sees the neighbouring units as context when it judges a period at a unit's very
end; that unit boundary is kept either way). ``c`` pairs lines within each unit; ``q``/``u``
match within each unit. Every letter is linear in the text length (numpy over code points).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from raylc.scoring.extract import PY_WHITESPACE

LETTERS: dict[str, str] = {
    "b": "blocks (multi-line breaks)",
    "c": "every two lines",
    "l": "lines",
    "n": "reviews (Review #N)",
    "o": "passages (Passage N:)",
    "q": "passage/question/answer triplets",
    "r": "replace commas with periods",
    "s": "sentences",
    "t": "sentences from pretokenized input",
    "u": "dialogue/summary pairs",
}

_IS_SPACE = np.zeros(max(map(ord, PY_WHITESPACE)) + 2, dtype=bool)  # lookup table; the last slot = "any larger code"
_IS_SPACE[[ord(c) for c in PY_WHITESPACE]] = True
_BLOCK_RE = re.compile(r"(?:\n[^\S\n]*){2,}")
_REVIEW_RE = re.compile(r"Review #\d+")
_PASSAGE_RE = re.compile(r"Passage \d+:")
_TRIPLET_RE = re.compile(r"Passage:(?:(?!Passage:).)*?Question:(?:(?!Passage:).)*?Answer:\n[^\n]*(?:\n|\Z)", re.S)
_DIALOGUE_RE = re.compile(r"Dialogue:(?:(?!Dialogue:).)*?Summary:[^\n]*(?:\n|\Z)", re.S)
_COMMA_RE = re.compile(r",(?=\s|\Z)")
_PRETOKENIZED_END_RE = re.compile(r"( +)([.!?]+)(?=\s|\Z)")


class UnitSpecError(ValueError):
    """A unit spec with a letter outside Table 3; the message is one line naming it."""


def parse_spec(spec: str) -> str:
    """``spec`` checked against :data:`LETTERS` (non-empty, known letters only)."""
    bad = sorted(set(spec) - set(LETTERS))
    if not spec or bad:
        what = f"unknown letter(s) {''.join(bad)!r}" if bad else "empty spec"
        raise UnitSpecError(f"unit spec {spec!r}: {what} (allowed: {''.join(LETTERS)}, e.g. 'ls')")
    return spec


@dataclass(frozen=True)
class Units:
    """Units of one document: ``text[starts[i]:ends[i]]`` is unit ``i`` (see the module docstring)."""

    text: str
    starts: np.ndarray
    ends: np.ndarray
    spec: str = ""

    def __len__(self) -> int:
        return int(self.starts.size)

    def __getitem__(self, i: int) -> str:
        return self.text[int(self.starts[i]) : int(self.ends[i])]

    @property
    def texts(self) -> list[str]:
        return [self.text[s:e] for s, e in zip(self.starts.tolist(), self.ends.tolist())]


@dataclass
class _Doc:
    """The text being split with its code points and the positions of non-whitespace characters."""

    text: str
    codes: np.ndarray = field(init=False)
    solid: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.codes = np.frombuffer(self.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        c = self.codes
        space = (c == 32) | ((c >= 9) & (c <= 13)) | ((c >= 28) & (c <= 31))  # ASCII whitespace
        rare = np.flatnonzero(c >= 0x85)  # the other whitespace codes are all >= U+0085: look those up
        space[rare] = _IS_SPACE[np.minimum(c[rare], _IS_SPACE.size - 1)]
        self.solid = np.flatnonzero(~space)


def _trim(doc: _Doc, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pieces ``[a, b)`` without surrounding whitespace; whitespace-only pieces dropped."""
    i = np.searchsorted(doc.solid, a, "left")
    j = np.searchsorted(doc.solid, b, "left") - 1
    keep = i <= j
    return doc.solid[i[keep]], doc.solid[j[keep]] + 1


def _cut(doc: _Doc, starts: np.ndarray, ends: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Units cut additionally at positions ``cuts`` (a cut at p starts a piece at p)."""
    # sorted runs merged by the stable sort (timsort: linear for a few runs), then deduplicated
    bounds = np.sort(np.concatenate([starts, ends, np.asarray(cuts, dtype=np.int64)]), kind="stable")
    bounds = bounds[np.append(True, bounds[1:] != bounds[:-1])] if bounds.size else bounds
    a, b = bounds[:-1], bounds[1:]
    u = np.searchsorted(starts, a, "right") - 1
    inside = (u >= 0) & (a < ends[np.maximum(u, 0)]) if starts.size else np.zeros(a.size, bool)
    return _trim(doc, a[inside], b[inside])


def _match_starts(pattern: re.Pattern, text: str) -> np.ndarray:
    return np.fromiter((m.start() for m in pattern.finditer(text)), dtype=np.int64)


def _lines(doc: _Doc, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _cut(doc, starts, ends, np.flatnonzero(doc.codes == 10))


def _pairs(doc: _Doc, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``c``: the lines of each unit, merged two by two from the unit's first line."""
    ls, le = _lines(doc, starts, ends)
    if not ls.size:
        return ls, le
    unit = np.searchsorted(starts, ls, "right") - 1
    rank = np.arange(ls.size) - np.searchsorted(unit, unit, "left")
    head = np.flatnonzero(rank % 2 == 0)
    last = np.append(head[1:], ls.size) - 1
    return ls[head], le[last]


def _sentences(doc: _Doc, starts: np.ndarray, ends: np.ndarray,
               view: str, language: str) -> tuple[np.ndarray, np.ndarray]:
    import sentencex

    found = sentencex.get_sentence_boundaries(language, view)
    return _cut(doc, starts, ends, np.fromiter((s["start_index"] for s in found), dtype=np.int64))


def _matches(doc: _Doc, starts: np.ndarray, ends: np.ndarray, pattern: re.Pattern) -> tuple[np.ndarray, np.ndarray]:
    """``q``/``u``: each match inside a unit is a unit; text between matches is cut off as its own units."""
    cuts = [c for s,
            e in zip(starts.tolist(), ends.tolist()) for m in pattern.finditer(doc.text, s, e) for c in m.span()]
    return _cut(doc, starts, ends, np.asarray(cuts, dtype=np.int64))


def split_units(document: str, spec: str, language: str = "en") -> Units:
    """Split ``document`` by the unit ``spec`` (letters of :data:`LETTERS`, applied in order).

    ``language`` is the sentence segmenter's language code (``s``, ``t``). Linear time.
    """
    parse_spec(spec)
    doc = _Doc(document)
    starts, ends = _trim(doc, np.zeros(1, np.int64), np.full(1, len(document), np.int64))
    for letter in spec:
        if letter == "r":
            doc = _Doc(_COMMA_RE.sub(".", doc.text))
        elif letter == "l":
            starts, ends = _lines(doc, starts, ends)
        elif letter == "c":
            starts, ends = _pairs(doc, starts, ends)
        elif letter in "bno":
            pattern = {"b": _BLOCK_RE, "n": _REVIEW_RE, "o": _PASSAGE_RE}[letter]
            starts, ends = _cut(doc, starts, ends, _match_starts(pattern, doc.text))
        elif letter == "s":
            starts, ends = _sentences(doc, starts, ends, doc.text, language)
        elif letter == "t":
            view = _PRETOKENIZED_END_RE.sub(r"\2\1", doc.text)
            starts, ends = _sentences(doc, starts, ends, view, language)
        else:
            starts, ends = _matches(doc, starts, ends, _TRIPLET_RE if letter == "q" else _DIALOGUE_RE)
    return Units(doc.text, starts.astype(np.int64), ends.astype(np.int64), spec)


def unit_stats(units: pl.DataFrame, tokenizer) -> pl.DataFrame:
    """Per-task length statistics like DOLCE Figure 5 (Appendix F).

    ``units`` has ``task, spec, context (str), units (list[str])``, one row per problem;
    ``tokenizer`` has ``count(text)``. One row per (task, spec): ``problems``, context tokens,
    units per problem and tokens per unit, each as p50 / p99 / max.
    """
    count = tokenizer.count
    per_problem = units.select(
        "task", "spec",
        ctx_tokens=pl.Series([count(t) for t in units["context"].to_list()], dtype=pl.Int64),
        n_units=pl.col("units").list.len().cast(pl.Int64),
        unit_tokens=pl.Series([[count(u) for u in us] for us in units["units"].to_list()], dtype=pl.List(pl.Int64)),
    )

    def summary(col: str, name: str) -> list[pl.Expr]:
        c = pl.col(col)
        return [c.quantile(0.5, "linear").alias(f"{name}_p50"), c.quantile(0.99, "linear").alias(f"{name}_p99"),
                c.max().cast(pl.Int64).alias(f"{name}_max")]

    keys = ["task", "spec"]
    problems = per_problem.group_by(keys, maintain_order=True).agg(
        pl.len().alias("problems"), *summary("ctx_tokens", "ctx_tokens"), *summary("n_units", "units")
    )
    per_unit = per_problem.select(*keys, "unit_tokens").explode("unit_tokens").group_by(keys, maintain_order=True).agg(
        *summary("unit_tokens", "unit_tokens")
    )
    return problems.join(per_unit, on=keys, how="left", maintain_order="left").sort(keys)
