"""Settings of the timed engine double, read from ``<model>/double.json`` (optional).

They live in the model folder so that every process that builds an engine from that folder (Ray
actors included) sees the same settings. Unknown keys are an error (typos would otherwise be
silently ignored). Start-up failures (``fail_on_init``, ``kv_cache_tokens``) happen in the engine
core child process, which prints the reason (see ``vllm/v1/engine/core.py``); the caller gets only
vLLM's "Engine core initialization failed. See root cause above. ...". All keys are optional:

    prefill_tokens_per_s   float  200000   prefill speed: uncached prompt tokens per second
    decode_step_s          float  0.001    one decode step for all running sequences
    step_overhead_s        float  0.0      fixed cost of every engine step
    time_scale             float  1.0      multiplies every simulated duration (step and init)
    init_s                 float  0.0      simulated engine start-up time (weights, CUDA graphs),
                                           spent in the engine core process
    max_num_seqs           int    null     used when the engine args leave max_num_seqs None
                                           (instead of vLLM's default for the usage context)
    device_memory_gib      float  80       GPU memory tier for vLLM's batch defaults
    device_name            str    "h100"   (arg_utils.py:2940-3039: >=160 GiB, >=70 GiB non-A100, else)
    prefix_cache_blocks    int    65536    LRU bound of the prefix cache, in 16-token blocks
    kv_cache_tokens        int    null     KV capacity in tokens: requests wait while the running
                                           ones hold it; smaller than max_model_len fails start-up
                                           (vLLM's ValueError "To serve at least one request ...")
    fail_on_init           str    null     the engine core fails to start with this reason: the
                                           exception is "Type: message"'s type when the text has
                                           that form (e.g. "torch.OutOfMemoryError: CUDA out of
                                           memory ..."), else RuntimeError(reason)
    die_after_requests     int    null     the engine core dies once this many requests finished
    stats_dir              str    null     folder for stats-<pid>.json (busy time, tokens, RSS)
    stats_interval_s       float  0.5      how often the stats file is rewritten
    stream_outputs         bool   true     AsyncLLM yields intermediate outputs (CUMULATIVE/DELTA)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from typing import Optional


@dataclass(frozen=True)
class DoubleSettings:
    prefill_tokens_per_s: float = 200_000.0
    decode_step_s: float = 0.001
    step_overhead_s: float = 0.0
    time_scale: float = 1.0
    init_s: float = 0.0
    max_num_seqs: Optional[int] = None
    device_memory_gib: float = 80.0
    device_name: str = "h100"
    prefix_cache_blocks: int = 65536
    kv_cache_tokens: Optional[int] = None
    fail_on_init: Optional[str] = None
    die_after_requests: Optional[int] = None
    stats_dir: Optional[str] = None
    stats_interval_s: float = 0.5
    stream_outputs: bool = True

    def __post_init__(self) -> None:
        if not self.prefill_tokens_per_s > 0:
            raise ValueError(f"double.json: prefill_tokens_per_s must be > 0, got {self.prefill_tokens_per_s}")
        for name in ("decode_step_s", "step_overhead_s", "init_s", "time_scale"):
            if getattr(self, name) < 0:
                raise ValueError(f"double.json: {name} must be >= 0, got {getattr(self, name)}")
        if self.stats_interval_s <= 0:
            raise ValueError("double.json: stats_interval_s must be > 0")
        if self.die_after_requests is not None and self.die_after_requests < 0:
            raise ValueError("double.json: die_after_requests must be >= 0")


FILE_NAME = "double.json"


def load_settings(model_dir: str) -> DoubleSettings:
    path = os.path.join(model_dir, FILE_NAME)
    if not os.path.isfile(path):
        return DoubleSettings()
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    known = {f.name for f in fields(DoubleSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {unknown}; known: {sorted(known)}")
    return DoubleSettings(**raw)
