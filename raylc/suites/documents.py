"""Documents suite: user-provided long-context problems for the DOLCE pipeline.

Input: one table (JSON Lines, Parquet or CSV; local or s3://), one problem per row:

==============  ==========================================================================
field           meaning
==============  ==========================================================================
``task``        task name (string, required)
``id``          problem id (string or integer, required, unique over the whole file)
``context``     the long context to split into units (string, required, not blank)
``question``    the question, or the instruction of a summarization task (required)
``answer``      the reference answer (string); or ``answers``: list of references
``choices``     optional: a list of exactly 4 options (A-D), or columns ``choice_A`` ..
                ``choice_D`` (CSV); a row with options is four-choice and its answer is
                one letter A-D
==============  ==========================================================================

Rows are numbered from 1 in file order. A bad file raises :class:`DocumentsError` with one
line naming the file, the row and the field (missing field, empty context, duplicate id,
malformed choices, a task name that is not a safe path segment (:mod:`raylc.io.names`: tasks
name the ``infer/task=<task>/`` folders) or that differs from another only in case, a task
whose every context is a single unit). Other columns are ignored. A file in LongBench v1's
released format (``input, context, answers, length, dataset, language, all_classes, _id``) is
read with ``dataset`` as the task, ``_id`` as the id and ``input`` as the question, and each
dataset's contexts split by DOLCE Table 4's unit spec
(:data:`raylc.suites.longbench.DOLCE_UNITS`) unless ``task_units`` names another.
"""

from __future__ import annotations

import hashlib
from typing import Literal, Optional

import numpy as np
import polars as pl
from pydantic import Field, field_validator

from raylc.io.names import CASE_CLASH_WHY, UnsafeName, case_clash, path_segment
from raylc.io.schemas import Column, TableSchema, declare
from raylc.io.store import StoreError, locate, read_input
from raylc.suites.registry import DOLCE_LENGTHS, JOB_METRIC, PROBE_BUDGET, DolceSuite, SuiteInfo, Task, register_suite
from raylc.text.prompts import AUTO, CHOICE_LETTERS
from raylc.text.units import UnitSpecError, parse_spec, split_units, unit_stats


class DocumentsSuite(DolceSuite):
    """User-provided problems for the DOLCE pipeline (:mod:`raylc.suites.documents`): a
    JSONL/Parquet/CSV file (``data``, local or s3://) with fields ``task, id, context, question,
    answer`` (or ``answers``) and optional ``choices``. Contexts are split into units by
    ``units`` (DOLCE Table 3 letters, e.g. ``ls``), per task by ``task_units``; prompts use
    ``template`` (a name in :data:`raylc.text.prompts.TEMPLATES`, or ``auto``: ``choice`` for rows
    with choices, else ``qa``), per task ``task_templates``. ``tasks`` keeps only those tasks;
    ``problems_per_task`` keeps a seeded sample of that many problems per task."""

    kind: Literal["documents"] = Field(description="`documents`: your own problems file for DOLCE.")
    data: str = Field(min_length=1, description=(
        "The problems file (JSONL/Parquet/CSV, local or s3://): `task, id, context, question, answer` (or "
        "`answers`), optional `choices`; or LongBench v1's released JSONL as published."))
    units: str = Field(default="s", description=(
        "How contexts split into units: DOLCE Table 3 letters applied in order (e.g. `ls`: lines, then "
        "sentences)."))
    task_units: dict[str, str] = Field(default={}, description=(
        "Unit specs per task, over `units` (LongBench v1 files: DOLCE Table 4's per dataset by default)."))
    template: str = Field(default="auto", description=(
        "Prompt template: `qa`, `choice`, `summary`, `planted` (the planted suite's), or `auto` (`choice` for rows "
        "with choices, else `qa`)."))
    task_templates: dict[str, str] = Field(default={}, description="Templates per task, over `template`.")
    tasks: Optional[list[str]] = Field(default=None, min_length=1, description=(
        "Keep only these tasks of the file; null: every task."))
    problems_per_task: Optional[int] = Field(default=None, ge=1, description=(
        "Keep a seeded sample of this many problems per task; null: every problem."))

    columns = declare(("unit_spec", pl.String, "The unit spec the context was split by (`units` or `task_units`)."))

    @field_validator("units")
    @classmethod
    def _unit_spec(cls, v: str) -> str:
        from raylc.text.units import parse_spec

        return parse_spec(v)

    @field_validator("task_units")
    @classmethod
    def _task_unit_specs(cls, v: dict[str, str]) -> dict[str, str]:
        from raylc.text.units import parse_spec

        return {task: parse_spec(spec) for task, spec in v.items()}

    @field_validator("template")
    @classmethod
    def _template(cls, v: str) -> str:
        from raylc.text.prompts import check_template

        return check_template(v, auto=True)

    @field_validator("task_templates")
    @classmethod
    def _task_templates(cls, v: dict[str, str]) -> dict[str, str]:
        from raylc.text.prompts import check_template

        return {task: check_template(name, auto=True) for task, name in v.items()}


