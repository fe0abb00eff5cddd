"""Frontend work shared by ``LLM`` and ``AsyncLLM``: prompt rendering and validation, the planned
completion, and ``RequestOutput`` construction.

Validation, in the real order:

1. Rendering (``renderers/base.py:711-739``): a text prompt is tokenized with
   ``add_special_tokens=True``; then ``TokenizeParams._token_len_check`` with
   ``max_total_tokens = max_model_len`` (``renderers/base.py:513-525``,
   ``renderers/params.py:224-236,531-553``) rejects a prompt LONGER than ``max_model_len``:
   ``VLLMValidationError("This model's maximum context length is N tokens. However, your prompt
   contains M input tokens, which exceeds this limit even without any output tokens. Please
   reduce the length of the input prompt.", parameter="input_tokens", value=M)`` ("at least M"
   when M == N + 1).
2. ``InputProcessor._validate_prompt_len`` (``v1/engine/input_processor.py:557-602``): an empty
   prompt, and a prompt EQUAL to ``max_model_len`` (no room for one output token) are refused.
3. Token ids outside ``[0, max(tokenizer.max_token_id, vocab_size - 1)]`` are refused
   (``renderers/base.py:453-490``).
4. ``max_tokens=None`` becomes ``max_model_len - prompt_len`` (``input_processor.py:476-480``).

The completion is deterministic in the prompt ids (and ``seed`` when sampling): its length is
``min(max_tokens, h)`` with ``h`` a hash-derived length in ``[1, max_tokens + 3]`` (at least
``min_tokens``). When ``h < max_tokens`` the model "emits EOS": the EOS id ends ``token_ids``, is
skipped in the text, and the finish reason is "stop" with ``stop_reason`` None; otherwise
"length". Generation also stops at ``max_model_len`` ("length", ``v1/core/sched/utils.py:98-119``),
at a ``stop_token_ids`` id ("stop", stop_reason = the id), and at the first ``stop`` string that
completes in the text ("stop", stop_reason = the string; the text is cut before it unless
``include_stop_str_in_output``, ``v1/engine/detokenizer.py:321-375``). The other ids are drawn
from the tokenizer's non-special vocabulary.
"""

from __future__ import annotations

import hashlib
import random
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Optional

from vllm.exceptions import VLLMValidationError
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.metrics.stats import RequestStateStats

from .core import CoreRequest, Progress, block_hashes
from .model import DoubleTokenizer, VllmConfig


@dataclass
class Plan:
    token_ids: list[int]
    finish_reason: str
    stop_reason: Any
    text: str


@dataclass
class FrontRequest:
    """Frontend state of one request (what the real OutputProcessor keeps per request)."""

    request_id: str  # external id, as given by the caller
    internal_id: str
    prompt_text: Optional[str]
    prompt_ids: list[int]
    params: SamplingParams
    plan: Plan
    stats: Optional[RequestStateStats]
    core: Optional[CoreRequest] = None
    generated: int = 0
    num_cached: int = 0
    finished: bool = False
    sent_tokens: int = 0
    sent_text: str = ""
    _text_cache: dict[int, str] = field(default_factory=dict)


