"""The figures of docs/figures.md against the commands that produced them.

Each row of the figures table names its command: a script of tests/ with flags the script has,
``python -c``, or pytest on a test file. Every command is classified here, in one place:

* ``CHEAP``: it runs in seconds (as documented, or at a smaller size through its own flags, on
  the same code path); the test runs it and, where the figure is deterministic, checks that the
  output reproduces the number the row states (parsed from the row, so a figure edited without
  a re-run fails). Figures that vary with timing or load are not asserted: only that the script
  runs and prints its result lines.
* ``EXPENSIVE``: minutes, Ray, or a machine of its own; the reason is given.
* pytest rows: ``make test`` runs those files already; here the file must exist and its ``-k``
  must select a test.

A row whose command is none of these fails, so a new figure must be classified. Every script of
tests/benchmarks/ must also answer ``--help``. None of these tests starts Ray or times anything.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures.md"
BENCHMARKS = ROOT / "tests" / "benchmarks"
TIMEOUT_S = 600  # CPU-bound commands of 4-12 s idle, at nice 19 beside the Ray tier in `make test`
_SPAN = re.compile(r"(`+)(.+?)\1")


@dataclass(frozen=True)
class Row:
    line: int
    what: str
    figure: str
    command: str

    @property
    def argv(self) -> list[str]:
        """The command's words, without leading ``NAME=value`` environment settings."""
        words = shlex.split(self.command)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            words = words[1:]
        return words

    @property
    def is_pytest(self) -> bool:
        words = self.argv
        return bool(words) and (Path(words[0]).name == "pytest" or words[1:3] == ["-m", "pytest"])

    @property
    def key(self) -> str:
        """What ``CHEAP`` and ``EXPENSIVE`` are keyed by: the script's path, or for ``python -c``
        the last raylc module the code imports."""
        script = re.search(r"\btests/[\w/]+\.py", self.command)
        if script:
            return script.group(0)
        words = self.argv
        if "-c" in words[1:2]:
            modules = re.findall(r"\bfrom (raylc[\w.]*) import", words[2])
            return f"python -c {modules[-1] if modules else words[2]}"
        return self.command


def figure_rows(text: str) -> list[Row]:
    """The rows of the figures table (``| what | figure | command | measured |``); a command cell
    that says ``same`` is the row above's."""
    rows, inside, last = [], False, ""
    for number, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| what | figure | command |"):
            inside = True
        elif inside and not line.startswith("|"):
            break
        elif inside and not set(line) <= set("|- "):
            spans = [m.group(2) for m in _SPAN.finditer(cells[2])]
            last = last if cells[2] in ("same", "the same") else (spans[0] if spans else "")
            rows.append(Row(number, cells[0], cells[1], last))
    return rows


ROWS = figure_rows(FIGURES.read_text(encoding="utf-8"))


# --- the checks of the cheap commands: (figure cells of the rows, stdout) -> assertions ---------

def _prefix_sharing(figure: str, out: str) -> None:
    """The savings of the four plans, in order, and each ``a M / b M`` pair of prefill tokens with
    / without reuse, are the script's (deterministic token counts)."""
    unbounded = [float(m) for m in re.findall(r"unbounded cache\s+[\d,]+\s+saving\s+([\d.]+)%", out)]
    assert unbounded and [float(p) for p in re.findall(r"(\d+\.\d)%", figure)] == unbounded, out
    pairs = {(round(int(w.replace(",", "")) / 1e6, 1), round(int(wo.replace(",", "")) / 1e6, 1)) for wo, w in
             re.findall(r"without reuse\s+([\d,]+)\n\s+with reuse, unbounded cache\s+([\d,]+)", out)}
    stated = {(float(a), float(b)) for a, b in re.findall(r"([\d.]+)M / ([\d.]+)M", figure)}
    assert stated and stated <= pairs, (stated, pairs)
    for units in re.findall(r"\(([\d,]+) units\)", figure):
        assert f"{units} units" in out, units


def _longbench100(figure: str, out: str) -> None:
    """The smallest fill ratio, rounded down to the row's 0.1 %, and no context above its target."""
    smallest, above = out.split()
    stated = re.search(r">= ([\d.]+)% of its target", figure)
    assert stated and math.floor(float(smallest) * 1000) / 10 == float(stated.group(1)), (smallest, figure)
    assert "none above" in figure and int(above) == 0, out


