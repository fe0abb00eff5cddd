"""The timed engine core: a background thread that runs scheduler steps the way vLLM 0.33.0's V1
engine core does, and sleeps as long as a GPU would take for each step.

Scheduling (restating ``v1/core/sched/scheduler.py``, no code copied):

* Running requests first (FCFS): one still prefilling gets ``min(remaining prompt, budget)``
  tokens (chunked prefill), one decoding gets 1 token. Then waiting requests (FCFS) while fewer
  than ``max_num_seqs`` run and budget is left; without chunked prefill a waiting request whose
  uncached prompt does not fit the budget waits (and blocks those behind it). The per-step token
  budget is ``max_num_batched_tokens``.
* Prefix cache: prompt blocks of ``block_size`` (16) tokens keyed by a hash chained over the
  prefix. A request's hit is looked up when it is first scheduled: the longest run of cached
  leading blocks among the first ``(prompt_len - 1) // block_size`` blocks -- the last prompt
  token is always recomputed, so a fully cached prompt still recomputes its whole last block
  (``v1/core/kv_cache_manager.py:295-307``; ``single_type_kv_cache_manager.py:794-800``). Blocks
  are entered into the cache when they are scheduled, not when the step ends
  (``kv_cache_manager.py:615-625``). ``num_cached_tokens`` is that hit
  (``v1/core/sched/scheduler.py:1251-1257``; ``v1/metrics/stats.py:327-346``). LRU-bounded by
  ``prefix_cache_blocks``; blocks in use are not protected (the double has no block pool).
* A request's first output token comes from the step that finishes its prefill; each later step
  adds one. It finishes after its planned number of tokens (planned by the frontend: EOS, stop
  strings, ``max_tokens``, ``max_model_len`` -- see ``_double/frontend.py``).
* Optional ``kv_cache_tokens``: a waiting request is admitted only if the running requests'
  tokens (prompt + generated) plus its prompt + 1 fit; there is no preemption.

Step time = (prefill tokens scheduled) / prefill_tokens_per_s + decode_step_s (if any request
decodes) + step_overhead_s, times time_scale. "Busy" time is wall time during which at least one
request is waiting or running in the core.

The engine core process: as in vLLM, building an engine starts an engine core child process
("EngineCore", ``vllm/v1/engine/core.py``, started by ``vllm/v1/engine/utils.py``'s
``CoreEngineProcManager``), which does the start-up work (``init_s``) and checks (``fail_on_init``,
``kv_cache_tokens`` < ``max_model_len``) and, when they fail, prints vLLM's log lines and traceback
and exits with code 1; the frontend then raises vLLM's ``RuntimeError("Engine core initialization
failed. See root cause above. Failed core proc(s): {'EngineCore': 1}")``. The scheduling below runs
in a thread of the frontend process, but the engine lives only as long as that process: if it exits
(e.g. SIGKILL) the engine is dead (``EngineDeadError``, ``errored``); when the engine dies
(``die_after_requests``) the process logs "EngineCore encountered a fatal error." and exits with
code 1; ``shutdown()`` stops it quietly. Its pid:
``engine_core.resources.engine_manager.processes[0].pid`` (the real attribute path), or
``engine_core.core_pid``.

Timestamps: ``queued_ts`` at add, ``scheduled_ts`` at first scheduling, ``first_token_ts`` /
``last_token_ts`` at the end of the step that produced the token -- all ``time.monotonic()`` as
in the real engine core (``v1/engine/__init__.py:185-200,280-297``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import resource
import sys
import threading
import time
from collections import OrderedDict, deque
from typing import Any, Optional

from vllm.v1.engine.core_client import BackgroundResources
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.engine.utils import CoreEngineProcManager, wait_for_engine_startup

from .model import VllmConfig

logger = logging.getLogger("vllm.v1.engine.core")
client_logger = logging.getLogger("vllm.v1.engine.core_client")

WAITING, RUNNING, FINISHED, ABORTED = range(4)
_engine_counter = itertools.count()


def block_hashes(ids: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``ids`` (a block's key depends on the whole prefix)."""
    out = []
    h = 0x9E3779B97F4A7C15
    for start in range(0, len(ids) - block_size + 1, block_size):
        h = hash((h, tuple(ids[start:start + block_size])))
        out.append(h)
    return out


