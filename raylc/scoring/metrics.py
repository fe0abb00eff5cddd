"""Reference-based metrics, vectorized over a frame of predictions.

Every metric takes ``predictions`` (a polars ``String`` Series or a list of strings) and
``references`` (a ``String`` or ``List(String)`` Series, or a list whose items are a string or a
list of strings) and returns a ``Float64`` Series with one score per row:

* several references per row: the max over references (LongBench ``scorer``, HELMET
  ``drqa_metric_max_over_ground_truths``), except :func:`recall`, the mean over references
  (RULER ``string_match_all``);
* a null prediction (e.g. an invalid LongBench v2 output) scores 0.0;
* a row without any reference (null or empty list) scores null.

The pairwise work runs on a long (row, reference) frame with polars kernels; ROUGE goes through
the ``rouge-score`` package; edit similarity through ``difflib`` by default (what LongBench's
requirements give fuzzywuzzy), ``rapidfuzz.process.cpdist`` with ``matcher="levenshtein"``. LongBench
v1's own metrics (``LongBench/metrics.py``) are restated below: its ROUGE-L through the ``rouge``
package it uses, its Chinese words through ``jieba``.
"""

from __future__ import annotations

import functools
import logging
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from rapidfuzz import process
from rapidfuzz.distance import Indel

from raylc.scoring.extract import PY_WHITESPACE, code_line

if TYPE_CHECKING:
    from rouge_score import rouge_scorer

__all__ = [
    "METRICS",
    "accuracy",
    "classification",
    "count_score",
    "edit_sim",
    "exact_match",
    "f1",
    "match_part",
    "ndcg",
    "normalize_squad",
    "normalize_zh",
    "parse_rankings",
    "qa_f1_zh",
    "recall",
    "retrieval",
    "retrieval_zh",
    "rouge_l",
    "rouge_longbench",
    "rouge_lsum",
    "rouge_zh",
    "score_frame",
    "subem",
]

Predictions = pl.Series | Sequence[str | None]
References = pl.Series | Sequence[str | Sequence[str] | None]
Qrels = pl.Series | Sequence[Mapping[str, float] | None]

# --------------------------------------------------------------------------------------------- #
# SQuAD / LongBench normalization
# --------------------------------------------------------------------------------------------- #

_PUNCT = r"[!-/:-@\[-`{-~]"  # exactly Python's string.punctuation (ASCII only)
_NONWORD = r"[^\p{L}\p{N}_]"  # complement of Python's Unicode \w (str.isalnum() or "_")
_ARTICLE = rf"(^|{_NONWORD})(?:a|an|the)({_NONWORD}|$)"


def normalize_squad(text: pl.Expr) -> pl.Expr:
    """SQuAD ``normalize_answer`` as in LongBench ``metrics.py`` and HELMET ``utils.py``:
    lower case, delete ``string.punctuation`` characters, replace the words a/an/the by a space,
    collapse whitespace. Reproduces the Python function exactly (Python's ``\\b`` and
    ``str.split()`` semantics are emulated; Rust regex has no look-around, hence two passes for
    adjacent articles)."""
    e = text.str.to_lowercase().str.replace_all(_PUNCT, "")
    e = e.str.replace_all(_ARTICLE, "${1} ${2}").str.replace_all(_ARTICLE, "${1} ${2}")
    return e.str.replace_all(r"[\s\x1c-\x1f]+", " ").str.strip_chars(" ")


# --------------------------------------------------------------------------------------------- #
# input shaping: (row, reference) pairs and the per-row reduction
# --------------------------------------------------------------------------------------------- #


def _as_predictions(predictions: Predictions) -> pl.Series:
    if isinstance(predictions, pl.Series):
        return predictions.cast(pl.String)
    return pl.Series("prediction", list(predictions), dtype=pl.String)


