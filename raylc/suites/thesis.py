"""Unit tasks of the long-context prediction thesis (Wang, 2024, Section 3.2, Table A.1) over
generated candidates.

The thesis draws multi-constraint queries and candidates with context pieces from RoMQA
(Section 3.1); we generate them instead, so that every answer is known by construction and
no prior knowledge helps. A candidate is a made-up person; a piece of context is one
sentence stating one relation of that person (employer, education, birthplace, award,
membership), with invented organisations and places. A query has 2 or 3 constraints on
distinct relations (3 with probability 0.435: the thesis's 2.435 constraints on average).

* ``key_retrieval`` -- the Table A.1 prompt with its one in-context exemplar: candidates
  "Name: passage" (2 or 3 sentences each); return all passages related to one candidate
  (at a random position, column ``depth``). Metric ``recall``: the fraction of that
  candidate's sentences found in the output (Section 4.2, "matching percentage").
* ``filter`` -- "List all passing candidates if any": candidates, each with one piece per
  query constraint, satisfying all, some or none of them; ``selectivity`` of them satisfy all.
* ``exclusion`` -- the filter task with "Ignore <names>." (``exclusion`` of the candidates,
  at least one of them passing when any passes); ignored candidates are not in the answer.

Filter and exclusion are scored as in Section 4.2, accuracy over the candidates ((TP + TN) /
number of candidates, a candidate counting as returned when its name occurs in the output):
metric ``candidate_accuracy`` (:func:`raylc.scoring.metrics.candidate_accuracy`), which needs the extra column
``candidates`` (every candidate name in the context). ``answers`` holds the passing names.

Length axis: the thesis changes context length through the number of pieces, here the
number of candidates (column ``n_pieces``, from ``suite.pieces``). LongScore over piece
counts groups by ``n_pieces`` with ``suite.base_pieces`` as its Base. The contract's
``length`` stays a token count: the largest context of the (task, n_pieces) cell, so every
sample fits its ``length`` and one cell shares one ``length``. A sample's query (or key
candidate) is drawn from ``(seed, task, sample)`` and is the same at every piece count;
the other candidates are drawn per piece count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal, Optional

import numpy as np
import polars as pl
from pydantic import Field, model_validator

from raylc.io.schemas import declare
from raylc.suites.registry import SuiteInfo, SweepSuite, Task, register_suite
from raylc.suites.samples import SAMPLE_SCHEMA, check_axis, check_samples
from raylc.text.tokenize import get_tokenizer

THESIS_TASKS = ("key_retrieval", "filter", "exclusion")


class ThesisSuite(SweepSuite):
    """Unit tasks of the long-context prediction thesis (Section 3.2, Table A.1): key retrieval,
    filter by predicates and information exclusion over generated candidate pieces.

    A piece is one candidate with its context sentences; ``pieces`` are the piece counts (the
    length axis: the thesis adjusts context length by the number of pieces) and LongScore's
    Base is the mean over ``base_pieces`` (a subset of ``pieces``). The samples table's
    ``length`` is a token count (the largest context of the task and piece count) and the
    piece count is its ``n_pieces`` column. ``selectivity`` is the fraction of candidates that
    satisfy every predicate (Section 5.2), ``exclusion`` the fraction the exclusion task tells
    the model to ignore (Section 5.3; the thesis ignores 2 of 20)."""

    kind: Literal["thesis_units"] = Field(description="`thesis_units`: the thesis's unit tasks.")
    tasks: list[Literal[THESIS_TASKS]] = Field(  # type: ignore[valid-type]
        default=list(THESIS_TASKS), min_length=1, description="The tasks to build.")
    pieces: list[int] = Field(default=[16, 64, 256, 1024], min_length=1, description=(
        "Piece (candidate) counts: the length axis, each >= 2."))
    base_pieces: list[int] = Field(default=[16], min_length=1, description=(
        "LongScore's Base: the mean score over these piece counts (a subset of `pieces`)."))
    samples_per_setting: int = Field(default=50, ge=1, le=1_000_000, description="Samples per task and piece count.")
    selectivity: float = Field(default=0.2, ge=0.0, le=1.0, description=(
        "The fraction of candidates that satisfy every predicate (filter, exclusion; Section 5.2)."))
    exclusion: float = Field(default=0.1, ge=0.0, le=1.0, description=(
        "The fraction of candidates the exclusion task says to ignore (Section 5.3; the thesis: 2 of 20)."))
    tokenizer: Optional[str] = Field(default=None, description=(
        "Tokenizer contexts are counted with: null, the offline default; `hf:<name-or-path>`, a real one."))

    columns = declare(
        ("n_pieces", pl.Int64, "Candidate pieces in the context: the sample's point on the length axis."),
        ("depth", pl.Float64, "Position of the key candidate in [0, 1] (key retrieval; null otherwise)."),
        ("candidates", pl.List(pl.String), "The candidates' names in the context."),
        ("ignored", pl.List(pl.String), "The names the exclusion task says to ignore (empty otherwise)."),
        ("predicates", pl.List(pl.String), "The query's constraint phrases as satisfying pieces state them "
                                           "(filter, exclusion; empty for key retrieval)."))

    axis: ClassVar[str] = "n_pieces"  # the thesis's difficulty axis: the number of candidate pieces
    samples_field: ClassVar[Optional[str]] = "samples_per_setting"

    @model_validator(mode="after")
    def _base_in_pieces(self) -> "ThesisSuite":
        check_axis(self.pieces, self.base_pieces, "pieces", "base_pieces", 2)
        return self

    def tokenizer_spec(self) -> Optional[str]:
        return self.tokenizer

    def longscore_base(self) -> list[int]:
        return list(self.base_pieces)


__all__ = ["PREDICATE", "RELATIONS", "build_thesis", "pieces"]

_FIRST = ("Ada", "Bram", "Cleo", "Dorian", "Edda", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Leon",
          "Mara", "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Silas", "Tilda", "Ugo", "Vera", "Wim", "Xenia",
          "Yann", "Zora", "Anika", "Boris", "Celia", "Dario", "Elin", "Fabian")
_SYLLABLES = ("Bar", "Den", "Fal", "Gor", "Hel", "Kin", "Lor", "Mar", "Nor", "Pel", "Quin", "Ros", "Sel", "Tar",
              "Vel", "Wyn")
_SUFFIXES = ("ton", "by", "son", "ley", "ford", "wick", "more", "dale")

#: relation -> (values, piece template, query phrase); the piece contains the predicate phrase
#: ``PREDICATE[relation].format(v=value)`` exactly when it states that value
RELATIONS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "employer": (
        ("Harwick University", "Lornell Institute", "Baymont Labs", "Corveth College", "Dunmere Foundation",
         "Essling Works", "Fairhold Observatory", "Grantby Hospital", "Halvern Academy", "Ivorn Research Center",
         "Jessop Polytechnic", "Kestrel Museum"),
        "{name} worked at {v} as {role} from {y} to {y2}.",
        "worked at {v}",
    ),
    "education": (
        ("Marrow Hill School", "Northgate Seminary", "Oakmere College", "Pellston University", "Quarry Bay Institute",
         "Ravensmoor Academy", "Stoneleigh College", "Thornbury School of Arts", "Umberfield University",
         "Valecrest Institute", "Westbrook Conservatory", "Yarrow Technical College"),
        "{name} was educated at {v}, graduating in {y}.",
        "were educated at {v}",
    ),
    "birthplace": (
        ("Aldmere", "Brackenford", "Coldharbour", "Dunwick", "Eastmoor", "Fenwick", "Glenrose", "Hollowmere",
         "Ironbridge", "Kingsreach", "Larkspur", "Millbrook"),
        "{name} was born in {v} in {y}.",
        "were born in {v}",
    ),
    "award": (
        ("Astra Medal", "Beacon Prize", "Corwin Award", "Delphine Fellowship", "Ember Cup", "Falk Honor",
         "Gilded Quill", "Hartwell Prize", "Iris Medal", "Juniper Award", "Kessler Fellowship", "Lumen Prize"),
        "{name} received the {v} in {y} for work on {topic}.",
        "received the {v}",
    ),
    "membership": (
        ("Guild of Cartographers", "Order of the Silver Oak", "Harbor Rowing Club", "League of Amateur Astronomers",
         "Society for Coastal Studies", "Council of Bridge Builders", "Circle of Glassmakers",
         "Fellowship of Clockmakers", "Union of River Pilots", "Academy of Folk Music", "Assembly of Beekeepers",
         "Royal Society of Tessaly"),
        "{name} was a member of the {v} for {n} years.",
        "were members of the {v}",
    ),
}
#: the phrase a piece contains exactly when it states relation = v
PREDICATE = {"employer": "worked at {v}", "education": "was educated at {v}", "birthplace": "was born in {v}",
             "award": "received the {v}", "membership": "was a member of the {v}"}
_REL_NAMES = tuple(RELATIONS)
_ROLES = ("a researcher", "a librarian", "an engineer", "a curator", "a lecturer", "a surgeon", "an archivist",
          "a director")
_TOPICS = ("river ecology", "glass chemistry", "tidal maps", "folk songs", "bridge design", "bee colonies",
           "star catalogues", "old clocks")
_P_THREE = 0.435  # P(3 constraints): 2.435 constraints per query on average (Section 3.1)
_TASK_INDEX = {t: i for i, t in enumerate(THESIS_TASKS)}

_EXEMPLAR = (
    'Find and return all passages related to "bitcoin" from the following.\n\n'
    "Twitterrific: Twitterrific is a Mac OS X and iOS client for the social networking site Twitter.\n"
    "Mod4Win: It was one of the first Mod players for the Windows platform.\n"
    "Atom: Atom is a free and open-source text and source code editor for OS X, Linux, and Windows with support "
    "for plug-ins written in Node.js, and embedded Git Control, developed by GitHub.\n"
    "Polyworld: Polyworld is a cross-platform (Linux, Mac OS X) program written by Larry Yaeger to evolve "
    "Artificial Intelligence through natural selection and evolutionary algorithms.\n"
    "MongoDB: MongoDB (from humongous) is a cross-platform document-oriented database.\n"
    "Stella: It is open source, and runs on most major modern platforms including Amiga, Windows, Mac OS X, Linux, "
    "Windows CE/Mobile, Dreamcast, GP2X, Nintendo DS, and Wii.\n"
    "BetterZip: It is developed solely for the OS X platform.\n"
    "Qt Jambi: Qt Jambi is a Java binding of the cross-platform application framework Qt.\n"
    "Overlayfs: OverlayFS is a filesystem service for Linux which implements a union mount for other file systems.\n"
    "bitcoin: In February 2014, a beta version of a Windows/Linux Firefox plugin called FreeSpeechMe was released "
    "that allows automated resolution of .bit addresses, by downloading the Namecoin block chain and running it in "
    "the background.\n\n"
    "Answer: In February 2014, a beta version of a Windows/Linux Firefox plugin called FreeSpeechMe was released "
    "that allows automated resolution of .bit addresses, by downloading the Namecoin block chain and running it in "
    "the background.\n\n"
)
_FILTER_HEAD = "List all passing candidates if any. (Names of candidates only)"


def _names(idx: np.ndarray) -> list[str]:
    """Candidate names for indices into first name x (syllable, syllable, suffix)."""
    n_s, n_x = len(_SYLLABLES), len(_SUFFIXES)
    last = idx // len(_FIRST)
    return [
        f"{_FIRST[i % len(_FIRST)]} "
        f"{_SYLLABLES[s // (n_s * n_x)]}{_SYLLABLES[s // n_x % n_s].lower()}{_SUFFIXES[s % n_x]}"
        for i, s in zip(idx, last)
    ]


_N_NAMES = len(_FIRST) * len(_SYLLABLES) ** 2 * len(_SUFFIXES)


def _draw_names(rng: np.random.Generator, n: int, avoid: int = -1) -> list[str]:
    """``n`` distinct names, never name index ``avoid``."""
    idx = rng.choice(_N_NAMES - 1, size=n, replace=False)
    return _names(np.where(idx >= avoid, idx + 1, idx) if avoid >= 0 else idx)


def pieces(rng: np.random.Generator, names: Sequence[str], rels: np.ndarray, values: np.ndarray) -> list[list[str]]:
    """Context sentences: row i, column j states relation ``_REL_NAMES[rels[i, j]]`` =
    value index ``values[i, j]`` of ``names[i]``, with random details (years, role, topic)."""
    shape = rels.shape
    y, dy, n = rng.integers(1950, 2015, shape), rng.integers(2, 12, shape), rng.integers(2, 30, shape)
    role, topic = rng.integers(len(_ROLES), size=shape), rng.integers(len(_TOPICS), size=shape)
    out = []
    for i, name in enumerate(names):
        row = []
        for j in range(shape[1]):
            rel = _REL_NAMES[rels[i, j]]
            vocab, template, _ = RELATIONS[rel]
            row.append(template.format(name=name, v=vocab[values[i, j]], role=_ROLES[role[i, j]], y=y[i, j],
                                       y2=y[i, j] + dy[i, j], topic=_TOPICS[topic[i, j]], n=n[i, j]))
        out.append(row)
    return out


def _query(rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """Relations and value indices of a query with 2 or 3 constraints."""
    c = 3 if rng.random() < _P_THREE else 2
    rels = [_REL_NAMES[i] for i in rng.choice(len(_REL_NAMES), size=c, replace=False)]
    return rels, [int(rng.integers(len(RELATIONS[r][0]))) for r in rels]


def _join_names(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "None"


def _random_facts(rng: np.random.Generator, names: Sequence[str], c: int) -> list[list[str]]:
    """``c`` facts on distinct random relations with random values per name."""
    rels = np.argsort(rng.random((len(names), len(_REL_NAMES))), axis=1)[:, :c]
    sizes = np.array([len(RELATIONS[r][0]) for r in _REL_NAMES])
    return pieces(rng, names, rels, rng.integers(0, 1 << 30, size=rels.shape) % sizes[rels])


def _key_retrieval(core: np.random.Generator, rng: np.random.Generator, n: int) -> dict:
    key_idx = int(core.integers(_N_NAMES))
    key = _names(np.array([key_idx]))[0]
    c = 3 if core.random() < _P_THREE else 2
    gold_sentences = _random_facts(core, [key], c)[0]
    others = _draw_names(rng, n - 1, avoid=key_idx)
    pos = int(rng.integers(n))
    lines = [f"{name}: {' '.join(facts)}" for name, facts in zip(others, _random_facts(rng, others, c))]
    lines.insert(pos, f"{key}: {' '.join(gold_sentences)}")
    return {
        "head": _EXEMPLAR + f'Find and return all passages related to "{key}" from the following.\n\n',
        "context": "\n".join(lines), "tail": "\n\nAnswer:", "question": key, "answers": gold_sentences,
        "gold": " ".join(gold_sentences), "metric": "recall", "depth": pos / (n - 1), "candidates": [key, *others],
        "ignored": [],
    }


def _filter(core: np.random.Generator, rng: np.random.Generator, n: int, selectivity: float,
            exclusion: float | None) -> dict:
    rels, vals = _query(core)
    c = len(rels)
    query = "I'm looking for people who " + " and ".join(
        RELATIONS[r][2].format(v=RELATIONS[r][0][v]) for r, v in zip(rels, vals)) + "."
    names = _draw_names(rng, n)
    n_pass = round(selectivity * n)
    passing = np.zeros(n, dtype=bool)
    passing[rng.choice(n, size=n_pass, replace=False)] = True
    # non-passing candidates satisfy a random strict subset of the constraints (RoMQA: fully,
    # partially or not at all)
    n_sat = np.where(passing, c, rng.integers(0, c, size=n))
    ranks = np.argsort(np.argsort(rng.random((n, c)), axis=1), axis=1)
    sat = ranks < n_sat[:, None]
    sizes = np.array([len(RELATIONS[r][0]) for r in rels])
    other = (np.array(vals) + rng.integers(1, sizes, size=(n, c))) % sizes  # a different value
    value_idx = np.where(sat, np.array(vals), other)
    rel_idx = np.broadcast_to(np.array([_REL_NAMES.index(r) for r in rels]), (n, c))
    lines = [f"{name}: {' '.join(facts)}" for name, facts in zip(names, pieces(rng, names, rel_idx, value_idx))]
    ignored: list[str] = []
    head = _FILTER_HEAD
    if exclusion is not None:
        n_ign = min(n, max(1, round(exclusion * n))) if exclusion > 0 else 0
        pass_idx, rest = np.flatnonzero(passing), np.flatnonzero(~passing)
        if n_ign and pass_idx.size:  # at least one ignored candidate passes: the instruction matters
            first = rng.choice(pass_idx, size=1)
            pool = np.setdiff1d(np.arange(n), first)
            chosen = np.concatenate([first, rng.choice(pool, size=n_ign - 1, replace=False)])
        else:
            chosen = rng.choice(rest if rest.size >= n_ign else np.arange(n), size=n_ign, replace=False)
        ignored = [names[i] for i in np.sort(chosen)]
        head += f" Ignore {', '.join(ignored)}." if ignored else ""
        passing[chosen] = False
    answers = [name for name, ok in zip(names, passing) if ok]
    return {
        "head": f"{head}\n\nQuery: {query}\n\nCandidates:\n", "context": "\n".join(lines), "tail": "\n\nAnswer:",
        "question": query, "answers": answers, "gold": _join_names(answers), "metric": "candidate_accuracy",
        "depth": None, "candidates": names, "ignored": ignored,
        "predicates": [PREDICATE[r].format(v=RELATIONS[r][0][v]) for r, v in zip(rels, vals)],
    }


_THESIS_OFFICIAL = "Wang (2024), Section 3.2 and Table A.1 (no released code)"
_THESIS_BUDGET = "2 x the gold answer's tokens + 32"
THESIS_INFO = SuiteInfo(
    title="The thesis's unit tasks",
    tasks=(Task("key_retrieval", "recall", _THESIS_BUDGET, _THESIS_OFFICIAL,
                note="The matching percentage: the share of the key candidate's sentences in the output."),
           Task("filter", "candidate_accuracy", _THESIS_BUDGET, _THESIS_OFFICIAL,
                note="(TP + TN) / candidates, a candidate returned when its name is in the output."),
           Task("exclusion", "candidate_accuracy", _THESIS_BUDGET, _THESIS_OFFICIAL,
                note="As filter, with the names to ignore.")),
    lengths="`suite.pieces` (candidate pieces): " + ", ".join(map(str, ThesisSuite.model_fields["pieces"].default))
            + "; `length` is the largest context in tokens of a (task, piece count)",
    data="Nothing: candidates and their pieces are generated from the seed.",
    real_data="None needed.",
    official="Wang (2024), no released code",
)


@register_suite(ThesisSuite, THESIS_INFO)
def build_thesis(suite: ThesisSuite, seed: int) -> pl.DataFrame:
    """The samples table (:mod:`raylc.suites.samples`) of the thesis unit tasks:
    ``samples_per_setting`` samples per task at every piece count. Extra columns ``n_pieces``,
    ``depth`` (key position in [0, 1], key retrieval), ``candidates`` (names in the context),
    ``ignored`` (names to ignore, exclusion) and ``predicates`` (the query's constraint
    phrases as they appear in satisfying pieces; filter and exclusion). ``length`` is the
    largest context in tokens of the sample's (task, n_pieces). Deterministic per ``seed``."""
    tok = get_tokenizer(suite.tokenizer)
    rows = []
    for task in suite.tasks:
        for i in range(suite.samples_per_setting):
            for n in sorted(set(suite.pieces)):
                core = np.random.default_rng([seed, _TASK_INDEX[task], i])
                rng = np.random.default_rng([seed, _TASK_INDEX[task], i, n])
                if task == "key_retrieval":
                    row = _key_retrieval(core, rng, n)
                else:
                    row = _filter(core, rng, n, suite.selectivity, suite.exclusion if task == "exclusion" else None)
                row.setdefault("predicates", [])
                row.update(task=task, sample_id=f"{task}-{i:04d}", n_pieces=n, context_tokens=tok.count(row["context"]),
                           extractor="none", followup=None, followup_max_tokens=None,
                           max_tokens=2 * tok.count(row["gold"]) + 32)
                rows.append(row)
    schema = {**SAMPLE_SCHEMA, **{c.name: c.dtype for c in ThesisSuite.columns}}
    frame = pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema)
    frame = frame.with_columns(length=pl.col("context_tokens").max().over("task", "n_pieces"))
    return check_samples(frame, "thesis_units")
