"""Tables for people (:mod:`raylc.io.tables`): piped or logged output never cuts a cell."""

import io

import polars as pl
from cli_runner import raylc

from raylc.io.tables import PIPED_WIDTH, console, rich_table

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