def _as_references(references: References, n: int) -> pl.Series:
    if isinstance(references, pl.Series):
        if references.dtype == pl.String:
            wrap = pl.when(pl.col("r").is_null()).then(None).otherwise(pl.concat_list("r"))
            refs = references.to_frame("r").select(wrap.alias("r")).to_series()
        else:
            refs = references.cast(pl.List(pl.String))
    else:
        rows = [None if r is None else [r] if isinstance(r, str) else list(r) for r in references]
        refs = pl.Series("references", rows, dtype=pl.List(pl.String))
    if len(refs) != n:
        raise ValueError(f"{n} predictions but {len(refs)} reference rows")
    return refs


def _pairs(predictions: Predictions, references: References) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows, pairs): per-row flags, and one row per (row, non-null reference) with a prediction."""
    preds = _as_predictions(predictions)
    refs = _as_references(references, len(preds))
    frame = pl.DataFrame({"pred": preds, "ref": refs}).with_row_index("_row")
    rows = frame.select(
        "_row",
        has_pred=pl.col("pred").is_not_null(),
        has_ref=pl.col("ref").list.drop_nulls().list.len().fill_null(0) > 0,
    )
    pairs = frame.filter(pl.col("pred").is_not_null()).explode("ref").drop_nulls("ref")
    return rows, pairs


def _reduce(rows: pl.DataFrame, scored: pl.DataFrame, how: str = "max") -> pl.Series:
    """Per-row score from the ``score`` column of the pairs: max (or mean) over references."""
    agg = pl.col("score").max() if how == "max" else pl.col("score").mean()
    per_row = scored.group_by("_row").agg(agg.cast(pl.Float64))
    return (
        rows.join(per_row, on="_row", how="left")
        .sort("_row")
        .select(
            pl.when(~pl.col("has_ref"))
            .then(None)
            .when(~pl.col("has_pred"))
            .then(0.0)
            .otherwise(pl.col("score"))
            .cast(pl.Float64)
            .alias("score")
        )
        .to_series()
    )


def _elementwise(predictions: Predictions, references: References, score: pl.Expr, how: str = "max") -> pl.Series:
    rows, pairs = _pairs(predictions, references)
    return _reduce(rows, pairs.with_columns(score=score.cast(pl.Float64)), how)


# --------------------------------------------------------------------------------------------- #
# string-match metrics
# --------------------------------------------------------------------------------------------- #


def accuracy(predictions: Predictions, references: References) -> pl.Series:
    """Exact label equality after stripping surrounding whitespace (DOLCE Table 4 "Accuracy";
    apply an extractor from :mod:`raylc.scoring.extract` first)."""
    p = pl.col("pred").str.strip_chars(PY_WHITESPACE)
    r = pl.col("ref").str.strip_chars(PY_WHITESPACE)
    return _elementwise(predictions, references, p == r)


def exact_match(predictions: Predictions, references: References) -> pl.Series:
    """Normalized exact match (HELMET ``drqa_exact_match_score``): equality after
    :func:`normalize_squad`."""
    return _elementwise(predictions, references, normalize_squad(pl.col("pred")) == normalize_squad(pl.col("ref")))


def subem(predictions: Predictions, references: References) -> pl.Series:
    """Substring exact match, SubEM (HELMET ``substring_exact_match_score``): the normalized
    reference is a substring of the normalized prediction; max over references."""
    hit = normalize_squad(pl.col("pred")).str.contains(normalize_squad(pl.col("ref")), literal=True)
    return _elementwise(predictions, references, hit)


def recall(predictions: Predictions, references: References) -> pl.Series:
    """Fraction of references found: RULER ``string_match_all``, the mean over references of
    ``ref.lower() in pred.lower()`` (HELMET reports it for RULER MV)."""
    hit = pl.col("pred").str.to_lowercase().str.contains(pl.col("ref").str.to_lowercase(), literal=True)
    return _elementwise(predictions, references, hit, how="mean")


def match_part(predictions: Predictions, references: References) -> pl.Series:
    """RULER ``string_match_part``: 1 if any reference occurs (case-insensitive) in the prediction."""
    hit = pl.col("pred").str.to_lowercase().str.contains(pl.col("ref").str.to_lowercase(), literal=True)
    return _elementwise(predictions, references, hit)


# --------------------------------------------------------------------------------------------- #
# token F1
# --------------------------------------------------------------------------------------------- #


def _tokens(text: pl.Expr) -> pl.Expr:
    return normalize_squad(text).str.split(" ").list.eval(pl.element().filter(pl.element() != ""))


def f1(predictions: Predictions, references: References) -> pl.Series:
    """Token F1, LongBench ``qa_f1_score`` (= SQuAD F1): :func:`normalize_squad`, whitespace
    tokens, Counter-intersection precision/recall, 0 when nothing overlaps; max over references.
    Computed with the same float operations, so values are bit-identical to the Python code."""
    rows, pairs = _pairs(predictions, references)
    toks = pairs.with_row_index("_pair").select("_pair", "_row", p=_tokens(pl.col("pred")), r=_tokens(pl.col("ref")))

    def counts(col: str) -> pl.DataFrame:
        return (
            toks.select("_pair", tok=pl.col(col)).explode("tok").drop_nulls("tok")
            .group_by("_pair", "tok").agg(n=pl.len())
        )

    common = (
        counts("p")
        .join(counts("r"), on=["_pair", "tok"], how="inner")
        .group_by("_pair")
        .agg(same=pl.min_horizontal("n", "n_right").sum())
    )
    same = pl.col("same").cast(pl.Float64)
    precision = same / pl.col("p").list.len().cast(pl.Float64)
    rec = same / pl.col("r").list.len().cast(pl.Float64)
    scored = toks.join(common, on="_pair", how="left").with_columns(pl.col("same").fill_null(0))
    scored = scored.with_columns(
        score=pl.when(pl.col("same") == 0).then(0.0).otherwise((2.0 * precision * rec) / (precision + rec))
    )
    return _reduce(rows, scored)


# --------------------------------------------------------------------------------------------- #
# ROUGE-L and edit similarity (per-pair library calls)
# --------------------------------------------------------------------------------------------- #


@functools.lru_cache(maxsize=8)
def _rouge_scorer(rouge_type: str, use_stemmer: bool) -> rouge_scorer.RougeScorer:
    """A ``rouge_score.rouge_scorer.RougeScorer``, imported here: rouge-score pulls in NLTK and
    scipy.stats (about 1.4 s), which a run without a ROUGE metric never needs."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([rouge_type], use_stemmer=use_stemmer)


