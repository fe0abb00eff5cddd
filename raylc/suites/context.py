"""Length-controlled contexts from document pools (100-LongBench Section 3.1, Table 2).

A context is the ground-truth ("required") document(s) plus distractors drawn at random from a
pool while they fit the remaining budget, shuffled, each labelled ``Passage i:`` and joined by
a blank line; its token count is as close to the target as the pool allows and never above it.

Pools are tables (JSONL, JSON, Parquet or CSV; local or ``s3://``, read with
:func:`raylc.io.store.read_input`), one document per row:

* distractor pool (:func:`load_distractors`): ``text`` (required), ``id`` (optional). Exact
  duplicate texts are dropped and counted in :attr:`DocumentPool.skipped` (a duplicate would
  break passage counting).
* source pool (:func:`load_sources`): ``text``; ``question`` + ``answers`` (a string or a list of
  strings) for QA documents; ``summary`` for summarization documents, with an optional
  ``query`` when the summary answers one (QMSum's); ``group``: rows sharing a group form one
  multi-document sample (its question/answers, summary or query may sit on any of its rows but
  must agree); ``id`` (optional, unique). Two rows with the same text, question, answers,
  summary, query and group are refused (one sample counted twice).

Either pool may instead be LongBench v1's released JSONL as published (``input, context,
answers, length, dataset, language, all_classes, _id``; :func:`longbench_pool`): a distractor
is a record's ``context``; a source is built from a record as 100-LongBench builds its pools
from LongBench (:data:`LONGBENCH_SOURCES`).

Texts are stripped of surrounding whitespace. A malformed pool raises :class:`PoolError`, one
line naming the file, the 1-based row and the field. Documents longer than a target are simply
not drawn as distractors; required documents longer than the target raise
:class:`ContextTooLong` (builders count these as skips).

Token accounting: each pool document is tokenized once (:attr:`DocumentPool.tokens`); the cost
of its label and separator is measured on the first 256 characters only (tokenization does not
look further than that across a boundary), and each passage number's label cost is known, so
the estimate of a context is nearly exact and its slack is filled before counting; the built
text is then counted once with the tokenizer, and a distractor is removed (over target) or more
are added (a fitting gap left) until the count is right.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Optional, Sequence

import numpy as np
import polars as pl

from raylc.io.store import StoreError, StoreUnavailable, read_input
from raylc.text.tokenize import Tokenizer, count_texts

__all__ = [
    "LABEL",
    "LONGBENCH_SOURCES",
    "SEPARATOR",
    "BuiltContext",
    "ContextTooLong",
    "DocumentPool",
    "PoolError",
    "build_context",
    "is_longbench_pool",
    "load_distractors",
    "load_sources",
    "longbench_pool",
    "pool_from_frame",
]

LABEL = "Passage {i}:\n"
SEPARATOR = "\n\n"
_HEAD_CHARS = 256  # boundary effects of a label/separator are measured on this many leading characters
_MAX_ROUNDS = 8  # verify/repair rounds per context (each recounts the whole text)
_SENTENCE_END = re.compile(r"(?<=[.!?]) ")
#: what a source pool takes from each LongBench v1 dataset, as uservan/100-LongBench's
#: ``utils/data_utils.py`` builds its tasks from ``get_dataset('LongBench', name)`` records (the
#: record's ``input`` as the question, its ``answers``, its ``context`` as the document):
#: ``qa`` one document with the question and answers (``generate_dataset_single_doc_qa``);
#: ``multi_qa`` the context's passages (split at ``Passage i:``) as one multi-document sample
#: with the question and answers (``generate_dataset_multi_doc_qa``); ``summary`` one document
#: whose first answer is its summary and whose non-empty ``input`` is the summary's query
#: (``generate_dataset_single_doc_sum``, ``generate_dataset_passage_retrieval``);
#: ``multi_summary`` the passages as one sample with that summary (``generate_dataset_multi_doc_sum``,
#: LongBench-E's multi_news). Records of other datasets are skipped and counted.
LONGBENCH_SOURCES = {"qasper": "qa", "multifieldqa_en": "qa", "narrativeqa": "qa",
                     "hotpotqa": "multi_qa", "2wikimqa": "multi_qa", "musique": "multi_qa",
                     "gov_report": "summary", "qmsum": "summary", "multi_news": "multi_summary"}
#: a LongBench record's fields a pool reads (THUDM/LongBench ``LongBench/README.md``, "Data Format")
LONGBENCH_FIELDS = ("input", "context", "answers", "dataset", "_id")
#: how ``data_utils.py`` splits a multi-document context into its passages (``re.split``; blank parts dropped)
_PASSAGE_LABEL = re.compile(r"Passage \d+:\n")


#: a source pool's column: the passage_retrieval input of a LongBench record's summary (its answers
#: list as ``str()`` prints it, :func:`longbench_pool`); null for every other pool
SHOWN_SUMMARY = "_shown_summary"


class PoolError(ValueError):
    """A document pool that cannot be used; the message is one line naming file, row and field."""


class ContextTooLong(PoolError):
    """The required documents (with labels and needles) alone exceed the target length."""


# --------------------------------------------------------------------------------------------- #
# pools
# --------------------------------------------------------------------------------------------- #


@dataclass(eq=False)
class DocumentPool:
    """Validated documents with their token counts (computed once).

    ``frame`` has ``row`` (1-based row in the file), ``id`` (string), ``text`` and, for a source
    pool, ``question``, ``answers`` (list of strings), ``summary``, ``query``, ``group``. ``skipped`` counts
    rows dropped on load by reason.
    """

    source: str
    tokenizer: Tokenizer
    frame: pl.DataFrame
    tokens: np.ndarray
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.texts: list[str] = self.frame["text"].to_list()
        self.hashes: np.ndarray = self.frame["text"].hash(seed=0).to_numpy()
        self._framing: dict[tuple[str, str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.texts)

    def framing(self, label: str = LABEL, separator: str = SEPARATOR) -> np.ndarray:
        """Per document: tokens added by ``separator + label(1)`` in front of it (cached)."""
        key = (label, separator)
        if key not in self._framing:
            self._framing[key] = _framing_cost(self.tokenizer, self.texts, label, separator)
        return self._framing[key]


def _framing_cost(tokenizer: Tokenizer, texts: Sequence[str], label: str, separator: str) -> np.ndarray:
    prefix = separator + label.format(i=1)
    heads = [t[:_HEAD_CHARS] for t in texts]
    return count_texts([prefix + h for h in heads], tokenizer) - count_texts(heads, tokenizer)


_LABEL_EXTRA: dict[tuple[str, str, str], list[int]] = {}


def _label_extra(tokenizer: Tokenizer, label: str, separator: str, n: int) -> np.ndarray:
    """``extra[i]`` = tokens of label ``i`` minus those of label 1 (index 0 unused), i <= n."""
    key = (tokenizer.name, label, separator)
    known = _LABEL_EXTRA.setdefault(key, [0, 0])
    if len(known) <= n:
        base = tokenizer.count(separator + label.format(i=1) + "x")
        known.extend(tokenizer.count(separator + label.format(i=i) + "x") - base for i in range(len(known), n + 1))
    return np.asarray(known[: n + 1], dtype=np.int64)


def _read(uri: str) -> pl.DataFrame:
    try:
        return read_input(uri)
    except StoreUnavailable:
        raise
    except StoreError as exc:
        raise PoolError(str(exc)) from None


def _name(uri: str) -> str:
    return uri.rstrip("/")


def _first_row(frame: pl.DataFrame, mask: pl.Expr) -> Optional[int]:
    hit = frame.filter(mask)
    return None if hit.is_empty() else int(hit["row"][0])


def _require_string(frame: pl.DataFrame, column: str, source: str) -> pl.DataFrame:
    dtype = frame.schema[column]
    if dtype == pl.Null:
        return frame.with_columns(pl.col(column).cast(pl.String))
    if dtype != pl.String:
        raise PoolError(f"{source}: field {column!r} must be a string, got {dtype}")
    return frame


def _check_nonblank(frame: pl.DataFrame, column: str, source: str, *, allow_null: bool) -> None:
    blank = pl.col(column).str.strip_chars().str.len_chars() == 0
    bad = (blank | pl.col(column).is_null()) if not allow_null else blank.fill_null(False)
    row = _first_row(frame, bad)
    if row is not None:
        what = "is empty" if frame.filter(pl.col("row") == row)[column][0] is not None else "is missing"
        raise PoolError(f"{source}: row {row}: field {column!r} {what}")


def _base_frame(raw: pl.DataFrame, source: str, rows: Optional[pl.Series] = None) -> pl.DataFrame:
    """``raw`` with ``row`` (its 1-based row in the file, or ``rows``), ``text`` and ``id`` checked."""
    if "text" not in raw.columns:
        raise PoolError(f"{source}: missing field 'text' (columns: {', '.join(raw.columns) or 'none'}; or "
                        f"LongBench v1's released fields {', '.join(LONGBENCH_FIELDS)})")
    if rows is None:
        frame = raw.with_row_index("row", offset=1).with_columns(pl.col("row").cast(pl.Int64))
    else:
        frame = raw.with_columns(rows.cast(pl.Int64).alias("row"))
    frame = _require_string(frame, "text", source)
    _check_nonblank(frame, "text", source, allow_null=False)
    frame = frame.with_columns(pl.col("text").str.strip_chars())
    if "id" in frame.columns:
        if frame.schema["id"] not in (pl.String, pl.Null) and not frame.schema["id"].is_integer():
            raise PoolError(f"{source}: field 'id' must be a string or an integer, got {frame.schema['id']}")
        frame = frame.with_columns(pl.col("id").cast(pl.String))
        row = _first_row(frame, pl.col("id").is_null() | (pl.col("id").str.len_chars() == 0))
        if row is not None:
            raise PoolError(f"{source}: row {row}: field 'id' is empty")
        row = _first_row(frame, pl.col("id").is_duplicated())
        if row is not None:
            dup = frame.filter(pl.col("row") == row)["id"][0]
            raise PoolError(f"{source}: row {row}: field 'id' {dup!r} is not unique")
    else:
        frame = frame.with_columns(id=pl.format("row{}", pl.col("row")))
    return frame


def is_longbench_pool(raw: pl.DataFrame) -> bool:
    """A pool table in LongBench v1's released format: its fields and no ``text``."""
    return "text" not in raw.columns and all(f in raw.columns for f in LONGBENCH_FIELDS)


