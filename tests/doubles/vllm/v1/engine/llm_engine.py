"""Synchronous ``LLMEngine`` of vLLM 0.33.0 (``v1/engine/llm_engine.py``), the engine under ``LLM``.

``add_request`` validates and queues a request and returns its internal id (the external id plus
8 random characters, ``v1/engine/input_processor.py:353-371``; ``llm_engine.py:229-317``);
``step()`` blocks until the engine core reports outputs and returns the ``RequestOutput`` objects
it produced (for ``FINAL_ONLY`` requests only finished ones, ``output_processor.py:364-369``); a
dead engine core makes ``step()`` raise ``EngineDeadError``. The engine core runs in a child
process (see ``async_llm.py``); its pid is ``engine_core.resources.engine_manager.processes[0].pid``.
"""

from __future__ import annotations

import queue
import uuid
import weakref
from typing import Any, Optional

from vllm._double.core import EngineCore, Progress
from vllm._double.frontend import FrontRequest, Processor
from vllm._double.model import DoubleTokenizer, VllmConfig
from vllm.outputs import RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.exceptions import EngineDeadError


class _QueueSink:
    def __init__(self) -> None:
        self.queue: "queue.Queue[list[Progress]]" = queue.Queue()

    def deliver(self, events: list[Progress]) -> None:
        self.queue.put(events)


class LLMEngine:
    """Legacy LLMEngine for backwards compatibility (the V1 one)."""

    def __init__(self, vllm_config: VllmConfig, executor_class: Any = None, log_stats: bool = False,
                 usage_context: UsageContext = UsageContext.ENGINE_CONTEXT, stat_loggers: Any = None,
                 mm_registry: Any = None, use_cached_outputs: bool = False, multiprocess_mode: bool = False) -> None:
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.log_stats = log_stats
        self._tokenizer = DoubleTokenizer(vllm_config.tokenizer_path, vllm_config.model_config.hf_config_dict)
        self.processor = Processor(vllm_config, self._tokenizer, log_stats)
        self._sink = _QueueSink()
        self._reqs: dict[str, FrontRequest] = {}
        self.engine_core = EngineCore(vllm_config)
        self._finalizer = weakref.finalize(self, self.engine_core.shutdown)

    @classmethod
    def from_vllm_config(cls, vllm_config: VllmConfig, usage_context: UsageContext = UsageContext.ENGINE_CONTEXT,
                         stat_loggers: Any = None, disable_log_stats: bool = False) -> "LLMEngine":
        return cls(vllm_config=vllm_config, log_stats=not disable_log_stats, usage_context=usage_context,
                   stat_loggers=stat_loggers)

    @classmethod
    def from_engine_args(cls, engine_args: Any, usage_context: UsageContext = UsageContext.ENGINE_CONTEXT,
                         stat_loggers: Any = None, enable_multiprocessing: bool = False) -> "LLMEngine":
        """Creates an LLM engine from the engine arguments (``llm_engine.py:174-198``)."""
        vllm_config = engine_args.create_engine_config(usage_context)
        return cls(vllm_config=vllm_config, log_stats=not engine_args.disable_log_stats,
                   usage_context=usage_context, stat_loggers=stat_loggers, multiprocess_mode=True)

    @property
    def tokenizer(self) -> DoubleTokenizer:
        return self._tokenizer

    def get_tokenizer(self) -> DoubleTokenizer:
        return self._tokenizer

    def get_num_unfinished_requests(self) -> int:
        return len(self._reqs)

    def has_unfinished_requests(self) -> bool:
        return bool(self._reqs)

    def add_request(self, request_id: str, prompt: Any, params: Any, arrival_time: Optional[float] = None,
                    lora_request: Any = None, tokenization_kwargs: Optional[dict[str, Any]] = None,
                    trace_headers: Any = None, priority: int = 0, session_id: Optional[str] = None,
                    prompt_text: Optional[str] = None, kv_hints: Any = None) -> str:
        if not isinstance(request_id, str):
            raise TypeError(f"request_id must be a string, got {type(request_id)}")
        if lora_request is not None:
            raise NotImplementedError("vLLM double: LoRA is not modelled")
        if self.engine_core.dead or self.engine_core.closed:
            raise EngineDeadError()
        internal = f"{request_id}-{uuid.uuid4().hex[:8]}"
        fr = self.processor.make_request(request_id, internal, prompt, params, arrival_time)
        stream = fr.params.output_kind != RequestOutputKind.FINAL_ONLY
        core_req = self.processor.core_request(fr, self._sink, stream)
        self._reqs[internal] = fr
        try:
            self.engine_core.add(core_req)
        except BaseException:
            self._reqs.pop(internal, None)
            raise
        return internal

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        ids = [rid for rid in request_ids if self._reqs.pop(rid, None) is not None]
        self.engine_core.abort(ids)

    def step(self) -> list[RequestOutput]:
        while True:
            try:
                events = self._sink.queue.get(timeout=0.25)
                break
            except queue.Empty:
                if self.engine_core.dead or self.engine_core.closed:
                    raise EngineDeadError(suppress_context=True) from None
        outputs: list[RequestOutput] = []
        for ev in events:
            fr = self._reqs.get(ev.rid)
            if fr is None:
                continue  # aborted
            if ev.error is not None:
                raise EngineDeadError(suppress_context=True)
            self.processor.update(fr, ev)
            if fr.finished:
                del self._reqs[ev.rid]
            if fr.finished or fr.params.output_kind != RequestOutputKind.FINAL_ONLY:
                outputs.append(self.processor.output(fr))
        return outputs

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return self.engine_core.reset_prefix_cache()
