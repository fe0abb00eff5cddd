"""Exception hierarchy of vLLM 0.33.0, restated (real: ``vllm/exceptions.py:10-56``).

``VLLMError`` is a plain ``Exception`` (not a ``ValueError``): request validation failures such
as a too-long prompt or ``max_tokens=0`` raise ``VLLMValidationError``, whose ``str()`` appends
``(parameter=..., value=...)`` when those are given (``exceptions.py:50-56``).
"""

from __future__ import annotations

from typing import Any


class VLLMError(Exception):
    """Base of vLLM's own errors (``exceptions.py:10``)."""


class VLLMClientError(VLLMError):
    """Caused by the request (4xx) (``exceptions.py:20``)."""


class VLLMServerError(VLLMError):
    """Caused by the server (5xx) (``exceptions.py:24``)."""


class VLLMValidationError(VLLMClientError):
    """A request failed validation (``exceptions.py:28-56``)."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        base = super().__str__()
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{base} ({', '.join(extras)})" if extras else base


class GenerationError(VLLMServerError):
    """A finish reason meaning an internal error (``exceptions.py:131``)."""

    def __init__(self, message: str = "Internal server error"):
        super().__init__(message)
        self.status_code = 500