def _longbench_records(raw: pl.DataFrame, source: str) -> pl.DataFrame:
    """The records' :data:`LONGBENCH_FIELDS` checked (``row`` added): one line naming the file, row
    and field of the first bad one."""
    frame = raw.with_row_index("row", offset=1).with_columns(pl.col("row").cast(pl.Int64))
    for column in ("context", "dataset", "_id", "input"):
        frame = _require_string(frame, column, source)
        if column != "input":
            _check_nonblank(frame, column, source, allow_null=False)
    row = _first_row(frame, pl.col("input").is_null())
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'input' is missing")
    if not (isinstance(frame.schema["answers"], pl.List) and frame.schema["answers"].inner in (pl.String, pl.Null)):
        raise PoolError(f"{source}: field 'answers' must be a list of strings, got {frame.schema['answers']}")
    frame = frame.with_columns(pl.col("answers").cast(pl.List(pl.String)))
    answered = pl.col("answers").list.eval(pl.element().str.strip_chars().str.len_chars() > 0).list.all()
    row = _first_row(frame, (pl.col("answers").list.len().fill_null(0) == 0) | ~answered.fill_null(False))
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'answers' is empty")
    return frame


def longbench_pool(raw: pl.DataFrame, source: str,
                   kind: Literal["distractors", "sources"]) -> tuple[pl.DataFrame, pl.Series, dict[str, int]]:
    """LongBench v1 records as a pool table (``text``, ``id`` and, for sources, the source
    fields), the file row of each of its rows, and the records skipped by reason. Distractors:
    every record's ``context``. Sources: :data:`LONGBENCH_SOURCES`; a passage of a multi-document
    record is a row of the group ``_id``, with id ``<_id>#<i>``."""
    frame = _longbench_records(raw, source)
    if kind == "distractors":
        return frame.select(text="context", id="_id"), frame["row"], {}
    role = pl.col("dataset").str.replace(r"_e$", "").replace_strict(LONGBENCH_SOURCES, default=None)
    frame = frame.with_columns(role=role)
    unused = frame.filter(pl.col("role").is_null())["dataset"]
    skipped = {f"LongBench datasets 100-LongBench builds no source from ({', '.join(sorted(set(unused)))})":
               len(unused)} if len(unused) else {}
    rows: list[dict] = []
    for r in frame.filter(pl.col("role").is_not_null()).iter_rows(named=True):
        qa = r["role"] in ("qa", "multi_qa")
        # data_utils.py get_dataset nests a record's answers ('answers': [obj['answers']]), so the
        # passage_retrieval input it writes ([d["answers"][0]]) is the list, and pred.py's
        # str.format puts Python's str() of it in the prompt: "['The summary.']"
        fields = {"question": r["input"] if qa else None, "answers": r["answers"] if qa else None,
                  "summary": None if qa else r["answers"][0], SHOWN_SUMMARY: None if qa else str(list(r["answers"])),
                  "query": None if qa or not r["input"].strip() else r["input"], "row": r["row"]}
        if r["role"] in ("qa", "summary"):
            rows.append({"text": r["context"], "id": r["_id"], "group": None, **fields})
            continue
        passages = [p for p in _PASSAGE_LABEL.split(r["context"]) if p.strip()]
        if len(passages) < 2:
            raise PoolError(f"{source}: row {r['row']}: field 'context' holds {len(passages)} passage(s) "
                            f"(\"Passage i:\" labels); a {r['dataset']} record needs two or more")
        repeat = next((i for i, p in enumerate(passages, 1) if p.strip() in {q.strip() for q in passages[:i - 1]}),
                      None)
        if repeat is not None:
            raise PoolError(f"{source}: row {r['row']}: field 'context' repeats a passage (Passage {repeat})")
        rows += [{"text": p, "id": f"{r['_id']}#{i}", "group": r["_id"], **fields} for i, p in enumerate(passages, 1)]
    schema = {"text": pl.String, "id": pl.String, "group": pl.String, "question": pl.String,
              "answers": pl.List(pl.String), "summary": pl.String, SHOWN_SUMMARY: pl.String, "query": pl.String,
              "row": pl.Int64}
    out = pl.DataFrame(rows, schema=schema)
    return out.drop("row"), out["row"], skipped


