"""Break each README promise on purpose and check that the fast tests notice (issue 19).

Copies the working tree (raylc/, tests/, jobs/, pyproject.toml) to a scratch folder, checks
that the guarding tests pass there, then applies one break at a time (a text substitution in
one module) and runs `pytest -m "not ray"` on that promise's tests, which must fail. Prints
one line per break; exit 1 if a break goes unnoticed or a substitution no longer applies.

    python tests/benchmarks/break_promises.py [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (name, module, text, replacement, tests): one break of docs/testing.md's promises table
BREAKS = [
    ("DOLCE request ids salted per call", "raylc/dolce/stages.py",
     "digest_size=12).hexdigest() for k in keys]",
     "digest_size=12).hexdigest()[:-4] + __import__('uuid').uuid4().hex[:4] for k in keys]",
     ["tests/test_request_ids.py"]),
    ("DOLCE request ids without the span's start", "raylc/dolce/stages.py",
     'pl.col("C").cast(pl.String), pl.col("start").cast(pl.String)]', 'pl.col("C").cast(pl.String)]',
     ["tests/test_request_ids.py"]),
    ("length-suite request ids salted per call", "raylc/sweep/stages.py",
     'for part in (fp, head, context, tail, str(m), *(("raw",) if raw else ())):',
     'for part in (fp, head, context, tail, str(m), __import__("uuid").uuid4().hex, *(("raw",) if raw else ())):',
     ["tests/test_request_ids.py"]),
    ("Store.open_output writes in place", "raylc/io/store.py",
     'return parent, f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"', "return parent, final",
     ["tests/io/test_store.py"]),
    ("_scrub returns its input", "raylc/backends/openai_http.py",
     'return text.replace(self._key, "***") if self._key else text', "return text",
     ["tests/backends/test_openai_http.py"]),
    ("429 not retried", "raylc/backends/openai_http.py",
     "RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})", "RETRY_STATUS = frozenset({408, 500, 502, 503, 504})",
     ["tests/backends/test_openai_http.py"]),
    ("take_every with stride 2N", "raylc/dolce/sensitivity.py",
     '"every": int(v)}', '"every": 2 * int(v)}',
     ["tests/dolce/test_sensitivity.py"]),
    ("random strategies drop the single C = 0 / C = L spans", "raylc/text/sampling.py",
     "spans = spans.filter(single | (u < p))", "spans = spans.filter(u < p)",
     ["tests/dolce/test_sensitivity.py", "tests/text/test_sampling.py"]),
    ("middle truncation splits an odd count the other way", "raylc/text/truncation.py",
     "first = n // 2", "first = n - n // 2",
     ["tests/text/test_truncation.py"]),
    ("a wrong coefficient in cow_cover_prob", "raylc/dolce/cover.py",
     "ratio = (k_f - 1.0) / (k_f + 1.0)", "ratio = (k_f - 1.0) / (k_f + 2.0)",
     ["tests/dolce/test_cow.py"]),
]


def pytest(copy: Path, tests: list[str]) -> tuple[int, float, str]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider",
                           "-m", "not ray and not slow", *tests], cwd=copy, capture_output=True, text=True,
                          check=False, timeout=1800)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode, time.monotonic() - t0, last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="raylc-breaks-"))
    copy = scratch / "raylc-copy"
    copy.mkdir()
    for part in ("raylc", "tests", "jobs"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    which = subprocess.run([sys.executable, "-c", "import raylc; print(raylc.__file__)"], cwd=copy,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert which.startswith(str(copy)), f"the copy must import its own raylc, not {which}"
    failed = 0
    every = sorted({t for *_, tests in BREAKS for t in tests})
    code, took, last = pytest(copy, every)
    print(f"{'unbroken':58s} {'pass' if code == 0 else 'FAIL'}  {took:6.1f} s  {last}", flush=True)
    failed += code != 0
    for name, module, text, replacement, tests in BREAKS:
        path = copy / module
        original = path.read_text()
        if original.count(text) != 1:
            print(f"{name:58s} SUBSTITUTION NOT FOUND in {module}: {text!r}")
            failed += 1
            continue
        path.write_text(original.replace(text, replacement))
        try:
            code, took, last = pytest(copy, tests)
        finally:
            path.write_text(original)
        caught = code == 1
        failed += not caught
        print(f"{name:58s} {'caught' if caught else 'MISSED'}  {took:6.1f} s  {last}", flush=True)
    if not args.keep:
        shutil.rmtree(scratch)
    print(f"{len(BREAKS)} breaks, {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
