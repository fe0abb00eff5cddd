"""`raylc longscore` end to end on the paper's Table 5 (RULER scores, base at 4K)."""

import subprocess
import sys
from pathlib import Path

import polars as pl
from cli_runner import raylc

ROOT = Path(__file__).resolve().parents[2]
TABLE5 = ROOT / "tests" / "data" / "longbench100_table5.csv"


def test_longscore_command_reproduces_table5(tmp_path):
    printed = pl.read_csv(TABLE5).filter(pl.col("length").is_not_null())  # drop the printed "avg" rows
    scores = printed.select("model", pl.lit("RULER").alias("task"), "length", "score")
    scores.write_parquet(tmp_path / "scores.parquet")
    out = tmp_path / "out"
    proc = raylc("longscore", tmp_path / "scores.parquet", "--out", out, "--base-lengths", "4096", "--no-ray")
    assert proc.returncode == 0, proc.stderr
    assert "LongScore" in proc.stdout
    per = pl.read_parquet(out / "per_length.parquet").filter(~pl.col("is_base"))
    joined = per.join(printed.filter(pl.col("lc").is_not_null()), on=["model", "length"])
    assert joined.height == printed.filter(pl.col("lc").is_not_null()).height
    assert ((joined["lc"] - joined["lc_right"]).abs() <= 0.1).all()
    for png in ("score_vs_length.png", "longscore_vs_length.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_figures_writes_the_same_tables_and_no_png(tmp_path):
    rows = [("m", "a", 2048, 0.9), ("m", "a", 8192, 0.5), ("n", "a", 2048, 0.8), ("n", "a", 8192, 0.6)]
    pl.DataFrame(rows, schema=["model", "task", "length", "score"], orient="row").write_csv(tmp_path / "s.csv")
    for flag in ("--figures", "--no-figures"):
        proc = raylc("longscore", tmp_path / "s.csv", "--out", tmp_path / flag, "--base-lengths",
                     "2048", "--no-ray", flag)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "--no-figures").iterdir()) == ["per_length.parquet", "summary.parquet"]
    assert {"score_vs_length.png", "longscore_vs_length.png"} <= {p.name for p in (tmp_path / "--figures").iterdir()}
    for name in ("per_length.parquet", "summary.parquet"):
        assert pl.read_parquet(tmp_path / "--figures" / name).equals(pl.read_parquet(tmp_path / "--no-figures" / name))


def test_longscore_bad_input_one_line(tmp_path):
    pl.DataFrame({"model": ["m"], "length": [4096], "score": [1.0]}).write_csv(tmp_path / "s.csv")
    pl.DataFrame({"model": ["m"], "task": ["t"], "length": [None], "score": [1.0]}).write_csv(tmp_path / "n.csv")
    for args in (["/nonexistent/scores.csv"], [str(tmp_path / "s.csv")], [str(tmp_path / "n.csv")]):
        proc = raylc("longscore", *args, "--out", tmp_path / "o", env={"RAY_ADDRESS": None})
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"error: {args[0]}")
    assert not (tmp_path / "o").exists()


def test_python_warnings_print_as_one_line_each(tmp_path):
    """A LongScore warning (an uneven base) is one ``warning:`` line: no category, file or source line
    (the installed command in a process of its own: how Python prints warnings is process state)."""
    rows = [("m", "a", 2048, 0.9), ("m", "a", 8192, 0.5), ("m", "b", 4096, 0.4), ("m", "b", 8192, 0.3)]
    pl.DataFrame(rows, schema=["model", "task", "length", "score"], orient="row").write_csv(tmp_path / "s.csv")
    proc = subprocess.run([sys.executable, "-m", "raylc", "longscore", str(tmp_path / "s.csv"), "--out",
                           str(tmp_path / "o"), "--no-ray"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("warning: ") for line in lines), lines
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr
    assert "Base from [2048] only" in lines[0]
