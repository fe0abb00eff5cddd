"""``raylc ...`` run inside the test process, with the result shaped like ``subprocess.run``'s.

A new interpreter costs 1-5 s of imports per call (polars, pyarrow, scipy, matplotlib), which
dominated the fast suite; in-process the command is the same code (typer's ``CliRunner`` on
``raylc.cli.app``) with the same exit code, stdout, stderr and files. An exception that escapes
the CLI becomes exit code 1 with its traceback on stderr, as the interpreter would print it, so
tests that refuse tracebacks still see one. Tests that check what a process imports, its signals,
its time limits or Ray's console keep real subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from typer.testing import CliRunner


def raylc(*args: object, env: Optional[Mapping[str, Optional[str]]] = None, cwd: Optional[str | Path] = None,
          input: Optional[str] = None) -> subprocess.CompletedProcess:
    """``raylc *args`` in this process: ``env`` holds variables to set (``None`` unsets one) for
    the call only; ``cwd`` is the working directory during the call. The environment, the
    working directory and ``warnings.showwarning`` (which the CLI sets) are restored after."""
    from raylc.cli import app

    argv = [str(a) for a in args]
    saved_env, saved_cwd, saved_show = dict(os.environ), os.getcwd(), warnings.showwarning
    try:
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(app, argv, env=dict(env or {}), input=input, prog_name="raylc")
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        warnings.showwarning = saved_show
    stderr, code = result.stderr, result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        stderr += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        code = 1
    return subprocess.CompletedProcess(["raylc", *argv], code, result.stdout, stderr)
