from .engine import TokensInput, tokens_input
from .llm import PromptType, SingletonPrompt, TextPrompt, TokensPrompt

__all__ = ["PromptType", "SingletonPrompt", "TextPrompt", "TokensPrompt", "TokensInput", "tokens_input"]
