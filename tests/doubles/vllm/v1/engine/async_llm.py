"""``AsyncLLM`` of vLLM 0.33.0 (``v1/engine/async_llm.py``), over the double's timed engine core.

Mirrored behaviour:

* ``from_engine_args`` (``:279-300``) builds the config with ``UsageContext.ENGINE_CONTEXT`` (so
  unset ``max_num_seqs`` / ``max_num_batched_tokens`` default to 128 / 2048,
  ``config/scheduler.py:41,43``) and ``log_stats = not disable_log_stats`` (default False ->
  metrics filled).
* ``add_request`` (``:397-565``): raises ``EngineDeadError`` if ``errored``; renders/validates
  the prompt in a one-thread executor (``process_inputs_async``, ``v1/engine/input_processor.py:
  82-84``; ``renderers/base.py:140-145``); starts the output handler task in the running event
  loop on the first request (``:526,856-946``); the internal request id gets 8 random
  characters (``input_processor.py:353-371``) so callers may reuse ids.
* ``generate`` (``:726-851``) is an async generator of ``RequestOutput`` (CUMULATIVE by default:
  intermediate outputs, then one with ``finished=True``). Validation errors (a
  ``VLLMClientError``) and ``EngineDeadError`` propagate as they are; any other exception becomes
  ``EngineGenerateError`` (``:803-851``). Cancelling the consumer aborts the request.
* Outputs go from the engine thread to the loop thread-safely (``call_soon_threadsafe``) into the
  output handler task, which hands them to per-request collectors that keep only the newest state
  when the consumer lags (``output_processor.py:53-103``).
* The engine core runs in a child process (``vllm/v1/engine/core.py``; the scheduling itself in a
  thread of this process, ``vllm/_double/core.py``). Construction raises vLLM's
  ``RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s):
  {'EngineCore': 1}")`` when it fails to start; the reason is only in what that process printed.
  Its pid: ``engine.engine_core.resources.engine_manager.processes[0].pid``, as in vLLM
  (``engine_core`` is the client there, ``core_client.py:616,686``; ``v1/engine/utils.py:273-288``).
* ``errored`` (``:1384-1386``) is True once the engine core died (its process exited, e.g. killed,
  or ``die_after_requests``), after ``shutdown()`` (which marks the core dead,
  ``core_client.py:524-527``), or once the output handler task is done -- e.g. when the event
  loop that first used the engine has been closed by ``asyncio.run``.
* Deviation: ``shutdown()`` fails in-flight requests with ``EngineDeadError`` instead of leaving
  their consumers waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, Optional

from vllm._double.core import EngineCore, Progress
from vllm._double.frontend import FrontRequest, Processor
from vllm._double.model import DoubleTokenizer, VllmConfig
from vllm.exceptions import GenerationError, VLLMClientError
from vllm.outputs import RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError


class RequestOutputCollector:
    """Per-request hand-off from the output handler to the ``generate`` task; keeps only the
    newest state if the consumer lags (``v1/engine/output_processor.py:53-103``)."""

    def __init__(self, fr: FrontRequest, output_kind: RequestOutputKind, request_id: str):
        self.fr = fr
        self.aggregate = output_kind == RequestOutputKind.DELTA
        self.request_id = request_id
        self._pending: Any = None  # True (new state) or an exception
        self.ready = asyncio.Event()

    def put(self, item: Any) -> None:
        if self._pending is None or isinstance(item, BaseException):
            self._pending = item
        self.ready.set()

    async def get(self) -> None:
        while self._pending is None:
            await self.ready.wait()
        self._take()

    def get_nowait(self) -> bool:
        if self._pending is None:
            return False
        self._take()
        return True

    def _take(self) -> None:
        item, self._pending = self._pending, None
        self.ready.clear()
        if isinstance(item, BaseException):
            raise item

    def close(self) -> None:
        pass


class _LoopSink:
    """Engine thread -> event loop: one ``call_soon_threadsafe`` per engine step."""

    def __init__(self, loop: asyncio.AbstractEventLoop, inbox: "asyncio.Queue[list[Progress]]"):
        self.loop = loop
        self.inbox = inbox

    def deliver(self, events: list[Progress]) -> None:
        self.loop.call_soon_threadsafe(self.inbox.put_nowait, events)


class _LateSink:
    """The sink handed to the core before the output handler exists (bound on first request)."""

    def __init__(self) -> None:
        self.target: Optional[_LoopSink] = None

    def deliver(self, events: list[Progress]) -> None:
        if self.target is not None:
            self.target.deliver(events)


class AsyncLLM:
    """An asynchronous wrapper for the vLLM engine (the double's)."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        executor_class: Any = None,
        log_stats: bool = True,
        usage_context: UsageContext = UsageContext.ENGINE_CONTEXT,
        mm_registry: Any = None,
        log_requests: bool = True,
        start_engine_loop: bool = True,
        stat_loggers: Any = None,
        aggregate_engine_logging: bool = False,
        client_addresses: Optional[dict[str, Any]] = None,
        client_count: int = 1,
        client_index: int = 0,
        profiler: Any = None,
    ) -> None:
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.log_stats = log_stats
        self.log_requests = log_requests
        self._tokenizer = DoubleTokenizer(vllm_config.tokenizer_path, vllm_config.model_config.hf_config_dict)
        self.processor = Processor(vllm_config, self._tokenizer, log_stats)
        self.output_handler: Optional[asyncio.Task] = None
        self._collectors: dict[str, RequestOutputCollector] = {}
        self._sink = _LateSink()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-renderer")
        self.engine_core = EngineCore(vllm_config)

    @classmethod
    def from_vllm_config(cls, vllm_config: VllmConfig, start_engine_loop: bool = True,
                         usage_context: UsageContext = UsageContext.ENGINE_CONTEXT, stat_loggers: Any = None,
                         enable_log_requests: bool = False, aggregate_engine_logging: bool = False,
                         disable_log_stats: bool = False, client_addresses: Optional[dict[str, Any]] = None,
                         client_count: int = 1, client_index: int = 0) -> "AsyncLLM":
        return cls(vllm_config=vllm_config, start_engine_loop=start_engine_loop, stat_loggers=stat_loggers,
                   log_requests=enable_log_requests, log_stats=not disable_log_stats,
                   aggregate_engine_logging=aggregate_engine_logging, usage_context=usage_context,
                   client_addresses=client_addresses, client_count=client_count, client_index=client_index)

    @classmethod
    def from_engine_args(cls, engine_args: Any, start_engine_loop: bool = True,
                         usage_context: UsageContext = UsageContext.ENGINE_CONTEXT,
                         stat_loggers: Any = None) -> "AsyncLLM":
        """Create an AsyncLLM from the EngineArgs."""
        vllm_config = engine_args.create_engine_config(usage_context)
        return cls(vllm_config=vllm_config, log_requests=getattr(engine_args, "enable_log_requests", False),
                   log_stats=not engine_args.disable_log_stats, start_engine_loop=start_engine_loop,
                   usage_context=usage_context, stat_loggers=stat_loggers)

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass

    def shutdown(self, timeout: Optional[float] = None) -> None:
        """Shutdown, cleaning up the background thread (the real one: proc and IPC)."""
        core = getattr(self, "engine_core", None)
        if core is not None:
            core.shutdown(timeout=5.0 if timeout is None else timeout)
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
        handler = getattr(self, "output_handler", None)
        if handler is not None and not handler.done():
            try:
                handler.get_loop().call_soon_threadsafe(handler.cancel)
            except RuntimeError:  # loop closed
                pass

    # ---------------------------------------------------------------- status
    @property
    def is_running(self) -> bool:
        return self.output_handler is None or not self.output_handler.done()

    @property
    def is_stopped(self) -> bool:
        return self.errored

    @property
    def errored(self) -> bool:
        core = self.engine_core
        return core.dead or core.closed or not self.is_running

    @property
    def dead_error(self) -> BaseException:
        return EngineDeadError()

    async def check_health(self) -> None:
        if self.errored:
            raise self.dead_error

    def get_num_unfinished_requests(self) -> int:
        return len(self._collectors)

    @property
    def tokenizer(self) -> DoubleTokenizer:
        return self._tokenizer

    def get_tokenizer(self) -> DoubleTokenizer:
        return self._tokenizer

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return self.engine_core.reset_prefix_cache()

    # ---------------------------------------------------------------- requests
    def _run_output_handler(self) -> None:
        if self.output_handler is not None:
            return
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[list[Progress]] = asyncio.Queue()
        collectors = self._collectors
        processor = self.processor

        async def output_handler() -> None:
            while True:
                events = await inbox.get()
                for ev in events:
                    col = collectors.get(ev.rid)
                    if col is None:
                        continue  # aborted
                    if ev.error is not None:
                        col.put(ev.error)
                    else:
                        processor.update(col.fr, ev)
                        col.put(True)

        self._sink.target = _LoopSink(loop, inbox)
        self.output_handler = loop.create_task(output_handler())

    async def add_request(
        self,
        request_id: str,
        prompt: Any,
        params: SamplingParams,
        arrival_time: Optional[float] = None,
        lora_request: Any = None,
        tokenization_kwargs: Optional[dict[str, Any]] = None,
        trace_headers: Optional[Mapping[str, str]] = None,
        priority: int = 0,
        data_parallel_rank: Optional[int] = None,
        session_id: Optional[str] = None,
        prompt_text: Optional[str] = None,
        reasoning_ended: Optional[bool] = None,
        reasoning_parser_kwargs: Optional[dict[str, Any]] = None,
        kv_hints: Any = None,
    ) -> RequestOutputCollector:
        """Add new request to the AsyncLLM."""
        if self.errored:
            raise EngineDeadError()
        if lora_request is not None:
            raise NotImplementedError("vLLM double: LoRA is not modelled")
        if isinstance(prompt, AsyncGenerator):
            raise NotImplementedError("vLLM double: streaming input is not modelled")
        internal = f"{request_id}-{uuid.uuid4().hex[:8]}"
        loop = asyncio.get_running_loop()
        fr = await loop.run_in_executor(
            self._executor, self.processor.make_request, request_id, internal, prompt, params, arrival_time)
        self._run_output_handler()
        collector = RequestOutputCollector(fr, fr.params.output_kind, internal)
        stream = self.engine_core.settings.stream_outputs and fr.params.output_kind != RequestOutputKind.FINAL_ONLY
        core_req = self.processor.core_request(fr, self._sink, stream)
        self._collectors[internal] = collector
        try:
            self.engine_core.add(core_req)
        except BaseException:
            self._collectors.pop(internal, None)
            raise
        return collector

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        *,
        prompt_text: Optional[str] = None,
        lora_request: Any = None,
        tokenization_kwargs: Optional[dict[str, Any]] = None,
        trace_headers: Optional[Mapping[str, str]] = None,
        priority: int = 0,
        data_parallel_rank: Optional[int] = None,
        session_id: Optional[str] = None,
        kv_hints: Any = None,
        reasoning_ended: Optional[bool] = None,
        reasoning_parser_kwargs: Optional[dict[str, Any]] = None,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Main function: add the request, then yield its ``RequestOutput``s until finished."""
        q: Optional[RequestOutputCollector] = None
        try:
            q = await self.add_request(
                request_id, prompt, sampling_params, lora_request=lora_request,
                tokenization_kwargs=tokenization_kwargs, trace_headers=trace_headers, priority=priority,
                data_parallel_rank=data_parallel_rank, session_id=session_id, kv_hints=kv_hints,
                prompt_text=prompt_text, reasoning_ended=reasoning_ended,
                reasoning_parser_kwargs=reasoning_parser_kwargs)
            finished = False
            while not finished:
                if not q.get_nowait():
                    await q.get()
                out = self.processor.output(q.fr)
                finished = out.finished
                yield out
        except (asyncio.CancelledError, GeneratorExit):
            if q is not None:
                self._abort_now([q.request_id])
            raise
        except EngineDeadError:
            raise
        except (VLLMClientError, GenerationError):
            if q is not None:
                self._abort_now([q.request_id])
            raise
        except Exception as e:
            if q is not None:
                self._abort_now([q.request_id])
            raise EngineGenerateError() from e
        finally:
            if q is not None:
                self._collectors.pop(q.request_id, None)
                q.close()

    def _abort_now(self, internal_ids: list[str]) -> None:
        for rid in internal_ids:
            self._collectors.pop(rid, None)
        self.engine_core.abort(internal_ids)

    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None:
        """Abort request(s) by external id (or internal id when ``internal``)."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        if internal:
            targets = ids
        else:
            wanted = set(ids)
            targets = [rid for rid, col in self._collectors.items() if col.fr.request_id in wanted]
        self._abort_now(targets)
