"""A timed stand-in for vLLM 0.33.0 (tests only): same public names, module paths, signatures and
behaviours for the parts raylc uses, with an engine core that takes time like a GPU.

Top-level names resolve lazily, as in the real ``vllm/__init__.py:16-73`` (``MODULE_ATTRS`` +
module ``__getattr__``); ``__all__`` as in ``:76-101``. Names the double does not model
(pooling/scoring outputs, ``ModelRegistry``, ``initialize_ray_cluster``, ``PoolingParams``) raise
``AttributeError`` with a clear message.
"""

from .version import __version__, __version_tuple__  # isort:skip

import typing

MODULE_ATTRS = {
    "AsyncEngineArgs": ".engine.arg_utils:AsyncEngineArgs",
    "EngineArgs": ".engine.arg_utils:EngineArgs",
    "AsyncLLMEngine": ".engine.async_llm_engine:AsyncLLMEngine",
    "LLMEngine": ".engine.llm_engine:LLMEngine",
    "LLM": ".entrypoints.llm:LLM",
    "PromptType": ".inputs:PromptType",
    "TextPrompt": ".inputs:TextPrompt",
    "TokensPrompt": ".inputs:TokensPrompt",
    "SamplingParams": ".sampling_params:SamplingParams",
    "CompletionOutput": ".outputs:CompletionOutput",
    "RequestOutput": ".outputs:RequestOutput",
}
_NOT_MODELLED = (
    "ModelRegistry", "initialize_ray_cluster", "PoolingParams", "ClassificationOutput",
    "ClassificationRequestOutput", "EmbeddingOutput", "EmbeddingRequestOutput", "PoolingOutput",
    "PoolingRequestOutput", "ScoringOutput", "ScoringRequestOutput",
)

IS_DOUBLE = True  # lets a test tell the double from the real package

if typing.TYPE_CHECKING:
    # Re-exports (listed in __all__ through MODULE_ATTRS) for type checkers only.
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs  # noqa: F401
    from vllm.engine.async_llm_engine import AsyncLLMEngine  # noqa: F401
    from vllm.engine.llm_engine import LLMEngine  # noqa: F401
    from vllm.entrypoints.llm import LLM  # noqa: F401
    from vllm.inputs import PromptType, TextPrompt, TokensPrompt  # noqa: F401
    from vllm.outputs import CompletionOutput, RequestOutput  # noqa: F401
    from vllm.sampling_params import SamplingParams  # noqa: F401
else:

    def __getattr__(name: str) -> typing.Any:
        from importlib import import_module

        if name in MODULE_ATTRS:
            module_name, attr_name = MODULE_ATTRS[name].split(":")
            module = import_module(module_name, __package__)
            return getattr(module, attr_name)
        if name in _NOT_MODELLED:
            raise AttributeError(f"module {__package__} has no attribute {name} (not modelled by the vLLM double)")
        raise AttributeError(f"module {__package__} has no attribute {name}")


# The real __all__ (vllm/__init__.py:76-101) also lists the names in _NOT_MODELLED; they are left
# out here so that ``from vllm import *`` works.
__all__ = ["__version__", "__version_tuple__", *MODULE_ATTRS]
