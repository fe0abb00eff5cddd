"""Real-engine tests: vLLM's CPU build and SmolLM2-135M-Instruct (``make test-real``).

They run only with ``RAYLC_REAL=1`` (set by ``make test-real``), in the venv of
``cluster/cpu/install.sh``, with the model folder of ``cluster/cpu/build_smollm2.py``
(``RAYLC_SMOLLM2``, default ``.models/SmolLM2-135M-Instruct``). There a missing engine or model
fails the session instead of skipping it: a real-engine run that tests nothing must not pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("RAYLC_SMOLLM2", ROOT / ".models" / "SmolLM2-135M-Instruct")).resolve()
DOLCE_JOB = ROOT / "jobs" / "real-dolce-smollm2.yaml"
HELMET_JOB = ROOT / "jobs" / "real-helmet-smollm2.yaml"
#: every raylc run here: the model folder wherever it is, in float32 (in bf16 the CPU build's greedy
#: output changes with the batch's makeup: a resumed run, whose batches differ, would not compare equal)
COMMON = (f"probe.model={MODEL}", f"probe.tokenizer=hf:{MODEL}", "probe.dtype=float32")


@pytest.fixture(scope="session", autouse=True)
def real_engine():
    """The session's precondition: the real vLLM (not the double) and the model folder."""
    import vllm

    assert not getattr(vllm, "IS_DOUBLE", False), "tests/real must run against the real vLLM, not the double"
    assert (MODEL / "config.json").is_file(), f"no model folder at {MODEL}: make install-real builds it"
    return vllm


def env() -> dict[str, str]:
    """The environment of a ``raylc`` subprocess: a local Ray of its own."""
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}


def raylc(*args: object, timeout: float = 900, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``raylc`` of this venv in a subprocess (its own Ray), output captured."""
    return subprocess.run([sys.executable, "-m", "raylc", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env(), cwd=cwd)


def sets(*settings: str) -> list[str]:
    return [a for s in (*COMMON, *settings) for a in ("--set", s)]


def infer_table(run: Path) -> pl.DataFrame:
    """The run's completions, one row per request id, in request id order."""
    return (pl.read_parquet(run / "infer" / "**" / "*.parquet", hive_partitioning=True)
            .sort("request_id").unique("request_id", keep="last", maintain_order=True))


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    console = proc.stdout + proc.stderr
    assert "Traceback" not in console, console[-4000:]
    assert " ERROR " not in console, [ln for ln in console.splitlines() if " ERROR " in ln][:5]
