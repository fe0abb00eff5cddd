"""Finish reasons of vLLM 0.33.0 (``v1/engine/__init__.py:37,48-67``): ``str(FinishReason.X)``
is the string that appears as ``CompletionOutput.finish_reason``."""

import enum

FINISH_REASON_STRINGS = ("stop", "length", "abort", "error", "repetition")


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4

    def __str__(self):
        return FINISH_REASON_STRINGS[self.value]