def pool_from_frame(raw: pl.DataFrame, tokenizer: Tokenizer, *, source: str = "pool",
                    kind: Literal["distractors", "sources"] = "distractors") -> DocumentPool:
    """Validate a pool table (see the module docstring; LongBench v1's released records too,
    :func:`longbench_pool`) and tokenize its documents once."""
    rows, skipped, longbench = None, {}, is_longbench_pool(raw)
    if longbench:
        raw, rows, skipped = longbench_pool(raw, source, kind)
    frame = _base_frame(raw, source, rows)
    if not longbench:  # only a LongBench record's summary is shown as its list
        frame = frame.with_columns(pl.lit(None, pl.String).alias(SHOWN_SUMMARY))
    if kind == "distractors":
        frame = frame.select("row", "id", "text")
        dup = frame["text"].is_duplicated() & ~frame["text"].is_first_distinct()
        if dup.any():
            skipped["duplicate text"] = int(dup.sum())
            frame = frame.filter(~dup)
    elif kind == "sources":
        frame = _source_fields(frame, source)
    else:
        raise ValueError(f"unknown pool kind {kind!r}")
    if frame.is_empty():
        raise PoolError(f"{source}: no documents")
    return DocumentPool(source, tokenizer, frame, count_texts(frame["text"], tokenizer), skipped)