CHOICE_COLUMNS = tuple(f"choice_{x}" for x in CHOICE_LETTERS)

PROBLEM_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(),
    "problem_id": pl.String(),
    "L": pl.Int64(),
    "units": pl.List(pl.String()),
    "question": pl.String(),
    "answer": pl.String(),
    "answers": pl.List(pl.String()),
    "choices": pl.List(pl.String()),
    "template": pl.String(),
    "unit_spec": pl.String(),
    "document": pl.String(),
    "unit_starts": pl.List(pl.Int64()),
    "unit_ends": pl.List(pl.Int64()),
}


class DocumentsError(ValueError):
    """A documents file that cannot be used; the message is one line naming file, row and field."""


def _read(uri: str) -> pl.DataFrame:
    try:
        return read_input(uri)
    except StoreError as exc:
        if "no such file" in str(exc) or "unsupported format" in str(exc) or "cannot parse" in str(exc):
            raise DocumentsError(str(exc)) from None
        raise


def _first_bad(frame: pl.DataFrame, bad: pl.Expr) -> Optional[int]:
    """0-based index of the first row where ``bad`` holds, or None."""
    hits = frame.select(pl.arg_where(bad.fill_null(True)).first())
    return None if hits.is_empty() or hits.item() is None else int(hits.item())


def _check_text(frame: pl.DataFrame, uri: str, name: str, what: str = "missing field") -> pl.DataFrame:
    """Field ``name`` as strings; the first null row (blank for the context) is an error."""
    if name not in frame.columns:
        raise DocumentsError(f"{uri}: missing field {name!r} (columns: {', '.join(frame.columns)})")
    if isinstance(frame.schema[name], (pl.List, pl.Struct, pl.Array)):
        raise DocumentsError(f"{uri}: field {name!r} must hold text, not {frame.schema[name]}")
    if frame.schema[name] == pl.Binary:  # Parquet bytes: text only where they are UTF-8 (polars' cast raises)
        for row, value in enumerate(frame[name]):
            try:
                value is None or value.decode("utf-8")
            except UnicodeDecodeError:
                raise DocumentsError(f"{uri}: row {row + 1}: field {name!r} is not UTF-8 text") from None
    frame = frame.with_columns(pl.col(name).cast(pl.String))
    blank = pl.col(name).is_null()
    if name != "id" and what == "empty":
        blank = blank | (pl.col(name).str.strip_chars().str.len_chars() == 0)
    i = _first_bad(frame, blank)
    if i is not None:
        message = f"empty {name}" if what == "empty" else f"missing field {name!r}"
        raise DocumentsError(f"{uri}: row {i + 1}{_id_of(frame, i)}: {message}")
    return frame


def _id_of(frame: pl.DataFrame, i: int) -> str:
    if "id" in frame.columns and frame.schema["id"] == pl.String and frame["id"][i] is not None:
        return f" (id {frame['id'][i]!r})"
    return ""


def read_contexts(uri: str, task_field: str = "task", context_field: str = "context") -> pl.DataFrame:
    """``task, context`` of a problems file (only these two fields are checked)."""
    frame = _read(uri)
    frame = _check_text(frame, uri, task_field)
    frame = _check_text(frame, uri, context_field, "empty")
    return frame.select(pl.col(task_field).alias("task"), pl.col(context_field).alias("context"))


def is_longbench(frame: pl.DataFrame) -> bool:
    """A file in LongBench v1's released format (``dataset, _id, input`` and no ``task``)."""
    from raylc.suites.longbench import DOCUMENT_FIELDS

    return "task" not in frame.columns and all(c in frame.columns for c in DOCUMENT_FIELDS)


