"""``RequestStateStats`` as in vLLM 0.33.0 ``v1/metrics/stats.py:258-284``.

``arrival_time`` is a frontend wall-clock time (``time.time()``); ``queued_ts``,
``scheduled_ts``, ``first_token_ts`` and ``last_token_ts`` are engine-core ``time.monotonic()``
timestamps (``v1/engine/__init__.py:185-200``), so only differences between them mean anything.
``first_token_latency`` = frontend time at the first token minus ``arrival_time``
(``stats.py:525-527``). ``queued_ts`` is set by the QUEUED event, ``scheduled_ts`` by the first
SCHEDULED event (``stats.py:572-579``), the token timestamps per new-token batch (``:551-558``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestStateStats:
    """Stats that need to be tracked across delta updates."""

    num_generation_tokens: int = 0
    num_preemptions: int = 0
    arrival_time: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    first_token_latency: float = 0.0
    is_corrupted: bool = False
    is_watermarked: bool = False
    is_watermark_skipped: bool = False
