"""Prompt schemas (vLLM 0.33.0 ``inputs/llm.py:64-131,218-226``): TypedDicts, so a
``TokensPrompt(prompt_token_ids=ids)`` is a plain ``dict``."""

from __future__ import annotations

from typing import TypedDict, Union

try:
    from typing import NotRequired
except ImportError:  # Python 3.10
    from typing_extensions import NotRequired


class _PromptOptions(TypedDict):
    cache_salt: NotRequired[str]


class TextPrompt(_PromptOptions):
    """Schema for a text prompt (``inputs/llm.py:104``)."""

    prompt: str


class TokensPrompt(_PromptOptions):
    """Schema for a tokenized prompt (``inputs/llm.py:111``)."""

    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    token_type_ids: NotRequired[list[int]]


SingletonPrompt = Union[str, TextPrompt, TokensPrompt]
PromptType = SingletonPrompt