def _rouge(predictions: Predictions, references: References, rouge_type: str, use_stemmer: bool) -> pl.Series:
    rows, pairs = _pairs(predictions, references)
    scorer = _rouge_scorer(rouge_type, use_stemmer)
    scores = [
        scorer.score(target=ref, prediction=pred)[rouge_type].fmeasure
        for pred, ref in zip(pairs["pred"].to_list(), pairs["ref"].to_list())
    ]
    return _reduce(rows, pairs.with_columns(score=pl.Series(scores, dtype=pl.Float64)))


def rouge_l(predictions: Predictions, references: References, *, use_stemmer: bool = True) -> pl.Series:
    """ROUGE-L F-measure from ``rouge_score.rouge_scorer.RougeScorer(["rougeL"])``, max over
    references. ``use_stemmer=True`` (Porter, built in; no NLTK data) as HELMET's
    ``calculate_metrics``. The tokenizer keeps only ``[a-z0-9]`` runs after lower-casing."""
    return _rouge(predictions, references, "rougeL", use_stemmer)


def rouge_lsum(predictions: Predictions, references: References, *, use_stemmer: bool = True) -> pl.Series:
    """Summary-level ROUGE-Lsum F-measure (union LCS over newline-separated sentences), as HELMET
    also reports for summaries. Sentences are the output's own lines: like HELMET we do not
    sentence-split (``split_summaries=False``, which would need NLTK punkt data), so a one-line
    output scores the same as :func:`rouge_l`."""
    return _rouge(predictions, references, "rougeLsum", use_stemmer)