def _source_fields(frame: pl.DataFrame, source: str) -> pl.DataFrame:
    for column in ("question", "summary", "query", "group"):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, pl.String).alias(column))
    if frame.schema["group"] != pl.String:
        frame = frame.with_columns(pl.col("group").cast(pl.String))
    for column in ("question", "summary", "query"):
        frame = _require_string(frame, column, source)
    if "answers" not in frame.columns:
        frame = frame.with_columns(answers=pl.lit(None, pl.List(pl.String)))
    dtype = frame.schema["answers"]
    if dtype in (pl.String, pl.Null):
        frame = frame.with_columns(answers=pl.when(pl.col("answers").is_null()).then(None)
                                   .otherwise(pl.concat_list(pl.col("answers").cast(pl.String))))
    elif not (isinstance(dtype, pl.List) and dtype.inner in (pl.String, pl.Null)):
        raise PoolError(f"{source}: field 'answers' must be a string or a list of strings, got {dtype}")
    frame = frame.with_columns(pl.col("answers").cast(pl.List(pl.String)))
    for column in ("question", "summary", "query"):
        _check_nonblank(frame, column, source, allow_null=True)
    answers_ok = pl.col("answers").list.eval(pl.element().str.strip_chars().str.len_chars() > 0).list.all()
    row = _first_row(frame, pl.col("answers").is_not_null() & ~answers_ok.fill_null(False))
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'answers' is empty")
    row = _first_row(frame, pl.col("question").is_not_null() & pl.col("answers").is_null())
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'answers' is missing (a row with a 'question' needs 'answers')")
    row = _first_row(frame, pl.col("question").is_null() & pl.col("answers").is_not_null())
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'question' is missing (a row with 'answers' needs a 'question')")
    ungrouped = pl.col("group").is_null()
    row = _first_row(frame, pl.col("query").is_not_null() & pl.col("summary").is_null()
                     & (ungrouped | (pl.col("summary").null_count().over("group") == pl.len().over("group"))))
    if row is not None:
        raise PoolError(f"{source}: row {row}: field 'summary' is missing (a 'query' is the query of a summary)")
    row = _first_row(frame, ungrouped & pl.col("question").is_null() & pl.col("summary").is_null())
    if row is not None:
        raise PoolError(f"{source}: row {row}: needs 'question' + 'answers' or 'summary' (or a 'group')")
    grouped = frame.filter(~ungrouped)
    if grouped.height:
        by = pl.col("group")
        checks = grouped.with_columns(
            size=pl.len().over(by),
            nq=pl.col("question").n_unique().over(by) - pl.col("question").null_count().over(by).clip(0, 1),
            na=pl.col("answers").list.join("\x1f").n_unique().over(by)
            - pl.col("answers").null_count().over(by).clip(0, 1),
            ns=pl.col("summary").n_unique().over(by) - pl.col("summary").null_count().over(by).clip(0, 1),
            nu=pl.col("query").n_unique().over(by) - pl.col("query").null_count().over(by).clip(0, 1),
        )
        for mask, what in (
            (pl.col("size") < 2, "has a single document (a group is a multi-document sample)"),
            (pl.col("nq") > 1, "has different values of 'question'"),
            (pl.col("na") > 1, "has different values of 'answers'"),
            (pl.col("ns") > 1, "has different values of 'summary'"),
            (pl.col("nu") > 1, "has different values of 'query'"),
            ((pl.col("nq") == 0) & (pl.col("ns") == 0), "has no 'question' + 'answers' and no 'summary'"),
        ):
            hit = checks.filter(mask)
            if hit.height:
                raise PoolError(f"{source}: row {hit['row'][0]}: field 'group' {hit['group'][0]!r} {what}")
    same = pl.struct("text", "question", pl.col("answers").list.join("\x1f"), "summary", "query", "group")
    dup = frame.with_row_index("_pos").filter(same.is_duplicated() & ~same.is_first_distinct()).select(
        "row", _k=same)
    if dup.height:  # the same sample twice would be drawn, scored and counted twice
        row = dup["row"][0]
        first = frame.filter(same.is_first_distinct() & (same == dup["_k"][0]))["row"][0]
        raise PoolError(f"{source}: row {row}: duplicate row (same text, question, answers, summary, query and group "
                        f"as row {first})")
    return frame.select("row", "id", "text", "question", "answers", "summary", "query", "group", SHOWN_SUMMARY)


