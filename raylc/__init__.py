"""raylc: distributed long-context LLM evaluation on Ray."""

__version__ = "0.1.0"