def read_documents(uri: str) -> pl.DataFrame:
    """The validated problems of a documents file (see the module docstring):
    ``task, problem_id, context, question, answer, answers, choices`` in file order. A file in
    LongBench v1's released format is read with ``dataset, _id, input`` as ``task, id, question``."""
    from raylc.suites.longbench import DOCUMENT_FIELDS

    frame = _read(uri)
    if is_longbench(frame):
        frame = frame.drop([c for c in DOCUMENT_FIELDS.values() if c in frame.columns]).rename(DOCUMENT_FIELDS)
    frame = _check_text(frame, uri, "id")
    frame = _check_text(frame, uri, "task")
    frame = _check_text(frame, uri, "context", "empty")
    frame = _check_text(frame, uri, "question")
    _check_task_names(frame, uri)
    frame = frame.with_columns(_row=pl.int_range(1, pl.len() + 1))
    dup = _first_bad(frame, pl.col("id").is_duplicated() & (pl.col("_row") > pl.col("_row").min().over("id")))
    if dup is not None:
        first = frame.filter(pl.col("id") == frame["id"][dup])["_row"][0]
        raise DocumentsError(f"{uri}: row {dup + 1}: duplicate id {frame['id'][dup]!r} (first at row {first})")
    frame = frame.with_columns(answers=_answers(frame, uri), choices=_choices(frame, uri))
    i = _first_bad(frame, pl.col("answers").list.len() == 0)
    if i is not None:
        raise DocumentsError(f"{uri}: row {i + 1}{_id_of(frame, i)}: missing field 'answer' (or a non-empty 'answers' "
                             "list)")
    n_opts = pl.col("choices").list.len()
    i = _first_bad(frame,
                   pl.col("choices").is_not_null() & ((n_opts != len(CHOICE_LETTERS)) | pl.col("choices").list.eval(
        pl.element().is_null()).list.any()))
    if i is not None:
        raise DocumentsError(f"{uri}: row {i + 1}{_id_of(frame, i)}: 'choices' must hold {len(CHOICE_LETTERS)} options "
                             f"(got {frame['choices'][i].to_list()!r})")
    letters = pl.col("answers").list.eval(pl.element().str.strip_chars().is_in(list(CHOICE_LETTERS))).list.all()
    i = _first_bad(frame, pl.col("choices").is_not_null() & ~letters)
    if i is not None:
        raise DocumentsError(f"{uri}: row {i + 1}{_id_of(frame, i)}: field 'answer' of a four-choice question must be "
                             f"one of {', '.join(CHOICE_LETTERS)} (got {frame['answers'][i].to_list()!r})")
    return frame.select(
        "task", pl.col("id").alias("problem_id"), "context", "question",
        answer=pl.col("answers").list.first().str.strip_chars(), answers=pl.col("answers"), choices=pl.col("choices"),
    )


def _check_task_names(frame: pl.DataFrame, uri: str) -> None:
    """Every task is a safe path segment (:func:`raylc.io.names.path_segment`, named at its first
    row) and no two tasks differ only in case (one folder on a case-insensitive filesystem)."""
    firsts = dict(frame.with_row_index("_i").group_by("task", maintain_order=True).agg(pl.col("_i").first())
                  .iter_rows())
    for task, i in firsts.items():
        try:
            path_segment(task, "task", f"{i + 1}{_id_of(frame, i)}", uri)
        except UnsafeName as exc:
            raise DocumentsError(str(exc)) from None
    clash = case_clash(firsts)
    if clash:
        (other, task), i = clash, firsts[clash[1]]
        raise DocumentsError(
            f"{uri}: row {i + 1}{_id_of(frame, i)}: task {task!r} differs from task {other!r} (row "
            f"{firsts[other] + 1}) "
            f"only in case ({CASE_CLASH_WHY})")


def _flat_list(dtype: pl.DataType) -> bool:
    """A list of text, numbers or nulls (each cast to text), not of lists, structs or bytes."""
    return isinstance(dtype, pl.List) and not isinstance(dtype.inner, (pl.List, pl.Struct, pl.Array, pl.Binary))