def load_distractors(uri: str, tokenizer: Tokenizer) -> DocumentPool:
    """The distractor pool at ``uri`` (``text``, optional ``id``), validated and tokenized once."""
    return pool_from_frame(_read(uri), tokenizer, source=_name(uri), kind="distractors")


def load_sources(uri: str, tokenizer: Tokenizer) -> DocumentPool:
    """The source pool at ``uri`` (see the module docstring), validated and tokenized once."""
    return pool_from_frame(_read(uri), tokenizer, source=_name(uri), kind="sources")


# --------------------------------------------------------------------------------------------- #
# building
# --------------------------------------------------------------------------------------------- #


@dataclass(frozen=True)
class BuiltContext:
    """A built context. ``order[p]`` is the document of passage ``p + 1``: ``("required", j)``
    (``required[j]``) or ``("distractor", k)`` (pool document ``k``). ``required_labels[j]`` and
    ``needle_labels[j]`` are the 1-based passage numbers holding ``required[j]`` and
    ``needles[j]``."""

    text: str
    tokens: int
    target: int
    order: tuple[tuple[str, int], ...]
    required_labels: tuple[int, ...]
    needle_labels: tuple[int, ...]

    @property
    def n_passages(self) -> int:
        return len(self.order)

    @property
    def n_unique(self) -> int:
        """Distinct documents among the passages (repeats counted once)."""
        return len(set(self.order))

    @property
    def fill(self) -> float:
        return self.tokens / self.target


