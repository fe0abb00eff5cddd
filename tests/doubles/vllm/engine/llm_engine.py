"""``LLMEngine`` is an alias of the V1 ``LLMEngine`` (vLLM 0.33.0 ``engine/llm_engine.py:4-6``)."""

from vllm.v1.engine.llm_engine import LLMEngine as V1LLMEngine

LLMEngine = V1LLMEngine  # type: ignore