def _answers(frame: pl.DataFrame, uri: str) -> pl.Expr:
    """``answer`` (first) and ``answers`` merged into one list; nulls, blanks and repeats dropped."""
    parts = []
    if "answer" in frame.columns:
        if isinstance(frame.schema["answer"], (pl.List, pl.Struct, pl.Array)):
            raise DocumentsError(f"{uri}: field 'answer' must hold text (use 'answers' for a list)")
        parts.append(pl.concat_list(pl.col("answer").cast(pl.String)))
    if "answers" in frame.columns:
        if not _flat_list(frame.schema["answers"]):
            raise DocumentsError(f"{uri}: field 'answers' must be a list of strings (got {frame.schema['answers']})")
        parts.append(pl.col("answers").cast(pl.List(pl.String)).fill_null(pl.lit([], pl.List(pl.String))))
    if not parts:
        raise DocumentsError(f"{uri}: missing field 'answer' (or 'answers'; columns: {', '.join(frame.columns)})")
    merged = pl.concat_list(parts) if len(parts) > 1 else parts[0]
    return merged.list.eval(pl.element().filter(pl.element().str.strip_chars().str.len_chars() > 0)).list.unique(
        maintain_order=True)


def _choices(frame: pl.DataFrame, uri: str) -> pl.Expr:
    """The options as a list (null for an open question), from ``choices`` or ``choice_A..D``."""
    if "choices" in frame.columns:
        if not _flat_list(frame.schema["choices"]):
            raise DocumentsError(f"{uri}: field 'choices' must be a list of {len(CHOICE_LETTERS)} strings "
                                 f"(CSV: columns {', '.join(CHOICE_COLUMNS)})")
        return pl.col("choices").cast(pl.List(pl.String))
    present = [c for c in CHOICE_COLUMNS if c in frame.columns]
    if not present:
        return pl.lit(None, pl.List(pl.String))
    if len(present) < len(CHOICE_COLUMNS):
        missing = next(c for c in CHOICE_COLUMNS if c not in frame.columns)
        raise DocumentsError(f"{uri}: missing field {missing!r} (choice columns {', '.join(CHOICE_COLUMNS)} go "
                             "together)")
    cols = [pl.col(c).cast(pl.String) for c in CHOICE_COLUMNS]
    return pl.when(pl.all_horizontal([c.is_null() for c in cols])).then(None).otherwise(pl.concat_list(cols))


def _sample(frame: pl.DataFrame, n: Optional[int], seed: int) -> pl.DataFrame:
    """Keep a seeded sample of at most ``n`` problems per task, in file order."""
    if n is None:
        return frame
    keep = np.zeros(frame.height, bool)
    for task, idx in frame.with_row_index("_i").group_by("task").agg("_i").iter_rows():
        salt = int.from_bytes(hashlib.blake2b(task.encode(), digest_size=8).digest(), "little")
        chosen = np.asarray(idx) if len(idx) <= n else np.random.default_rng([seed, salt]).choice(idx, n, replace=False)
        keep[chosen] = True
    return frame.filter(pl.Series(keep))


def split_documents(contexts: list[str], specs: list[str]) -> pl.DataFrame:
    """Unit columns ``L, units, unit_starts, unit_ends, document`` for each context under its spec."""
    split = [split_units(c, s) for c, s in zip(contexts, specs)]
    return pl.DataFrame(
        {
            "L": [len(u) for u in split],
            "units": [u.texts for u in split],
            "unit_starts": [u.starts for u in split],
            "unit_ends": [u.ends for u in split],
            "document": [u.text for u in split],
        },
        schema={k: PROBLEM_SCHEMA[k] for k in ("L", "units", "unit_starts", "unit_ends", "document")},
    )


DOCUMENTS_INFO = SuiteInfo(
    title="Your own documents",
    tasks=(Task("(the file's tasks)", JOB_METRIC, PROBE_BUDGET, "DOLCE Section 3, Tables 3-4 (no released code)",
                note="Spans scored per template: `qa` by `scoring.metric`, `choice` by the letter, `summary` by "
                     "ROUGE-L (`raylc/scoring/observations.py`)."),),
    lengths=DOLCE_LENGTHS,
    data="`suite.data`: one problem per row.",
    real_data="Your own problems; or LongBench v1's released JSONL (the Hugging Face dataset `THUDM/LongBench`, "
              "`data.zip`, one file per dataset), read as published with DOLCE Table 4's units per dataset.",
    official="DOLCE (no released code); THUDM/LongBench's data format",
)


