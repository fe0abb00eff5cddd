"""``AsyncLLMEngine`` is an alias of V1 ``AsyncLLM`` (vLLM 0.33.0 ``engine/async_llm_engine.py:4-6``)."""

from vllm.v1.engine.async_llm import AsyncLLM

AsyncLLMEngine = AsyncLLM  # type: ignore