def _context_builder(figure: str, out: str) -> None:
    """Timing ratios vary; the fill does not: one generator per length, so the first n contexts
    are the first n of the documented 100, and their smallest fill is at least the row's."""
    table = (line.split() for line in out.splitlines())
    rows = {int(r[0]): float(r[5]) for r in table if len(r) == 7 and r[0].isdigit()}
    stated = re.findall(r"([\d.]+) at (\d+)K", figure.partition("smallest fill")[2])
    assert stated and len(rows) == 6, out
    for fill, k in stated:
        half_digit = 0.5 * 10 ** -len(fill.split(".")[1])
        assert rows[int(k) * 1024] >= float(fill) - half_digit, (k, rows, fill)


def _cow_fit(figure: str, out: str) -> None:
    """Times vary; that the vectorized fit gives Algorithm 1's lambda and k does not."""
    assert "identical" in figure and "identical lambda, k: True" in out, out
    assert re.search(r"ratio fit / group_by:\s+[\d.]+", out), out


def _units(figure: str, out: str) -> None:
    """Times vary: each split spec the row names prints its line."""
    specs = [m.group(2) for m in _SPAN.finditer(figure)]
    assert specs, figure
    for spec in specs:
        assert re.search(rf"^\s*{re.escape(spec)}\s+\d+\s+[\d.]+", out, re.M), (spec, out)


def _two_in_ranges(stated: str, got: str, figure: str, out: str) -> None:
    """The two figures ``got`` finds in the output lie in the two (min-max) ranges ``stated``
    finds in the row (patterns of 4 and 2 groups)."""
    ranges, values = re.search(stated, figure), re.search(got, out)
    assert ranges and values, (figure, out)
    lo_a, hi_a, lo_b, hi_b = (float(v) for v in ranges.groups())
    a, b = (float(v) for v in values.groups())
    assert lo_a <= a <= hi_a and lo_b <= b <= hi_b, (values.group(0), ranges.group(0))


def _pig_recovery(figure: str, out: str) -> None:
    """Seed 1 of the default ``binned`` likelihood and of Algorithm 2 (``faithful``) lies in the
    row's (min-max) over seeds 1-6."""
    _two_in_ranges(r"`binned` \(the default\) [\d.]+ \(([\d.]+)-([\d.]+)\) / [\d.]+ \(([\d.]+)-([\d.]+)\)",
                   r"model T=5 binned: .* per seed ([\d.]+) / ([\d.]+)", figure, out)
    _two_in_ranges(r"Algorithm 2 \(`pig_likelihood: paper`, T = 5\): category \*\*[\d.]+ \(([\d.]+)-([\d.]+)\)\*\*, "
                   r"Spearman \*\*[\d.]+ \(([\d.]+)-([\d.]+)\)\*\*",
                   r"model T=5 faithful: .* per seed ([\d.]+) / ([\d.]+)", figure, out)


def _calibration_bound(figure: str, out: str) -> None:
    """The first group of "short" (seeds 0-4) lies in the row's (min-max) over its four groups of
    sure and right (the bound is deterministic)."""
    mean_range = r"\*\*[\d.]+ \(([\d.]+)-([\d.]+)\)\*\*"
    _two_in_ranges(rf'"short"\*\*: sure {mean_range}, right {mean_range}',
                   r"short seeds 0-4: .*confidence >= 0\.9: ([\d.]+) of problems, ([\d.]+) right", figure, out)


def _take_every(figure: str, out: str) -> None:
    """rho depends on the suite's size: the script's own target (exit 1 when missed) and its lines."""
    assert "take-every-5: rho(lambda)" in out and "target >= 0.9 met" in out, out
    assert "sample_rate" in out, out


@dataclass(frozen=True)
class Cheap:
    #: the arguments after the script (for ``python -c`` rows: None, the row's own code runs)
    args: Optional[tuple[str, ...]]
    check: Callable[[str, str], None]


CHEAP: dict[str, Cheap] = {
    "tests/benchmarks/bench_prefix_sharing.py": Cheap((), _prefix_sharing),
    "python -c raylc.suites.longbench100": Cheap(None, _longbench100),
    "tests/benchmarks/bench_context_builder.py": Cheap(("3",), _context_builder),
    "tests/benchmarks/bench_cow_fit.py": Cheap(("--problems", "100", "--obs", "100", "--ref-problems", "2",
                                                "--repeat", "1"), _cow_fit),
    "tests/benchmarks/bench_units.py": Cheap(("--sizes", "32768,65536"), _units),
    "tests/benchmarks/calibration_bound.py": Cheap(("--groups", "1", "--generators", "short"), _calibration_bound),
    "tests/benchmarks/pig_recovery_over_seeds.py": Cheap(("--seeds", "1", "--steps", "5", "--designs", "model",
                                                          "--fits", "binned,faithful"), _pig_recovery),
    "tests/benchmarks/take_every_vs_enumerate.py": Cheap(("--problems", "10", "--every", "5", "--strategies",
                                                          "sample_rate"), _take_every),
}