def _greedy(order: np.ndarray, cost: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """Take documents in ``order``, skipping any that no longer fits (the same as drawing
    uniformly without replacement among the fitting ones), in rounds of prefix sums."""
    taken: list[np.ndarray] = []
    while order.size and budget > 0:
        order = order[cost[order] <= budget]
        if not order.size:
            break
        cs = np.cumsum(cost[order])
        k = int(np.searchsorted(cs, budget, side="right"))
        taken.append(order[:k])
        budget -= int(cs[k - 1])
        order = order[k:]
    return (np.concatenate(taken) if taken else np.empty(0, dtype=np.int64)), budget


def _insert_needle(text: str, needle: str, at: str, rng: np.random.Generator) -> tuple[str, str]:
    """(host text with the needle, the inserted string). ``at="sentence"`` puts it before a random
    sentence start of the host (after ``.``, ``!`` or ``?`` and a space), else at the end."""
    if at == "sentence":
        starts = [m.start() for m in _SENTENCE_END.finditer(text)]
        if starts:
            p = starts[int(rng.integers(len(starts)))]
            return text[:p] + " " + needle + text[p:], " " + needle
    return text + "\n\n" + needle, "\n\n" + needle


def build_context(
    target: int,
    pool: DocumentPool,
    rng: np.random.Generator,
    *,
    required: Sequence[str] = (),
    required_tokens: Optional[Sequence[int]] = None,
    needles: Sequence[str] = (),
    needle_at: Literal["end", "sentence"] = "end",
    max_repeats: int = 1,
    min_distractors: int = 0,
    exclude: Optional[np.ndarray] = None,
    label: str = LABEL,
    separator: str = SEPARATOR,
) -> BuiltContext:
    """A context of at most ``target`` tokens (100-LongBench Section 3.1): the ``required``
    documents plus distractors from ``pool`` drawn at random while they fit, in random order,
    each labelled ``label`` (``{i}`` = 1-based passage number) and joined by ``separator``.

    ``needles`` are sentences put into distinct distractors (at the end, or before a random
    sentence: ``needle_at``) — KV pairs and star counts of Appendix A.2; ``min_distractors``
    guarantees that many distractors (hosts are drawn among documents short enough).
    ``max_repeats > 1`` repeats each drawn distractor 1..max_repeats times (Passage Count).
    Distractors whose text equals a required document, and pool indices in ``exclude``, are
    never drawn. ``required_tokens`` are the required texts' token counts if known (e.g.
    :attr:`DocumentPool.tokens` of a source pool). Deterministic given ``rng``'s state.
    """
    tok = pool.tokenizer
    req = [t.strip() for t in required]
    n_req = len(req)
    req_n = (np.asarray(required_tokens, dtype=np.int64) if required_tokens is not None
             else count_texts(req, tok))
    req_cost = req_n + _framing_cost(tok, req, label, separator) if n_req else np.empty(0, np.int64)

    cost = pool.tokens + pool.framing(label, separator)
    eligible = np.ones(len(pool), dtype=bool)
    if n_req:
        eligible &= ~np.isin(pool.hashes, pl.Series(req, dtype=pl.String).hash(seed=0).to_numpy())
    if exclude is not None and len(exclude):
        eligible[np.asarray(exclude, dtype=np.int64)] = False
    # label overhead bound: the most passages that could fit
    smallest = int(cost[eligible].min()) if eligible.any() else target
    n_bound = n_req + target // max(smallest, 1) + 1
    extra = _label_extra(tok, label, separator, n_bound)
    d_max = int(extra.max())
    cost = cost + d_max

    n_hosts = max(len(needles), min_distractors)
    fixed = int(req_cost.sum()) + n_req * d_max
    if fixed > target:
        raise ContextTooLong(f"{pool.source}: required documents need {fixed} tokens > target {target}")
    budget = target - fixed
    hosts = np.empty(0, dtype=np.int64)
    host_text: dict[int, str] = {}
    needle_cost: dict[int, int] = {}
    if n_hosts:
        cap = budget // n_hosts
        idx = np.flatnonzero(eligible & (cost <= cap))
        if idx.size < n_hosts:
            raise ContextTooLong(f"{pool.source}: fewer than {n_hosts} documents of at most {cap} tokens "
                                 f"for {n_hosts} passages in {target} tokens")
        hosts = rng.choice(idx, size=n_hosts, replace=False)
        for j, needle in enumerate(needles):
            h = int(hosts[j])
            host_text[h], inserted = _insert_needle(pool.texts[h], needle, needle_at, rng)
            needle_cost[h] = tok.count(inserted)
            budget -= int(cost[h]) + needle_cost[h]
        budget -= int(cost[hosts[len(needles):]].sum())
        if budget < 0:
            raise ContextTooLong(f"{pool.source}: required documents and needles exceed target {target}")
        eligible[hosts] = False

    mult = rng.integers(1, max_repeats + 1, size=len(pool)) if max_repeats > 1 else np.ones(len(pool), np.int64)
    eff = cost * mult
    taken, _ = _greedy(rng.permutation(np.flatnonzero(eligible)), eff, budget)
    eligible[taken] = False

    units: list[tuple[str, int]] = [("required", j) for j in range(n_req)]
    units += [("distractor", int(h)) for h in hosts]
    units += [("distractor", int(k)) for k in taken for _ in range(int(mult[k]))]
    order = [units[i] for i in rng.permutation(len(units))]

    def text_of(unit: tuple[str, int]) -> str:
        kind, k = unit
        return req[k] if kind == "required" else host_text.get(k, pool.texts[k])

    def unit_cost(unit: tuple[str, int]) -> int:
        """Estimated tokens of a unit with label 1 (the label's own extra is added by position)."""
        kind, k = unit
        return int(req_cost[k]) if kind == "required" else int(cost[k]) - d_max + needle_cost.get(k, 0)

    def refill(gap: int) -> None:
        """Add distractors that fit ``gap`` (label extras bounded by ``d_max``) at random places."""
        fits = np.flatnonzero(eligible & (eff <= gap))
        if not fits.size:
            return
        added, _ = _greedy(rng.permutation(fits), eff, gap)
        eligible[added] = False
        removable.update(int(k) for k in added)
        for k in added:
            for _ in range(int(mult[k])):
                order.insert(int(rng.integers(len(order) + 1)), ("distractor", int(k)))

    removable = set(int(k) for k in taken)
    # the estimate with each position's exact label cost is tighter than the d_max bound: use the slack
    estimate = sum(unit_cost(u) for u in order) + int(_label_extra(tok, label, separator, len(order)).sum())
    refill(target - estimate)
    for _ in range(_MAX_ROUNDS):
        text = separator.join(label.format(i=i + 1) + text_of(u) for i, u in enumerate(order))
        n = tok.count(text)
        if n > target:
            cands = [p for p, u in enumerate(order) if u[0] == "distractor" and u[1] in removable]
            if not cands:
                break
            excess = n - target
            ok = [p for p in cands if unit_cost(order[p]) >= excess]
            p = min(ok, key=lambda q: unit_cost(order[q])) if ok else max(cands, key=lambda q: unit_cost(order[q]))
            order.pop(p)
            continue
        if not (eligible & (eff <= target - n)).any():
            break
        refill(target - n)
    else:
        text = separator.join(label.format(i=i + 1) + text_of(u) for i, u in enumerate(order))
        n = tok.count(text)
    # last resort: the target is a hard limit
    while n > target:
        cands = [p for p, u in enumerate(order) if u[0] == "distractor" and u[1] in removable]
        if not cands:
            raise ContextTooLong(f"{pool.source}: context of {n} tokens cannot be brought under target {target}")
        order.pop(max(cands, key=lambda q: unit_cost(order[q])))
        text = separator.join(label.format(i=i + 1) + text_of(u) for i, u in enumerate(order))
        n = tok.count(text)

    pos = {u: i + 1 for i, u in reversed(list(enumerate(order)))}
    return BuiltContext(
        text=text,
        tokens=n,
        target=target,
        order=tuple(order),
        required_labels=tuple(pos[("required", j)] for j in range(n_req)),
        needle_labels=tuple(pos[("distractor", int(h))] for h in hosts[: len(needles)]),
    )