class Processor:
    def __init__(self, vcfg: VllmConfig, tokenizer: DoubleTokenizer, log_stats: bool):
        self.vcfg = vcfg
        self.tokenizer = tokenizer
        self.log_stats = log_stats
        self.max_model_len = vcfg.model_config.max_model_len
        self.block_size = vcfg.cache_config.block_size
        self.prefix_caching = vcfg.cache_config.enable_prefix_caching
        self.max_token_id = max(tokenizer.max_token_id, vcfg.model_config.get_vocab_size() - 1)
        self.normal_ids = tokenizer.text_token_ids()
        self.eos_id = tokenizer.eos_token_id

    # ----------------------------------------------------------------- rendering + validation
    def render(self, prompt: Any) -> tuple[Optional[str], list[int]]:
        if isinstance(prompt, str):
            text, ids = prompt, self.tokenizer.encode(prompt, add_special_tokens=True)
        elif isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            text, ids = prompt.get("prompt"), [int(i) for i in prompt["prompt_token_ids"]]
        elif isinstance(prompt, dict) and "prompt" in prompt:
            text = prompt["prompt"]
            if not isinstance(text, str):
                raise TypeError("Expected prompt['prompt'] to be a string before tokenization; "
                                "use 'prompt_token_ids' for token ID inputs")
            ids = self.tokenizer.encode(text, add_special_tokens=True)
        elif isinstance(prompt, (list, tuple)) and all(isinstance(i, int) for i in prompt):
            text, ids = None, list(prompt)
        else:
            raise TypeError(f"vLLM double: unsupported prompt type {type(prompt).__name__}; "
                            "pass a str, TextPrompt or TokensPrompt")
        self.validate(ids)
        return text, ids

    def validate(self, ids: list[int]) -> None:
        n, limit = len(ids), self.max_model_len
        if n > limit:  # renderers/params.py:531-553
            qualifier = "at least " if n == limit + 1 else ""
            raise VLLMValidationError(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {qualifier}{n} input tokens, which exceeds this limit even without any "
                f"output tokens. Please reduce the length of the input prompt.",
                parameter="input_tokens", value=n)
        if n == 0:  # input_processor.py:565-566
            raise VLLMValidationError("The decoder prompt cannot be empty")
        if n == limit:  # input_processor.py:591-602
            raise VLLMValidationError(
                f"The decoder prompt (length {n}) plus the number of requested output tokens "
                f"(at least 1) is longer than the maximum model length of {limit}. Make sure that "
                f"`max_model_len` is no smaller than the number of text tokens (prompt + requested "
                f"output tokens).")
        lo, hi = min(ids), max(ids)  # renderers/base.py:483-490
        if lo < 0:
            raise VLLMValidationError(f"Token id {lo} is out of vocabulary")
        if hi > self.max_token_id:
            raise VLLMValidationError(f"Token id {hi} is out of vocabulary")

    # ----------------------------------------------------------------- request
    def make_request(self, request_id: str, internal_id: str, prompt: Any, params: Any,
                     arrival_time: Optional[float] = None) -> FrontRequest:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"vLLM double: expected SamplingParams, got {type(params).__name__}")
        if params.n != 1:
            raise NotImplementedError("vLLM double: only n=1 is modelled")
        text, ids = self.render(prompt)
        sp = params.clone()
        if sp.max_tokens is None:
            sp.max_tokens = self.max_model_len - len(ids)
        plan = self.plan(ids, sp)
        stats = RequestStateStats(arrival_time=arrival_time if arrival_time is not None else time.time()) \
            if self.log_stats else None
        return FrontRequest(request_id=request_id, internal_id=internal_id, prompt_text=text,
                            prompt_ids=ids, params=sp, plan=plan, stats=stats)

    def core_request(self, fr: FrontRequest, sink: Any, stream: bool) -> CoreRequest:
        hashes = block_hashes(fr.prompt_ids, self.block_size) if self.prefix_caching else []
        fr.core = CoreRequest(fr.internal_id, len(fr.prompt_ids), hashes, len(fr.plan.token_ids), sink, stream)
        return fr.core

    # ----------------------------------------------------------------- the planned completion
    def _decode(self, ids: list[int], sp: SamplingParams) -> str:
        if not sp.detokenize:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=sp.skip_special_tokens)

    def plan(self, prompt_ids: list[int], sp: SamplingParams) -> Plan:
        digest = hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8)
        if sp.temperature >= 1e-5 and sp.seed is not None:
            digest.update(int(sp.seed).to_bytes(8, "little", signed=True))
        h = int.from_bytes(digest.digest(), "little")
        max_tokens = int(sp.max_tokens)
        room = self.max_model_len - len(prompt_ids)
        hashed = 1 + h % (max_tokens + 3)
        eos_stop = False
        if sp.ignore_eos or self.eos_id is None:
            length = max_tokens if (sp.ignore_eos or hashed >= max_tokens) else hashed
            reason = "length" if length == max_tokens else "stop"
        else:
            hashed = max(hashed, sp.min_tokens)
            if hashed < max_tokens:
                length, eos_stop, reason = hashed, True, "stop"
            else:
                length, reason = max_tokens, "length"
        if length > room:  # v1/core/sched/utils.py:114-119: num_tokens >= max_model_len
            length, eos_stop, reason = room, False, "length"
        rng = random.Random(h)
        ids = rng.choices(self.normal_ids, k=length - (1 if eos_stop else 0))
        if eos_stop:
            ids.append(self.eos_id)
        stop_reason: Any = None
        stop_ids = set(sp.stop_token_ids or ()) - ({self.eos_id} if eos_stop else set())
        if stop_ids:
            for i, t in enumerate(ids[: len(ids) - (1 if eos_stop else 0)]):
                if t in stop_ids and i + 1 >= sp.min_tokens:
                    ids, reason, stop_reason = ids[: i + 1], "stop", t
                    break
        text = self._decode(ids, sp)
        if sp.stop and text:
            found = _find_stop(text, sp.stop)
            if found is not None:
                # the first token count whose text completes a stop string (prefix decodes grow)
                lo, hi = 1, len(ids)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if _find_stop(self._decode(ids[:mid], sp), sp.stop) is not None:
                        hi = mid
                    else:
                        lo = mid + 1
                ids = ids[:lo]
                text = self._decode(ids, sp)
                stop_str, idx = _find_stop(text, sp.stop) or found
                text = text[: idx + len(stop_str)] if sp.include_stop_str_in_output else text[:idx]
                reason, stop_reason = "stop", stop_str
        return Plan(ids, reason, stop_reason, text)

    # ----------------------------------------------------------------- outputs
    def update(self, fr: FrontRequest, ev: Progress) -> None:
        """Apply a core snapshot to the request's frontend state (the real output handler's job)."""
        fr.generated = ev.generated
        fr.num_cached = ev.num_cached
        if ev.finished and ev.error is None:
            fr.finished = True
        st = fr.stats
        if st is not None:
            if ev.generated > 0 and st.num_generation_tokens == 0:
                st.first_token_latency = time.time() - st.arrival_time
            st.num_generation_tokens = ev.generated
            st.queued_ts = ev.queued_ts
            st.scheduled_ts = ev.scheduled_ts
            st.first_token_ts = ev.first_token_ts
            st.last_token_ts = ev.last_token_ts

    def output(self, fr: FrontRequest) -> RequestOutput:
        """The ``RequestOutput`` for the request's current state (``output_processor.py:354-531``)."""
        sp, plan = fr.params, fr.plan
        k = fr.generated
        finished = fr.finished
        if finished:
            text, ids = plan.text, plan.token_ids
        else:
            ids = plan.token_ids[:k]
            text = fr._text_cache.get(k)
            if text is None:
                text = self._decode(ids, sp)
                if sp.output_text_buffer_length and len(text) > sp.output_text_buffer_length:
                    text = text[: -sp.output_text_buffer_length]
                elif sp.output_text_buffer_length:
                    text = ""
                fr._text_cache = {k: text}
        if sp.output_kind == RequestOutputKind.DELTA:
            out_ids = list(ids[fr.sent_tokens:])
            out_text = text[len(fr.sent_text):] if text.startswith(fr.sent_text) else text
            fr.sent_tokens, fr.sent_text = len(ids), text
        else:
            out_ids, out_text = list(ids), text
        block = self.block_size
        creation = 0
        if self.prefix_caching and k > 0:
            creation = max(0, (len(fr.prompt_ids) // block) * block - fr.num_cached)
        completion = CompletionOutput(
            index=0, text=out_text, token_ids=out_ids, cumulative_logprob=None, logprobs=None,
            finish_reason=plan.finish_reason if finished else None,
            stop_reason=plan.stop_reason if finished else None)
        return RequestOutput(
            request_id=fr.request_id, prompt=fr.prompt_text, prompt_token_ids=fr.prompt_ids,
            prompt_logprobs=None, outputs=[completion], finished=finished, metrics=fr.stats,
            num_cached_tokens=fr.num_cached, num_cache_creation_tokens=creation)


def _find_stop(text: str, stops: list[str]) -> Optional[tuple[str, int]]:
    """The stop string that completes earliest in ``text`` (ties: list order) and its index."""
    best = None
    best_end = None
    for s in stops:
        i = text.find(s)
        if i != -1 and (best_end is None or i + len(s) < best_end):
            best, best_end = (s, i), i + len(s)
    return best