EXPENSIVE: dict[str, str] = {
    "tests/benchmarks/recovery_over_seeds.py": "a `raylc run` of the quickstart per seed in local Ray, 21-51 s each",
    "tests/benchmarks/share_coverage.py": "11-19 s per seed at the fixed 100 problems per task, `--runs` starts Ray; "
                                          "tests/dolce/test_shares.py guards seeds 0-1",
    "tests/benchmarks/calibration.py": "minutes for the groups of seeds, over a minute for --cost-only (1,000 x 1,000 "
                                       "observations); tests/dolce/test_uncertainty.py asserts bounded cases",
    "tests/benchmarks/bench_engine_pipeline.py": "Ray and the timed vLLM double; --quick is a one-minute run",
    "tests/benchmarks/bench_infer.py": "Ray Data actor pools and whole `raylc run`s of up to 1M requests",
    "tests/benchmarks/break_promises.py": "runs the promises' tests in a scratch copy per break (minutes)",
}


def _env() -> dict[str, str]:
    """This environment without the xdist worker's variables, with the checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_every_figure_row_names_its_script_and_flags():
    """Each figure of docs/figures.md's table names the command that produced it: a script of
    tests/ (or ``python -c``, or pytest on a test file) with flags the script has."""
    assert len(ROWS) >= 20
    bad = []
    for row in ROWS:
        script = re.search(r"\btests/[\w/]+\.py", row.command)
        if not (script or re.search(r"\bpython -c\b", row.command)):
            bad.append(f"docs/figures.md:{row.line}: {row.what[:40]}: no script in {row.command!r}")
            continue
        if script and not row.is_pytest:
            source = (ROOT / script.group(0)).read_text(encoding="utf-8")
            bad += [f"docs/figures.md:{row.line}: {flag} is not a flag of {script.group(0)}"
                    for flag in re.findall(r"(?<!\S)--[\w-]+", row.command) if f'"{flag}"' not in source]
    assert not bad, "\n".join(bad)


def test_every_figure_command_is_classified():
    """Each row's command is cheap, expensive (with a reason) or pytest, and each entry of
    ``CHEAP`` and ``EXPENSIVE`` is some row's."""
    keys = {row.key for row in ROWS if not row.is_pytest}
    unclassified = [f"docs/figures.md:{row.line}: {row.key}" for row in ROWS
                    if not row.is_pytest and row.key not in CHEAP and row.key not in EXPENSIVE]
    assert not unclassified, "classify in CHEAP or EXPENSIVE:\n" + "\n".join(unclassified)
    assert not set(CHEAP) & set(EXPENSIVE)
    assert set(CHEAP) | set(EXPENSIVE) <= keys, (set(CHEAP) | set(EXPENSIVE)) - keys
    assert all(EXPENSIVE.values())


@pytest.mark.parametrize("key", sorted(CHEAP))
def test_cheap_figure_command_reproduces_its_row(key):
    rows = [row for row in ROWS if row.key == key]
    assert rows, f"no row of docs/figures.md runs {key}"
    cheap = CHEAP[key]
    argv = rows[0].argv[1:] if cheap.args is None else [key, *cheap.args]
    out = _run(argv)
    assert out.returncode == 0, f"{key}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    cheap.check(" ".join(row.figure for row in rows), out.stdout)


def test_pytest_figure_rows_select_tests():
    """Each pytest row's test file exists and its ``-k`` (if any) selects at least one test of it."""
    by_k: dict[Optional[str], list[str]] = {}
    for row in (r for r in ROWS if r.is_pytest):
        words = row.argv
        files = [w.split("::")[0] for w in words if w.split("::")[0].endswith(".py")]
        assert files, f"docs/figures.md:{row.line}: no test file in {row.command!r}"
        assert all((ROOT / f).is_file() for f in files), f"docs/figures.md:{row.line}: {files}"
        k = words[words.index("-k") + 1] if "-k" in words else None
        by_k.setdefault(k, []).extend(files)
    assert by_k
    for k, files in by_k.items():
        out = _run(["-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                    *(["-k", k] if k else []), *sorted(set(files))])
        assert out.returncode == 0, f"-k {k} {files}: exit {out.returncode}\n{out.stdout[-2000:]}"
        for f in files:
            assert re.search(rf"^{re.escape(f)}::", out.stdout, re.M), f"-k {k!r} selects no test of {f}"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_script_answers_help(script):
    """Every benchmark script parses its arguments (argparse) before any work: ``--help`` exits 0."""
    out = _run([str(BENCHMARKS / script), "--help"])
    assert out.returncode == 0, f"{script} --help: exit {out.returncode}\n{out.stderr[-2000:]}"
    assert out.stdout.startswith("usage:"), out.stdout[:500]