def edit_sim(predictions: Predictions, references: References, *, first_code_line: bool = True,
             integer_percent: bool = True, matcher: str = "difflib") -> pl.Series:
    """Edit similarity, LongBench ``code_sim_score`` (``LongBench/metrics.py``): fuzzywuzzy's
    ``fuzz.ratio(pred, ref) / 100``. fuzzywuzzy (``fuzzywuzzy/fuzz.py:ratio``) returns 100 for
    equal strings (two empty ones included), 0 when one is empty, else its ``SequenceMatcher``'s
    ratio as an integer percent, rounded half to even (``utils.intr``: ``int(round(100 r))``).
    Which matcher depends on what is installed: ``LongBench/requirements.txt`` installs no
    python-Levenshtein, so fuzzywuzzy falls back to ``difflib.SequenceMatcher`` (Ratcliff-
    Obershelp, ``2 M / T``, with difflib's autojunk): ``matcher="difflib"``, the default. With
    python-Levenshtein it is the InDel similarity ``(|pred| + |ref| - d) / (|pred| + |ref|)``
    (``d`` the insert/delete distance): ``matcher="levenshtein"``, vectorised. The two differ on
    many strings (``"Unanswerable"`` against ``"    return len(text.splitlines())"``: 13 vs 22).
    ``integer_percent=False`` keeps the unrounded fraction. With ``first_code_line`` (default,
    as LongBench) the prediction is first reduced to its first line without ``` ` ```/``#``/``//``
    (:func:`~raylc.scoring.extract.code_line`), or the empty string when there is none."""
    if matcher not in ("difflib", "levenshtein"):
        raise ValueError(f"edit_sim matcher {matcher!r}: expected 'difflib' or 'levenshtein'")
    preds = _as_predictions(predictions)
    if first_code_line:
        preds = pl.select(pl.when(preds.is_null()).then(None).otherwise(code_line(preds).fill_null(""))).to_series()
    rows, pairs = _pairs(preds, references)
    a, b = pairs["pred"].to_list(), pairs["ref"].to_list()
    if matcher == "difflib":  # difflib has no vectorised form; code tasks have few, short lines
        from difflib import SequenceMatcher

        r = np.array([1.0 if x == y else (SequenceMatcher(None, x, y).ratio() if x and y else 0.0)
                      for x, y in zip(a, b)], dtype=np.float64)
    else:
        dist = np.asarray(process.cpdist(a, b, scorer=Indel.distance, dtype=np.int64, workers=1), dtype=np.float64)
        lensum = (pairs["pred"].str.len_chars() + pairs["ref"].str.len_chars()).to_numpy().astype(np.float64)
        # one empty string: d = lensum, so r = 0; equal strings: d = 0, so r = 1, and two empty ones are 1 too
        r = np.divide(lensum - dist, lensum, out=np.ones_like(lensum), where=lensum > 0)
    score = np.round(100.0 * r) / 100.0 if integer_percent else r  # numpy rounds half to even, as round()
    return _reduce(rows, pairs.with_columns(score=pl.Series(score, dtype=pl.Float64)))


# --------------------------------------------------------------------------------------------- #
# NDCG@10 for re-ranking (HELMET MS MARCO)
# --------------------------------------------------------------------------------------------- #


