"""Tables for people (:mod:`raylc.io.tables`): piped or logged output never cuts a cell."""

import io

import polars as pl
from cli_runner import raylc

from raylc.io.tables import PIPED_WIDTH, console, format_cells, markdown_table, rich_table

MODELS = ["meta-llama/Llama-3.1-70B-Instruct-long-context-v2", "Qwen/Qwen2.5-14B-Instruct-1M-yarn-256k-eval"]
TASKS = ["multi_doc_qa_with_a_long_task_name", "kv_retrieval"]


def test_a_console_that_is_not_a_terminal_is_wide_enough_for_any_table():
    buf = io.StringIO()
    out = console(buf)
    assert not out.is_terminal and out.width == PIPED_WIDTH
    frame = pl.DataFrame({"model": MODELS, "task": TASKS, "avg_lc": [-12.5, -3.25]})
    out.print(rich_table(frame, "LongScore"))
    text = buf.getvalue()
    assert "…" not in text and all(m in text for m in MODELS) and all(t in text for t in TASKS)


def test_piped_longscore_shows_every_name_at_80_columns(tmp_path):
    rows = [(m, t, length, 0.9 - i / 10 - length / 40000) for i, m in enumerate(MODELS) for t in TASKS
            for length in (2048, 4096, 8192, 16384)]
    pl.DataFrame(rows, schema=["model", "task", "length", "score"], orient="row").write_csv(tmp_path / "s.csv")
    out = raylc("longscore", tmp_path / "s.csv", "--out", tmp_path / "o", "--base-lengths", "2048,4096", "--no-ray",
                env={"COLUMNS": "80", "TERM": "xterm"})
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and all(m in out.stdout for m in MODELS) and all(t in out.stdout for t in TASKS)


def test_a_narrow_terminal_wraps_cells_and_never_cuts_them():
    """At 80 columns long run ids and task names are folded onto more lines, not cut to "…"."""
    from rich.console import Console

    ids = ["helmet-recall-20261126-123456-abcdef", "helmet-recall-20261126-123456-abcdeg"]
    wide = pl.DataFrame({"run_id": ids, "task": ["mk_needle_number_with_a_long_suffix", "mk_needle_uuid_x"],
                         "job": ["helmet-recall"] * 2, "model": ["/models/some/very/long/model/path/SmolLM2"] * 2,
                         "state": ["done"] * 2, "created": ["2026-11-26 12:34:56 UTC"] * 2})
    out = Console(width=80, force_terminal=True, record=True, file=io.StringIO())
    out.print(rich_table(wide, "runs"))
    text = out.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    one = Console(width=20, force_terminal=True, record=True, file=io.StringIO())
    one.print(rich_table(wide.select("run_id"), "ids"))
    cells = "".join(line.strip("│┃ ") for line in one.export_text().splitlines()[3:])
    assert all(i in cells.replace("─", "").replace("└", "").replace("┘", "") for i in ids)


def test_cells_print_numbers_as_a_reader_expects():
    df = pl.DataFrame({"tokens": [2018.0, 3.0, None], "score": [1.0, 0.96, -0.0], "p": [1e-8, 0.5, 0.2],
                       "warning": [None, "x", None]})
    rows = format_cells(df, ())
    assert rows[0] == ["2018", "1.00", "1e-08", ""] and rows[2] == ["", "0.00", "0.2", ""]
    assert all("None" not in c and "-0.0" not in c for r in rows for c in r)
    shares = format_cells(pl.DataFrame({"share": [-0.0001, -0.0, -0.01, 0.5]}), ("share",))
    assert [r[0] for r in shares] == ["0.0%", "0.0%", "-1.0%", "50.0%"]  # "-0.0%" before


def test_at_80_columns_run_ids_task_names_and_numbers_stay_whole():
    """A table wider than the terminal prints a column that is the same in every row once under
    it, keeps run ids and task names whole on one line, then numbers, and folds the rest."""
    from rich.console import Console

    ids = ["helmet-recall-20261126-123456-abcdef", "helmet-recall-20261126-123456-abcdeg"]
    tasks = ["mk_needle_number", "multi_doc_qa_long"]
    wide = pl.DataFrame({"run_id": ids, "model": ["/models/some/very/long/model/path/SmolLM2"] * 2, "task": tasks,
                         "avg_score": [0.91, 0.8], "avg_lc": [-12.25, -3.5], "rank": [1, 2],
                         "warning": ["bootstrap Base <= 0 in some resamples: CI undefined", None]})
    out = Console(width=80, force_terminal=True, record=True, file=io.StringIO())
    out.print(rich_table(wide, "LongScore per run"))
    text = out.export_text()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text
    for name in (*ids, *tasks):
        assert any(name in line for line in lines), name
    assert "model: /models/some/very/long/model/path/SmolLM2" in text.replace("\n", "")
    wider = Console(width=100, force_terminal=True, record=True, file=io.StringIO())
    wider.print(rich_table(wide, "LongScore per run"))  # room for the numbers too: the warning folds
    lines = wider.export_text().splitlines()
    for name in (*ids, *tasks, "-12.25", "0.91", "-3.50"):
        assert any(name in line for line in lines), name
    widest = Console(width=200, force_terminal=True, record=True, file=io.StringIO())
    widest.print(rich_table(wide, "LongScore per run"))  # wide enough: every column as it is
    assert widest.export_text().count("/models/some/very/long/model/path/SmolLM2") == 2


def test_a_markdown_cell_stays_one_cell_and_shows_a_name_as_it_is():
    """A task name with a pipe, a line break, a tab or HTML is one cell of one row, never markup."""
    df = pl.DataFrame({"task | name": ['<b>x</b> & "q" | pipe', "tab\tnew\nline", "plain"], "n": [1, 2, 3]})
    lines = markdown_table(df).splitlines()
    assert len(lines) == 2 + df.height
    assert lines[0] == "| task \\| name | n |"
    assert lines[2] == '| &lt;b&gt;x&lt;/b&gt; &amp; "q" \\| pipe | 1 |'
    assert lines[3] == "| tab new line | 2 |" and lines[4] == "| plain | 3 |"
    unescaped = [line.replace("\\|", "") for line in lines]
    assert all(line.count("|") == 3 for line in unescaped)  # two cells per row
