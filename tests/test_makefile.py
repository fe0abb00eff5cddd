"""The Makefile's real-engine targets, read with ``make -n`` (nothing runs): a model folder given
as ``SMOLLM2=DIR`` reaches the real-engine tests and the benchmark (``RAYLC_SMOLLM2``) and the
demo's jobs (``--set``); the default folder leaves the jobs as written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _recipes(tmp_path: Path, *settings: str) -> list[str]:
    out = subprocess.run(["make", "-n", "test-real", "bench-real", "real-demo", f"REAL_VENV={tmp_path}/v", *settings],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.replace("\\\n", " ").splitlines()


def test_a_model_folder_given_to_make_reaches_the_tests_the_benchmark_and_the_jobs(tmp_path):
    model = tmp_path / "elsewhere" / "SmolLM2"
    lines = _recipes(tmp_path, f"SMOLLM2={model}")
    tests = [x for x in lines if "pytest" in x and "tests/real" in x]
    bench = [x for x in lines if "tests/benchmarks/bench_real.py" in x]
    runs = [x for x in lines if " run jobs/real-" in x]
    assert len(tests) == 1 and f"RAYLC_SMOLLM2={model} " in tests[0]
    assert len(bench) == 1 and f"RAYLC_SMOLLM2={model} " in bench[0]
    assert len(runs) == 3 and all(f"--set probe.model={model}" in x for x in runs)
    assert [x for x in runs if "helmet" in x][0].endswith(f"--set suite.tokenizer=hf:{model}")


def test_the_default_model_folder_leaves_the_jobs_as_written(tmp_path):
    lines = _recipes(tmp_path)
    runs = [x.strip() for x in lines if " run jobs/real-" in x]
    assert len(runs) == 3 and not [x for x in runs if "--set" in x]
    assert f"RAYLC_SMOLLM2={ROOT}/.models/SmolLM2-135M-Instruct " in [x for x in lines if "tests/real" in x][0]
