"""``EngineGenerateError`` / ``EngineDeadError`` as in vLLM 0.33.0 ``v1/engine/exceptions.py:6-28``.

``str(EngineDeadError())`` is ``ENGINE_DEAD_MESSAGE`` (the constructor passes it as the first
argument, ``exceptions.py:25``).
"""

from vllm.exceptions import VLLMServerError


class EngineGenerateError(VLLMServerError):
    """Raised when a AsyncLLM.generate() fails. Recoverable."""


class EngineDeadError(VLLMServerError):
    """Raised when the EngineCore dies. Unrecoverable."""

    ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    CLIENT_MESSAGE = "The server had an error while processing your request."

    def __init__(self, *args, suppress_context: bool = False, **kwargs):
        super().__init__(self.ENGINE_DEAD_MESSAGE, *args, **kwargs)
        self.__suppress_context__ = suppress_context
