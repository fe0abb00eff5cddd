"""Documents suite, per-suite prompt templates with the IDK extension, and ``raylc units``."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from raylc.cli import app
from raylc.spec import JobSpecError, parse_job
from raylc.suites.documents import PROBLEM_SCHEMA, DocumentsError, DocumentsSuite, build_documents, read_documents
from raylc.suites.planted import build_planted
from raylc.text.prompts import (
    IDK_ANSWER,
    IDK_CHOICE,
    NO_CONTEXT,
    TEMPLATE,
    TEMPLATES,
    TemplateError,
    render_prompt_parts,
    render_prompts,
)
from raylc.text.sampling import Sampling, sample_spans
from raylc.text.units import split_units

DATA = Path(__file__).resolve().parents[2] / "jobs" / "data" / "documents" / "example.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines()]


def suite(data=DATA, **kw) -> DocumentsSuite:
    return DocumentsSuite(kind="documents", data=str(data), **kw)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_build_documents_table():
    problems = build_documents(suite(units="ls", task_units={"sum": "u"}), seed=0)
    assert problems.schema == pl.Schema(PROBLEM_SCHEMA) and problems.height == len(ROWS)
    assert problems["problem_id"].to_list() == [str(r["id"]) for r in ROWS]  # file order, ids as strings
    assert problems["template"].to_list() == ["qa", "qa", "qa", "choice", "choice", "qa"]
    assert problems["unit_spec"].to_list() == ["ls"] * 5 + ["u"]
    for row, raw in zip(problems.iter_rows(named=True), ROWS):
        assert row["L"] == len(row["units"]) > 0 and row["document"] == raw["context"]
        assert [row["document"][a:b] for a, b in zip(row["unit_starts"], row["unit_ends"])] == row["units"]
        assert row["units"] == split_units(raw["context"], row["unit_spec"]).texts
    first = problems.row(0, named=True)
    assert first["units"] == ["The harbor council met on Monday.", "It approved the new tide tables.",
                              "The mayor was absent.", "Later, the council adjourned.", "Dr. Reyes took notes."]
    assert problems.filter(pl.col("problem_id") == "qa-2")["answers"].to_list() == [["1", "one"]]
    assert problems.filter(pl.col("problem_id") == "mc-1").row(0, named=True)["answer"] == "B"
    assert problems.filter(pl.col("problem_id") == "7")["L"].item() == 2  # two dialogue/summary pairs
    assert problems.filter(pl.col("task") == "qa")["choices"].null_count() == 3


def test_templates_per_task_sampling_and_task_filter():
    problems = build_documents(suite(template="qa", task_templates={"sum": "summary"}, tasks=["qa", "sum"]), seed=0)
    assert problems["task"].to_list() == ["qa", "qa", "qa", "sum"]
    assert problems["template"].to_list() == ["qa", "qa", "qa", "summary"]
    a = build_documents(suite(problems_per_task=2), seed=1)
    assert a.group_by("task").len().sort("task")["len"].to_list() == [2, 2, 1]
    assert a.equals(build_documents(suite(problems_per_task=2), seed=1))
    seeds = {tuple(build_documents(suite(problems_per_task=1), seed=s)["problem_id"]) for s in range(8)}
    assert len(seeds) > 1  # the sample depends on the seed
    with pytest.raises(DocumentsError, match="task 'nope' of suite.tasks is not in the file"):
        build_documents(suite(tasks=["qa", "nope"]), seed=0)


def test_csv_and_parquet_inputs(tmp_path):
    csv = tmp_path / "d.csv"
    pl.DataFrame({
        "task": ["mc", "open"], "id": [1, 2], "context": ["One. Two. Three.", "Alpha.\nBeta."],
        "question": ["Q1?", "Q2?"],
        "answer": ["C", "beta"], "choice_A": ["a", None], "choice_B": ["b", None], "choice_C": ["c", None],
        "choice_D": ["d", None],
    }).write_csv(csv)
    problems = build_documents(suite(csv), seed=0)
    assert problems["choices"].to_list() == [["a", "b", "c", "d"], None]
    assert problems["template"].to_list() == ["choice", "qa"] and problems["L"].to_list() == [3, 2]
    pq = tmp_path / "d.parquet"
    read_documents(str(DATA)).rename({"problem_id": "id"}).write_parquet(pq)
    assert build_documents(suite(pq), seed=0).equals(build_documents(suite(), seed=0))


BAD = [
    (lambda r: r.pop("question"), "missing field 'question'"),
    (lambda r: r.update(question=None), "row 2 (id 'qa-2'): missing field 'question'"),
    (lambda r: r.update(context="  \n "), "row 2 (id 'qa-2'): empty context"),
    (lambda r: r.update(id="qa-1"), "row 2: duplicate id 'qa-1' (first at row 1)"),
    (lambda r: (r.pop("answers"), r.update(answer="")), "row 2 (id 'qa-2'): missing field 'answer'"),
]


@pytest.mark.parametrize("edit,message", BAD)
def test_bad_files_name_file_row_and_field(tmp_path, edit, message):
    rows = [dict(r) for r in ROWS]
    if message.startswith("missing field 'question'"):
        rows = [{k: v for k, v in r.items() if k != "question"} for r in rows]
    else:
        edit(rows[1])
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DocumentsError) as exc:
        build_documents(suite(path), seed=0)
    text = str(exc.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_nested_lists_and_bytes_that_are_not_text_are_one_line(tmp_path):
    """A list of lists where answers or choices belong, or a Parquet binary id that is not UTF-8,
    is named (polars' casts would raise a compute error)."""
    rows = [dict(r) for r in ROWS]
    rows[1]["answers"] = [["1"]]
    with pytest.raises(DocumentsError, match=r"field 'answers' must be a list of strings \(got List\(List"):
        read_documents(write_jsonl(tmp_path / "a.jsonl", rows))
    rows = [dict(r) for r in ROWS]
    rows[3]["choices"] = [["a"], ["b"], ["c"], ["d"]]
    with pytest.raises(DocumentsError, match=r"field 'choices' must be a list of 4 strings"):
        read_documents(write_jsonl(tmp_path / "b.jsonl", [rows[3]]))
    frame = read_documents(str(DATA)).rename({"problem_id": "id"})
    binary = frame.with_columns(pl.when(pl.int_range(pl.len()) == 1).then(pl.lit(b"\xff\xfe", pl.Binary))
                                .otherwise(pl.col("id").cast(pl.Binary)).alias("id"))
    binary.write_parquet(tmp_path / "c.parquet")
    with pytest.raises(DocumentsError, match=r"c.parquet: row 2: field 'id' is not UTF-8 text$"):
        read_documents(str(tmp_path / "c.parquet"))
    frame.with_columns(pl.col("id").cast(pl.Binary)).write_parquet(tmp_path / "d.parquet")
    assert read_documents(str(tmp_path / "d.parquet")).equals(read_documents(str(DATA)))


def test_bad_choices(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[3]["choices"] = ["x", "y", "z"]
    with pytest.raises(DocumentsError, match=r"row 4 \(id 'mc-1'\): 'choices' must hold 4 options"):
        read_documents(write_jsonl(tmp_path / "a.jsonl", rows))
    rows = [dict(r) for r in ROWS]
    rows[4]["answer"] = "the tax office"
    with pytest.raises(DocumentsError,
                       match=r"row 5 \(id 'mc-2'\): field 'answer' of a four-choice question must be one of A"):
        read_documents(write_jsonl(tmp_path / "b.jsonl", rows))
    with pytest.raises(DocumentsError, match="no such file"):
        read_documents(str(tmp_path / "missing.jsonl"))


def test_documents_suite_in_job_files():
    job = parse_job({"name": "d", "suite": {"kind": "documents", "data": "x.jsonl", "units": "ls",
                                              "task_units": {"t": "rlt"}, "task_templates": {"t": "summary"}}})
    assert job.suite.kind == "documents" and job.suite.task_units == {"t": "rlt"} and job.suite.template == "auto"
    for suite_data, key in [({"units": "lz"}, "suite.units"), ({"task_units": {"t": "q9"}}, "suite.task_units"),
                            ({"template": "poem"}, "suite.template"),
                            ({"task_templates": {"t": "x"}}, "suite.task_templates")]:
        with pytest.raises(JobSpecError, match=key):
            parse_job({"name": "d", "suite": {"kind": "documents", "data": "x.jsonl", **suite_data}})


# ---- prompts --------------------------------------------------------------------------------------------------------

def test_planted_prompts_unchanged():
    from raylc.suites.planted import PlantedSuite

    problems = build_planted(PlantedSuite(problems_per_task=3, min_units=5, max_units=30), seed=1)
    spans = sample_spans(problems, Sampling(), 1)
    units = dict(zip(problems["problem_id"], problems["units"].to_list()))
    question = dict(zip(problems["problem_id"], problems["question"]))
    expected = [
        TEMPLATE.format(context=" ".join(units[p][s : s + c]) if c else NO_CONTEXT, question=question[p])
        for p, c, s in spans.select("problem_id", "C", "start").iter_rows()
    ]
    assert render_prompts(spans, problems).to_list() == expected
    parts = render_prompt_parts(spans, problems)
    assert parts.columns == ["head", "context", "tail"]
    assert (parts["head"] + parts["context"] + parts["tail"]).to_list() == expected


def test_document_prompts_idk_extension_and_spans():
    problems = build_documents(suite(units="l", task_templates={"sum": "summary"}), seed=0)
    spans = sample_spans(problems, Sampling(), 0)
    parts = render_prompt_parts(spans, problems)
    prompts = render_prompts(spans, problems)
    assert prompts.to_list() == (parts["head"] + parts["context"] + parts["tail"]).to_list()
    joined = spans.join(problems, on="problem_id", how="left", maintain_order="left")
    for row, part in zip(joined.iter_rows(named=True), parts.iter_rows(named=True)):
        c, s = row["C"], row["start"]
        if c == 0:
            assert part["context"] == NO_CONTEXT
        else:  # the document between the span's first and last unit, separators kept
            assert part["context"] == row["document"][row["unit_starts"][s] : row["unit_ends"][s + c - 1]]
            assert [x for x in part["context"].split("\n") if x] == row["units"][s : s + c]
        assert row["question"] in part["tail"] and row["question"] not in part["head"]  # the question is never sampled
        if row["template"] == "qa":
            assert f'you should answer "{IDK_ANSWER}"' in part["head"]
        elif row["template"] == "choice":
            assert f'write "{IDK_CHOICE}" for "unanswerable"' in part["head"]
            options = "\n".join(f"{x}. {o}" for x, o in zip("ABCD", row["choices"]))
            assert part["tail"].endswith(f"{options}\nE. The question is unanswerable.\nAnswer:")
        else:
            assert "unanswerable" not in (part["head"] + part["tail"]).lower()  # no IDK for summarization
    assert set(joined["template"]) == {"qa", "choice", "summary"}


def test_template_errors_and_defaults():
    problems = build_documents(suite(), seed=0)
    spans = pl.DataFrame({"problem_id": ["qa-1"], "C": [1], "start": [0]})
    assert render_prompts(spans, problems.with_columns(template=pl.lit(None, pl.String)))[0].startswith(TEMPLATE[:40])
    with pytest.raises(TemplateError, match="unknown prompt template 'poem'"):
        render_prompts(spans, problems.with_columns(template=pl.lit("poem")))
    with pytest.raises(TemplateError, match="needs a 'choices' column"):
        render_prompts(spans, problems.drop("choices").with_columns(template=pl.lit("choice")))
    with pytest.raises(KeyError, match="unknown problem_id 'zz'"):
        render_prompts(spans.with_columns(problem_id=pl.lit("zz")), problems)
    assert set(TEMPLATES) >= {"planted", "qa", "choice", "summary"} and TEMPLATES["planted"] == TEMPLATE


# ---- raylc units ----------------------------------------------------------------------------------------------------

def test_units_cli(tmp_path):
    runner = CliRunner()
    out = tmp_path / "stats.parquet"
    result = runner.invoke(app, ["units", str(DATA), "--spec", "b,ls", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Units of" in result.stdout and "qa" in result.stdout and "tok/u" in result.stdout
    stats = pl.read_parquet(out)
    assert stats.select("task", "spec").rows() == [("mc", "b"), ("mc", "ls"), ("qa", "b"), ("qa", "ls"),
                                                   ("sum", "b"), ("sum", "ls")]
    qa = stats.filter((pl.col("task") == "qa") & (pl.col("spec") == "ls")).row(0, named=True)
    assert qa["problems"] == 3 and qa["units_max"] == 7 and qa["units_p50"] == 5.0  # 5, 4 and 7 units

    other = write_jsonl(tmp_path / "other.jsonl", [{"kind": "x", "text": "A b. C d."}, {"kind": "y", "text": "E."}])
    result = runner.invoke(app, ["units", other, "--task-field", "kind", "--context-field", "text", "--spec", "s"])
    assert result.exit_code == 0 and "x" in result.stdout

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"task": "t", "context": "ok"}, {"task": "t", "context": ""}])
    for args, message in [([bad], f"error: {bad}: row 2: empty context"),
                          ([str(DATA), "--spec", "lz"], "error: unit spec 'lz': unknown letter(s) 'z'"),
                          ([str(DATA), "--task-field", "kind"], f"error: {DATA}: missing field 'kind'"),
                          ([str(tmp_path / "none.jsonl")], "no such file")]:
        result = runner.invoke(app, ["units", *args])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error: ")
        assert result.stdout == ""


def test_units_cli_with_a_local_hf_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    words = sorted({w for r in ROWS for w in r["context"].split()})
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0,
                                                            **{w: i + 1 for i,
                                                               w in enumerate(words)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    out = tmp_path / "s.parquet"
    result = CliRunner().invoke(app, ["units", str(DATA), "--spec", "ls", "--tokenizer",
                                      f"hf:{path}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    qa = pl.read_parquet(out).filter(pl.col("task") == "qa").row(0, named=True)
    expected = sorted(len(r["context"].split()) for r in ROWS if r["task"] == "qa")
    assert qa["ctx_tokens_max"] == expected[-1] and qa["ctx_tokens_p50"] == expected[1]  # whitespace words
    result = CliRunner().invoke(app, ["units", str(DATA), "--tokenizer", "bogus"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == ["error: unknown tokenizer 'bogus': use "
                                                                            "'default' or 'hf:<name-or-path>'"]