class Progress:
    """What the core reports for one request after a step (a snapshot, or an error)."""

    __slots__ = ("rid", "generated", "finished", "num_cached", "queued_ts", "scheduled_ts",
                 "first_token_ts", "last_token_ts", "error", "timestamp")

    def __init__(self, req: "CoreRequest", finished: bool, error: Optional[BaseException] = None):
        self.rid = req.rid
        self.generated = req.generated
        self.finished = finished
        self.num_cached = req.num_cached
        self.queued_ts = req.queued_ts
        self.scheduled_ts = req.scheduled_ts
        self.first_token_ts = req.first_token_ts
        self.last_token_ts = req.last_token_ts
        self.error = error
        self.timestamp = time.monotonic()


class CoreRequest:
    __slots__ = ("rid", "prompt_len", "hashes", "target_len", "sink", "stream", "status", "computed",
                 "num_cached", "generated", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts",
                 "blocks_inserted")

    def __init__(self, rid: str, prompt_len: int, hashes: list[int], target_len: int, sink: Any, stream: bool):
        self.rid = rid
        self.prompt_len = prompt_len
        self.hashes = hashes
        self.target_len = max(1, int(target_len))
        self.sink = sink
        self.stream = stream
        self.status = WAITING
        self.computed = 0
        self.num_cached = 0
        self.generated = 0
        self.queued_ts = 0.0
        self.scheduled_ts = 0.0
        self.first_token_ts = 0.0
        self.last_token_ts = 0.0
        self.blocks_inserted = 0