def parse_rankings(outputs: pl.Series | Sequence[str | None]) -> pl.Series:
    """HELMET ``parse_rankings``: drop ``[``, ``]``, ``:`` and the string "id" (after
    lower-casing), take the longest ``N > N > ...`` chain of integers, keep the first occurrence of
    each id. "[3] > [1] > [2]" and "ID: 3 > ID: 1 > ID: 2" both give ["3", "1", "2"]. Returns a
    ``List(String)`` Series, empty when no integer id is found (HELMET then ranks the whole string
    as one id, which never matches an integer qrel id)."""
    series = _as_predictions(outputs)
    ws = r"[\s\x1c-\x1f]"
    chain = rf"\d+(?:{ws}*>{ws}*\d+)*"

    def build(e: pl.Expr) -> pl.Expr:
        text = e.str.replace_all(r"[\[\]:]", "").str.to_lowercase().str.replace_all("id", "", literal=True)
        matches = text.str.extract_all(chain)
        longest = matches.list.get(matches.list.eval(pl.element().str.len_chars()).list.arg_max(), null_on_oob=True)
        ids = longest.str.split(">").list.eval(pl.element().str.strip_chars(PY_WHITESPACE))
        return ids.list.unique(maintain_order=True).fill_null(pl.lit([], dtype=pl.List(pl.String)))

    return series.to_frame("_out").select(build(pl.col("_out"))).to_series().alias(series.name)


def _as_qrels(qrels: Qrels, n: int) -> tuple[pl.DataFrame, pl.Series]:
    """Long (row, doc_id, rel) frame and a per-row 'has qrels' flag."""
    if isinstance(qrels, pl.Series):
        if not isinstance(qrels.dtype, pl.List) or not isinstance(qrels.dtype.inner, pl.Struct):
            raise TypeError("qrels Series must be List(Struct{doc_id, relevance})")
        frame = pl.DataFrame({"q": qrels}).with_row_index("_row")
        has = frame.select(pl.col("q").list.len().fill_null(0) > 0).to_series()
        long = frame.explode("q").drop_nulls("q")
        fields = long.schema["q"].fields
        long = long.select(
            "_row",
            doc_id=pl.col("q").struct.field(fields[0].name).cast(pl.String),
            rel=pl.col("q").struct.field(fields[1].name).cast(pl.Float64),
        )
    else:
        qrels = list(qrels)
        rows, docs, rels = [], [], []
        for i, q in enumerate(qrels):
            for doc, rel in (q or {}).items():
                rows.append(i)
                docs.append(str(doc))
                rels.append(float(rel))
        long = pl.DataFrame(
            {"_row": rows, "doc_id": docs, "rel": rels},
            schema={"_row": pl.UInt32, "doc_id": pl.String, "rel": pl.Float64}
        )
        has = pl.Series([bool(q) for q in qrels])
    if len(has) != n:
        raise ValueError(f"{n} predictions but {len(has)} qrels rows")
    return long.unique(subset=["_row", "doc_id"], keep="first", maintain_order=True), has


def ndcg(predictions: Predictions | pl.Series, qrels: Qrels, *, k: int = 10) -> pl.Series:
    """NDCG@k as HELMET computes it for re-ranking (pytrec_eval ``ndcg_cut``, i.e. trec_eval):
    linear gains equal to the relevance grade (only grades > 0 count), discount
    ``1 / log2(rank + 1)``, ideal DCG from the row's qrels sorted by grade.

    ``predictions`` are raw outputs (parsed with :func:`parse_rankings`) or an already parsed
    ``List(String)`` Series of ids in rank order. ``qrels`` per row: a mapping ``{doc_id: grade}``
    or a ``List(Struct{doc_id, relevance})`` Series. Null score when a row has no qrels, 0.0 for a
    null output or when no qrel has a positive grade."""
    if isinstance(predictions, pl.Series) and isinstance(predictions.dtype, pl.List):
        ranked = predictions.cast(pl.List(pl.String)).fill_null(pl.lit([], dtype=pl.List(pl.String)))
        ranked = ranked.list.unique(maintain_order=True)
        is_null = predictions.is_null()
    else:
        raw = _as_predictions(predictions)
        ranked, is_null = parse_rankings(raw), raw.is_null()
    n = len(ranked)
    long_q, has_q = _as_qrels(qrels, n)
    discount = 1.0 / (pl.col("pos") + 2).cast(pl.Float64).log(2)

    run = (
        pl.DataFrame({"doc_id": ranked})
        .with_row_index("_row")
        .explode("doc_id")
        .drop_nulls("doc_id")
        .with_columns(pos=pl.int_range(pl.len()).over("_row"))
        .filter(pl.col("pos") < k)
        .join(long_q, on=["_row", "doc_id"], how="left")
    )
    dcg = run.filter(pl.col("rel") > 0).group_by("_row").agg(dcg=(pl.col("rel") * discount).sum())
    ideal = (
        long_q.filter(pl.col("rel") > 0)
        .sort(["_row", "rel"], descending=[False, True])
        .with_columns(pos=pl.int_range(pl.len()).over("_row"))
        .filter(pl.col("pos") < k)
        .group_by("_row")
        .agg(idcg=(pl.col("rel") * discount).sum())
    )
    return (
        pl.DataFrame({"has_q": has_q, "is_null": is_null})
        .with_row_index("_row")
        .join(dcg, on="_row", how="left")
        .join(ideal, on="_row", how="left")
        .sort("_row")
        .select(
            pl.when(~pl.col("has_q"))
            .then(None)
            .when(pl.col("is_null") | pl.col("idcg").is_null())
            .then(0.0)
            .otherwise(pl.col("dcg").fill_null(0.0) / pl.col("idcg"))
            .cast(pl.Float64)
            .alias("score")
        )
        .to_series()
    )