@register_suite(DocumentsSuite, DOCUMENTS_INFO)
def build_documents(suite: DocumentsSuite, seed: int) -> pl.DataFrame:
    """Problems table of a documents suite (columns :data:`PROBLEM_SCHEMA`, file order).

    Compatible with the planted suite's table for the DOLCE pipeline (``task, problem_id,
    L, units, question, answer``); ``document[unit_starts[i]:unit_ends[i]] == units[i]``
    (``document`` is the context, after the spec's ``r`` rewrite if any). ``template`` is the
    prompt template of :mod:`raylc.text.prompts`; ``seed`` draws the ``problems_per_task`` sample.
    """
    uri = suite.data_path(suite.data)
    frame = read_documents(uri)
    task_units = suite.task_units
    if is_longbench(_read(uri)):  # DOLCE Table 4's units for LongBench's datasets, unless the job sets them
        from raylc.suites.longbench import DOLCE_UNITS

        task_units = {**DOLCE_UNITS, **suite.task_units}
    if suite.tasks is not None:
        missing = sorted(set(suite.tasks) - set(frame["task"].unique().to_list()))
        if missing:
            raise DocumentsError(f"{suite.data}: task {missing[0]!r} of suite.tasks is not in the file "
                                 f"(tasks: {', '.join(sorted(frame['task'].unique().to_list()))})")
        frame = frame.filter(pl.col("task").is_in(suite.tasks))
    frame = _sample(frame, suite.problems_per_task, seed)
    specs = frame.select(pl.col("task").replace_strict(task_units, default=suite.units, return_dtype=pl.String))
    named = pl.col("task").replace_strict(suite.task_templates, default=suite.template, return_dtype=pl.String)
    auto = pl.when(pl.col("choices").is_not_null()).then(pl.lit("choice")).otherwise(pl.lit("qa"))
    frame = frame.with_columns(template=pl.when(named == AUTO).then(auto).otherwise(named), unit_spec=specs.to_series())
    units = split_documents(frame["context"].to_list(), frame["unit_spec"].to_list())
    problems = pl.concat([frame.drop("context"), units], how="horizontal")
    single = problems.with_row_index("_i").filter((pl.col("L").max().over("task") < 2))
    if single.height:  # the fit needs a partial observation 0 < C < L in every task
        row = single.row(0, named=True)
        raise DocumentsError(
            f"{suite.data}: task {row['task']!r} (e.g. id {row['problem_id']!r}): every context splits into a single "
            f"unit (units {row['unit_spec']!r}); DOLCE needs contexts of at least 2 units (a partial observation "
            "0 < C < L): choose a finer suite.units / task_units")
    return problems.select(list(PROBLEM_SCHEMA)).cast(PROBLEM_SCHEMA)


_STATS = {"ctx_tokens": "tokens per context", "units": "units per problem", "unit_tokens": "tokens per unit"}
#: what ``raylc units DATA --out FILE`` writes (DOLCE Figure 5)
UNIT_STATS = TableSchema("units", "FILE", "One row per task and unit spec: its problems and lengths.", (
    *declare(("task", pl.String, "The task."), ("spec", pl.String, "The unit spec (DOLCE Table 3 letters)."),
             ("problems", pl.UInt32, "Problems of the task.")),
    *(Column(f"{stat}_{q}", pl.Int64() if q == "max" else pl.Float64(), f"The {q} of the {what}.")
      for stat, what in _STATS.items() for q in ("p50", "p99", "max"))))


def unit_report(uri: str, specs: list[str], task_field: str = "task", context_field: str = "context",
                tokenizer: Optional[str] = None, out: Optional[str] = None) -> pl.DataFrame:
    """Per-task unit statistics of a problems file under each unit spec (DOLCE Figure 5,
    :func:`raylc.text.units.unit_stats`); written as Parquet to ``out`` (local or s3://) when given."""
    from raylc.text.tokenize import get_tokenizer

    try:
        specs = [parse_spec(s) for s in specs]
        tok = get_tokenizer(tokenizer)
    except (UnitSpecError, ValueError, ImportError, OSError) as exc:
        raise DocumentsError(str(exc).splitlines()[0]) from None
    frame = read_contexts(uri, task_field, context_field)
    tables = []
    for spec in specs:
        units = split_documents(frame["context"].to_list(), [spec] * frame.height)
        tables.append(frame.select("task", "context", spec=pl.lit(spec)).with_columns(units=units["units"]))
    stats = UNIT_STATS.check(unit_stats(pl.concat(tables), tok))
    if out is not None:
        store, name = locate(out)
        store.write_table(stats, name)
    return stats
