"""The run layer's errors, each one line for the command line (``raylc/cli.py`` maps them to exit codes)."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run that cannot start or continue; the message is one line: whatever a cause brings in
    (an engine's log line, a Ray traceback's text) has its lines joined by " / "."""

    def __init__(self, message: object = "") -> None:
        super().__init__(" / ".join(ln.strip() for ln in str(message).splitlines() if ln.strip()))


class InferenceFailed(RunError):
    """More requests failed than ``inference.max_error_fraction`` allows, or the pipeline failed
    (exit code 1); finished requests are kept."""


class NothingWritten(RunError):
    """The store failed before the run wrote anything: nothing to resume (exit code 1)."""


class RunInterrupted(Exception):
    """SIGINT or SIGTERM ended the run: a one-line message; ``exit_code`` is 128 + the signal
    (130, 143). The stage in progress is ``interrupted`` in the manifest, the lock released."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class BudgetReached(Exception):
    """The run stopped at its prompt-token cap (``inference.max_prompt_tokens``): a one-line
    message; the stage is ``stopped`` in the manifest, with its :class:`~raylc.run.manifest.Budget`.
    Not an error: ``exit_code`` 3 says "stopped, resumable with a higher cap"."""

    exit_code = 3

    def __init__(self, message: str, budget: object) -> None:
        super().__init__(message)
        self.budget = budget