# --------------------------------------------------------------------------------------------- #
# LongBench v1 metrics (THUDM/LongBench ``LongBench/metrics.py``)
# --------------------------------------------------------------------------------------------- #

#: the Chinese punctuation ``normalize_zh_answer`` deletes besides ``string.punctuation``
#: (``LongBench/metrics.py``; the set ends with an ASCII period)
ZH_PUNCTUATION = ("！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～"
                  "｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿"
                  "–—‘’‛“”„‟…‧﹏.")
_ZH_DROP = frozenset(string.punctuation + ZH_PUNCTUATION)


def _pairwise(predictions: Predictions, references: References, score: Callable[[str, str], float]) -> pl.Series:
    """Max over references of ``score(pred, ref)``, a Python function called once per pair
    (jieba and the ``rouge`` package work on Python strings)."""
    rows, pairs = _pairs(predictions, references)
    values = [float(score(p, r)) for p, r in zip(pairs["pred"].to_list(), pairs["ref"].to_list())]
    return _reduce(rows, pairs.with_columns(score=pl.Series(values, dtype=pl.Float64)))


@functools.lru_cache(maxsize=1)
def _jieba() -> Any:
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading lines are not raylc's to print
    return jieba


def jieba_words(text: str) -> list[str]:
    """``jieba.cut(text, cut_all=False)``: the precise mode LongBench segments Chinese with."""
    return list(_jieba().cut(text, cut_all=False))


def normalize_zh(text: str) -> str:
    """LongBench ``normalize_zh_answer``: lower case, delete ``string.punctuation`` and
    :data:`ZH_PUNCTUATION` characters, delete all whitespace."""
    return "".join("".join(ch for ch in text.lower() if ch not in _ZH_DROP).split())


def _counter_f1(pred: list[str], ref: list[str]) -> float:
    """LongBench ``f1_score`` on token lists: Counter-intersection precision and recall, 0 when
    nothing overlaps."""
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, rec = 1.0 * same / len(pred), 1.0 * same / len(ref)
    return (2 * precision * rec) / (precision + rec)


def _qa_f1_zh(pred: str, ref: str) -> float:
    def tokens(text: str) -> list[str]:
        return [t for t in (normalize_zh(w) for w in jieba_words(text)) if t]

    return _counter_f1(tokens(pred), tokens(ref))


