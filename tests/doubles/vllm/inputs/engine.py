"""Engine inputs (vLLM 0.33.0 ``inputs/engine.py:30-64``): the rendered form ``AsyncLLM.generate``
takes without the deprecated raw-prompt path (``v1/engine/input_processor.py:404-428``)."""

from __future__ import annotations

from typing import Literal, Optional, TypedDict

try:
    from typing import NotRequired
except ImportError:  # Python 3.10
    from typing_extensions import NotRequired


class TokensInput(TypedDict):
    """Token-based input to the engine (``inputs/engine.py:30``)."""

    type: Literal["token"]
    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    cache_salt: NotRequired[str]


def tokens_input(prompt_token_ids: list[int], *, prompt: Optional[str] = None,
                 cache_salt: Optional[str] = None) -> TokensInput:
    """``inputs/engine.py:47-64``."""
    inputs = TokensInput(type="token", prompt_token_ids=prompt_token_ids)
    if prompt is not None:
        inputs["prompt"] = prompt
    if cache_salt is not None:
        inputs["cache_salt"] = cache_salt
    return inputs