class EngineCore:
    """One simulated engine core (one "GPU" engine); thread-safe."""

    def __init__(self, vcfg: VllmConfig):
        s = vcfg.double
        self.settings = s
        self.index = next(_engine_counter)
        self.model = vcfg.model_config.model
        self.block_size = vcfg.cache_config.block_size
        self.prefix_caching = vcfg.cache_config.enable_prefix_caching
        self.max_num_seqs = vcfg.scheduler_config.max_num_seqs
        self.budget = vcfg.scheduler_config.max_num_batched_tokens
        self.chunked = vcfg.scheduler_config.enable_chunked_prefill
        self.max_model_len = vcfg.model_config.max_model_len
        self.scale = s.time_scale

        # --- start-up: the engine core process (vllm/v1/engine/core.py) sleeps init_s, runs the
        # start-up checks and reports ready, or prints why it failed and exits; then
        # wait_for_engine_startup raises vLLM's "Engine core initialization failed" RuntimeError
        self.resources = BackgroundResources()
        self.resources.engine_manager = CoreEngineProcManager(vcfg)
        try:
            wait_for_engine_startup(self.resources.engine_manager)
        except BaseException:
            self.resources()
            raise

        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._waiting: deque[CoreRequest] = deque()
        self._running: list[CoreRequest] = []
        self._by_id: dict[str, CoreRequest] = {}
        self._cache: OrderedDict[int, None] = OrderedDict()
        self.dead = False
        self.closed = False
        self.death_reason: Optional[str] = None
        self._kv_used = 0

        # counters for the stats file
        self._busy_s = 0.0
        self._busy_since: Optional[float] = None
        self.first_request_t: Optional[float] = None
        self.last_finish_t: Optional[float] = None
        self.finished_count = 0
        self.aborted_count = 0
        self.added_count = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.prefill_tokens_computed = 0
        self.steps = 0
        self.max_running = 0
        self.started_t = time.time()

        self._stats_path = None
        try:
            if s.stats_dir:
                os.makedirs(s.stats_dir, exist_ok=True)
                suffix = "" if self.index == 0 else f"-{self.index}"
                self._stats_path = os.path.join(s.stats_dir, f"stats-{os.getpid()}{suffix}.json")
                self.write_stats()
        except BaseException:
            self.resources()
            raise
        if s.stats_dir:
            self._stats_thread = threading.Thread(target=self._stats_loop, name="EngineCoreStats", daemon=True)
            self._stats_thread.start()

        self._thread = threading.Thread(target=self._loop, name=f"EngineCore-{self.index}", daemon=True)
        self._thread.start()
        # the client's monitor of the core process (core_client.py, start_engine_core_monitor): when
        # the process exits, the engine is dead
        for proc in self.resources.engine_manager.processes:
            proc.monitored = True
        threading.Thread(target=self._monitor_engine_core, name="MPClientEngineMonitor", daemon=True).start()

    # ------------------------------------------------------------------ client side
    def add(self, req: CoreRequest) -> None:
        with self._cond:
            if self.dead or self.closed:
                raise EngineDeadError()
            now = time.monotonic()
            req.queued_ts = now
            if self.first_request_t is None:
                self.first_request_t = time.time()
            self._waiting.append(req)
            self._by_id[req.rid] = req
            self.added_count += 1
            self._busy_update(now)
            self._cond.notify()

    def abort(self, rids: list[str]) -> None:
        with self._cond:
            for rid in rids:
                req = self._by_id.pop(rid, None)
                if req is None:
                    continue
                if req.status == WAITING:
                    try:
                        self._waiting.remove(req)
                    except ValueError:
                        pass
                elif req.status == RUNNING:
                    self._running.remove(req)
                    self._kv_used -= req.prompt_len + req.generated
                req.status = ABORTED
                self.aborted_count += 1
            self._busy_update(time.monotonic())

    def num_unfinished(self) -> int:
        with self._cond:
            return len(self._waiting) + len(self._running)

    def reset_prefix_cache(self) -> bool:
        with self._cond:
            self._cache.clear()
            return True

    def shutdown(self, timeout: Optional[float] = 5.0) -> None:
        """Stop the engine thread and the engine core process (quietly: end of file on its control
        pipe; SIGKILL if it has not exited after ``timeout``)."""
        with self._cond:
            if self.closed:
                return
            self.closed = True
            pending = self._drain_locked()
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self.resources(timeout)
        self._fail(pending)
        self.write_stats()

    @property
    def core_pid(self) -> Optional[int]:
        """Pid of the engine core process (also ``resources.engine_manager.processes[0].pid``)."""
        manager = self.resources.engine_manager
        return manager.processes[0].pid if manager is not None and manager.processes else None

    # ------------------------------------------------------------------ engine thread
    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._should_die():
                        break
                    while not self.closed and not self.dead and not (self._waiting or self._running):
                        self._cond.wait()
                        if self._should_die():
                            break
                    if self.closed or self.dead or self._should_die():
                        break
                    plan, prefill_tokens, any_decode = self._schedule()
                if not plan:  # nothing schedulable (cannot happen with valid configs); do not spin
                    self._stop.wait(0.001)
                    continue
                s = self.settings
                duration = (prefill_tokens / s.prefill_tokens_per_s + (s.decode_step_s if any_decode else 0.0)
                            + s.step_overhead_s) * self.scale
                if duration > 0 and self._stop.wait(duration):
                    return  # shut down mid-step
                with self._cond:
                    if self.closed:
                        return
                    deliveries = self._apply(plan)
                self._deliver(deliveries)
        except BaseException as exc:  # a bug in the double: die like a crashed engine core
            logger.exception("vLLM double: the engine thread failed")
            self._die(f"{type(exc).__name__}: {exc}")
            return
        if self._should_die():
            self._die(f"die_after_requests={self.settings.die_after_requests} reached")

    def _monitor_engine_core(self) -> None:
        """The engine core process exited (killed, or ended by ``_die`` or ``shutdown``): unless
        the engine is already dead or shut down, it is dead now (``core_client.py:800-823``)."""
        manager = self.resources.engine_manager
        manager.monitor_engine_liveness()
        if self.dead or self.closed:
            return
        proc = manager.processes[0]
        client_logger.warning("[shutdown] MPClient: engine core exited unexpectedly; starting cleanup")
        self._die(f"engine core process {proc.name} (pid {proc.pid}) exited with code {proc.exitcode}",
                  tell_core=False)

    def _should_die(self) -> bool:
        n = self.settings.die_after_requests
        return n is not None and not self.dead and not self.closed and self.finished_count >= n

    def _die(self, reason: str, tell_core: bool = True) -> None:
        """The engine is dead: fail every request; the engine core process (unless it is the one
        that went away) logs "EngineCore encountered a fatal error." with a traceback ending in
        ``RuntimeError: vLLM double: <reason>`` and exits with code 1, as a crashed core does."""
        with self._cond:
            if self.dead or self.closed:
                return
            self.dead = True
            self.death_reason = reason
            pending = self._drain_locked()
        self.resources.engine_dead = True
        if tell_core:
            for proc in self.resources.engine_manager.processes:
                proc.send("die " + " / ".join(reason.splitlines()))
        self._fail(pending)
        self.write_stats()

    def _drain_locked(self) -> list[CoreRequest]:
        """Take every waiting and running request out of the engine (the lock is held)."""
        pending = list(self._waiting) + list(self._running)
        self._waiting.clear()
        self._running.clear()
        self._by_id.clear()
        self._busy_update(time.monotonic())
        self._cond.notify_all()
        return pending

    def _fail(self, reqs: list[CoreRequest]) -> None:
        by_sink: dict[Any, list[Progress]] = {}
        for req in reqs:
            by_sink.setdefault(req.sink, []).append(Progress(req, True, EngineDeadError()))
        self._deliver(by_sink)

    def _lookup(self, req: CoreRequest) -> int:
        if not self.prefix_caching or not req.hashes:
            return 0
        n_max = (req.prompt_len - 1) // self.block_size  # the last prompt token is always recomputed
        hits = 0
        cache = self._cache
        for h in itertools.islice(req.hashes, n_max):
            if h not in cache:
                break
            hits += 1
        return hits * self.block_size

    def _insert_blocks(self, req: CoreRequest, upto_tokens: int) -> None:
        if not self.prefix_caching:
            return
        full = min(upto_tokens, req.prompt_len) // self.block_size
        cache = self._cache
        for i in range(req.blocks_inserted, min(full, len(req.hashes))):
            h = req.hashes[i]
            cache[h] = None
            cache.move_to_end(h)
        req.blocks_inserted = max(req.blocks_inserted, full)
        cap = self.settings.prefix_cache_blocks
        while len(cache) > cap:
            cache.popitem(last=False)

    def _schedule(self) -> tuple[list[tuple[CoreRequest, int]], int, bool]:
        now = time.monotonic()
        budget = self.budget
        plan: list[tuple[CoreRequest, int]] = []
        prefill_tokens = 0
        any_decode = False
        for req in self._running:
            if budget <= 0:
                break
            remaining = req.prompt_len - req.computed
            if remaining > 0:
                n = min(remaining, budget)
                prefill_tokens += n
                self._insert_blocks(req, req.computed + n)
            else:
                n = 1
                any_decode = True
            plan.append((req, n))
            budget -= n
        kv_cap = self.settings.kv_cache_tokens
        while self._waiting and len(self._running) < self.max_num_seqs and budget > 0:
            req = self._waiting[0]
            hit = self._lookup(req)
            remaining = req.prompt_len - hit
            if not self.chunked and remaining > budget:
                break
            if kv_cap is not None and self._kv_used + req.prompt_len + 1 > kv_cap:
                break
            self._waiting.popleft()
            for h in itertools.islice(req.hashes, hit // self.block_size):  # touch (LRU)
                self._cache.move_to_end(h)
            req.status = RUNNING
            req.num_cached = hit
            req.computed = hit
            req.blocks_inserted = hit // self.block_size
            req.scheduled_ts = now
            self._running.append(req)
            self._kv_used += req.prompt_len
            n = min(remaining, budget)
            self._insert_blocks(req, hit + n)
            plan.append((req, n))
            prefill_tokens += n
            budget -= n
        self.max_running = max(self.max_running, len(self._running))
        return plan, prefill_tokens, any_decode

    def _apply(self, plan: list[tuple[CoreRequest, int]]) -> dict[Any, list[Progress]]:
        now = time.monotonic()
        self.steps += 1
        out: dict[Any, list[Progress]] = {}
        done: list[CoreRequest] = []
        die_after = self.settings.die_after_requests
        can_finish = None if die_after is None else die_after - self.finished_count
        for req, n in plan:
            if req.status != RUNNING:
                continue  # aborted during the step
            if req.computed < req.prompt_len:
                req.computed += n
                self.prefill_tokens_computed += n
                if req.computed < req.prompt_len:
                    continue  # partial prefill: no output
                req.generated = 1
                req.first_token_ts = now
            else:
                req.generated += 1
            req.last_token_ts = now
            self._kv_used += 1
            self.generated_tokens += 1
            finished = req.generated >= req.target_len
            if finished and can_finish is not None and len(done) >= can_finish:
                # the core dies right after its N-th request: this one is still in flight
                finished = False
            if finished:
                req.status = FINISHED
                done.append(req)
            if finished or req.stream:
                out.setdefault(req.sink, []).append(Progress(req, finished))
        if done:
            wall = time.time()
            gone = set(map(id, done))
            self._running = [r for r in self._running if id(r) not in gone]
            for req in done:
                self._by_id.pop(req.rid, None)
                self._kv_used -= req.prompt_len + req.generated
                self.finished_count += 1
                self.prompt_tokens += req.prompt_len
                self.cached_tokens += req.num_cached
            self.last_finish_t = wall
            self._busy_update(now)
        return out

    @staticmethod
    def _deliver(by_sink: dict[Any, list[Progress]]) -> None:
        for sink, events in by_sink.items():
            try:
                sink.deliver(events)
            except Exception:  # a consumer that went away (closed event loop): nothing to tell
                logger.debug("vLLM double: output sink failed", exc_info=True)

    def _busy_update(self, now: float) -> None:
        active = bool(self._waiting or self._running)
        if active and self._busy_since is None:
            self._busy_since = now
        elif not active and self._busy_since is not None:
            self._busy_s += now - self._busy_since
            self._busy_since = None

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, Any]:
        with self._cond:
            now = time.monotonic()
            busy = self._busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)
            state = "dead" if self.dead else "shutdown" if self.closed else "running"
            d = {
                "pid": os.getpid(), "core_pid": self.core_pid, "engine_index": self.index, "model": self.model,
                "state": state,
                "death_reason": self.death_reason,
                "busy_s": busy, "first_request_t": self.first_request_t, "last_finish_t": self.last_finish_t,
                "started_t": self.started_t, "updated_t": time.time(),
                "requests": self.finished_count, "added": self.added_count, "aborted": self.aborted_count,
                "waiting": len(self._waiting), "running": len(self._running), "max_running": self.max_running,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "generated_tokens": self.generated_tokens, "prefill_tokens_computed": self.prefill_tokens_computed,
                "steps": self.steps, "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.budget,
            }
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        d["peak_rss_bytes"] = int(rss if sys.platform == "darwin" else rss * 1024)
        return d

    def write_stats(self) -> None:
        if not self._stats_path:
            return
        tmp = f"{self._stats_path}.tmp{threading.get_ident()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.stats(), f)
            os.replace(tmp, self._stats_path)
        except OSError:
            logger.debug("vLLM double: could not write %s", self._stats_path, exc_info=True)

    def _stats_loop(self) -> None:
        interval = self.settings.stats_interval_s
        while not self._stop.wait(interval):
            self.write_stats()
            if self.dead:
                return