def qa_f1_zh(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``qa_f1_zh_score`` (multifieldqa_zh): :func:`jieba_words`, each normalized by
    :func:`normalize_zh`, empty ones dropped, then token F1; max over references."""
    return _pairwise(predictions, references, _qa_f1_zh)


def _rouge_package_l(pred: str, ref: str) -> float:
    """LongBench ``rouge_score`` on one pair: ``Rouge().get_scores([pred], [ref], avg=True)``
    of the ``rouge`` package (its default metrics, so its failures are LongBench's), the
    ``rouge-l`` F; any exception (e.g. an empty hypothesis) scores 0, as LongBench's bare except."""
    from rouge import Rouge

    try:
        return Rouge().get_scores([pred], [ref], avg=True)["rouge-l"]["f"]
    except Exception:  # noqa: BLE001
        return 0.0


def rouge_longbench(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``rouge_score`` (gov_report, qmsum, multi_news, samsum): the ``rouge``
    package's summary-level ROUGE-L F (sentences split at ".", case-sensitive whitespace
    tokens, union LCS). :func:`rouge_l` (rouge-score: lower case, ``[a-z0-9]`` tokens, stems)
    gives other numbers on most outputs, so LongBench's scores need this one. Max over references."""
    return _pairwise(predictions, references, _rouge_package_l)


def rouge_zh(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``rouge_zh_score`` (dureader, vcsum): both texts as :func:`jieba_words` joined by
    spaces, then :func:`rouge_longbench`'s ROUGE-L; max over references."""
    return _pairwise(predictions, references,
                     lambda p, r: _rouge_package_l(" ".join(jieba_words(p)), " ".join(jieba_words(r))))


def _number_share(predictions: Predictions, references: References, wanted: pl.Expr) -> pl.Series:
    """Max over references of the share of the prediction's ``\\d+`` runs equal (as strings) to
    ``wanted`` (an expression of ``ref``); 0 when the prediction has no number or ``wanted`` is
    null. Rust's ``\\d`` is Unicode ``Nd``, as Python's ``re`` on ``str``."""
    rows, pairs = _pairs(predictions, references)
    pairs = pairs.with_row_index("_pair").with_columns(_want=wanted, _num=pl.col("pred").str.extract_all(r"\d+"))
    hits = (pairs.select("_pair", "_want", "_num").explode("_num").group_by("_pair")
            .agg(right=(pl.col("_num") == pl.col("_want")).fill_null(False).sum(), total=pl.col("_num").count()))
    scored = pairs.join(hits, on="_pair", how="left").with_columns(
        score=pl.when(pl.col("total") > 0).then(pl.col("right") / pl.col("total")).otherwise(0.0))
    return _reduce(rows, scored)


def count_score(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``count_score`` (passage_count): of the numbers (``\\d+`` runs) in the
    prediction, the share equal to the reference ("05" is not "5"); 0 without numbers."""
    return _number_share(predictions, references, pl.col("ref"))


def retrieval(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``retrieval_score`` (passage_retrieval_en): :func:`count_score` against the
    number after the reference's first "Paragraph " ("Paragraph 12" -> "12"). A reference
    without one scores 0 (LongBench raises an IndexError)."""
    return _number_share(predictions, references, pl.col("ref").str.extract(r"Paragraph (\d+)", 1))


def retrieval_zh(predictions: Predictions, references: References) -> pl.Series:
    """LongBench ``retrieval_zh_score`` (passage_retrieval_zh): as :func:`retrieval`, after "段落"."""
    return _number_share(predictions, references, pl.col("ref").str.extract(r"段落(\d+)", 1))


def _classification(pred: str, ref: str, classes: Sequence[str]) -> float:
    """LongBench ``classification_score`` on one pair, its list quirk included: the classes
    found in ``pred`` (in ``all_classes`` order); then, walking that list by index while
    removing (``list.remove``, the first equal item) each one that is a proper substring of
    ``ref``, so the item after a removed one is never looked at; 1 / (what is left) if ``ref``
    is left, else 0."""
    found = [c for c in classes if c in pred]
    i = 0
    while i < len(found):  # a Python list iterator: by index, re-reading the length each step
        term = found[i]
        if term in ref and term != ref:
            found.remove(term)
        i += 1
    return 1.0 / len(found) if ref in found else 0.0


def classification(predictions: Predictions, references: References, all_classes: References) -> pl.Series:
    """LongBench ``classification_score`` (trec, lsht) with the row's ``all_classes``; max over
    references. A row without classes scores 0 (no class is found)."""
    preds = _as_predictions(predictions)
    classes = _as_references(all_classes, len(preds))
    rows, pairs = _pairs(preds, references)
    per_row = classes.to_list()
    values = [_classification(p, r, per_row[i] or []) for i, p, r in pairs.select("_row", "pred", "ref").iter_rows()]
    return _reduce(rows, pairs.with_columns(score=pl.Series(values, dtype=pl.Float64)))


# --------------------------------------------------------------------------------------------- #
# registry
# --------------------------------------------------------------------------------------------- #

#: Metrics by name. Each is ``fn(predictions, references, **kwargs) -> pl.Series[Float64]``;
#: for ``ndcg@10`` the references are the qrels.
def candidate_accuracy(predictions: Predictions, answers: References, candidates: References) -> pl.Series:
    """Thesis Section 4.2 filter accuracy: (TP + TN) / number of candidates, a candidate counting
    as returned when its name occurs in the output (case-insensitive, on word boundaries:
    both sides lower-cased with non-alphanumeric runs as single spaces). ``answers`` are the
    names that should be returned, ``candidates`` all names in the context. A null
    prediction scores 0.0; a row without candidates scores null."""
    pred = _as_predictions(predictions)
    frame = pl.DataFrame({
        "pred": pred, "ans": _as_references(answers, len(pred)), "cand": _as_references(candidates, len(pred)),
    }).with_row_index("_row")

    def norm(e: pl.Expr) -> pl.Expr:
        return pl.concat_str(pl.lit(" "), e.str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]+", " "), pl.lit(" "))

    pairs = (
        frame.explode("cand").drop_nulls("cand")
        .with_columns(
            returned=norm(pl.col("pred")).str.contains(norm(pl.col("cand")), literal=True),
            truth=pl.col("ans").list.contains(pl.col("cand")).fill_null(False),
        )
        .group_by("_row")
        .agg(score=(pl.col("returned") == pl.col("truth")).mean(), has_pred=pl.col("pred").is_not_null().first())
    )
    return (
        frame.select("_row").join(pairs, on="_row", how="left").sort("_row")
        .select(pl.when(pl.col("has_pred").is_null()).then(None).when(~pl.col("has_pred")).then(0.0)
                .otherwise(pl.col("score")).cast(pl.Float64).alias("candidate_accuracy"))
        .to_series()
    )


METRICS: dict[str, Callable[..., pl.Series]] = {
    "accuracy": accuracy,
    "exact_match": exact_match,
    "subem": subem,
    "f1": f1,
    "rougeL": rouge_l,
    "rougeLsum": rouge_lsum,
    "edit_sim": edit_sim,
    # fuzzywuzzy with python-Levenshtein installed (LongBench suite.code_matcher: levenshtein)
    "edit_sim_levenshtein": functools.partial(edit_sim, matcher="levenshtein"),
    "ndcg@10": functools.partial(ndcg, k=10),
    "recall": recall,
    "match_part": match_part,
    "candidate_accuracy": candidate_accuracy,
    "qa_f1_zh": qa_f1_zh,
    "rouge_longbench": rouge_longbench,
    "rouge_zh": rouge_zh,
    "classification": classification,
    "retrieval": retrieval,
    "retrieval_zh": retrieval_zh,
    "count": count_score,
}
# metrics that read further columns of the scored frame, passed as keyword arguments
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {"candidate_accuracy": ("candidates",), "classification": ("all_classes",)}


def score_frame(
    df: pl.DataFrame, metric: str, pred_col: str = "prediction", ref_col: str = "references", **kwargs
) -> pl.Series:
    """Score every row of ``df`` with the named metric; returns a Float64 Series named ``metric``."""
    try:
        fn = METRICS[metric]
    except KeyError:
        raise KeyError(f"unknown metric {metric!r}; known: {sorted(METRICS)}") from None
    return fn(df[pred_col], df[ref_col], **kwargs).alias(metric)

