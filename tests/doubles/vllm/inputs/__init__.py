from .llm import PromptType, SingletonPrompt, TextPrompt, TokensPrompt

__all__ = ["PromptType", "SingletonPrompt", "TextPrompt", "TokensPrompt"]
