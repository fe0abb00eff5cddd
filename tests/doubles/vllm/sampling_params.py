"""``SamplingParams`` of vLLM 0.33.0 (``sampling_params.py:271-446``), restated for the fields the
double models, with the same construction-time normalisation (``:559-632``) and validation
(``:634-773``): invalid values raise ``VLLMValidationError`` (not ``ValueError``), e.g.
``max_tokens=0`` -> ``"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"``.

The real class is a ``msgspec.Struct`` whose fields can also be given positionally; the double
keeps the real order for the first sixteen fields (``n`` .. ``logprobs``) and makes the rest
keyword-only.
"""

from __future__ import annotations

import copy
import math
from dataclasses import KW_ONLY, dataclass, field
from enum import Enum
from typing import Any

from vllm.exceptions import VLLMValidationError

_SAMPLING_EPS = 1e-5  # sampling_params.py:32
_MAX_TEMP = 1e-2  # sampling_params.py:33
_MAX_N_SEQUENCES = 16384  # envs.VLLM_MAX_N_SEQUENCES default, used by _verify_num_sequences (:49-62)


class RequestOutputKind(Enum):
    """``sampling_params.py:208-214``."""

    CUMULATIVE = 0  # entire output so far in every RequestOutput
    DELTA = 1  # only deltas
    FINAL_ONLY = 2  # no intermediate RequestOutput


@dataclass
class SamplingParams:
    """Sampling parameters for text generation (fields as in ``sampling_params.py:285-446``)."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    _: KW_ONLY
    prompt_logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    skip_reading_prefix_cache: bool | None = None
    _all_stop_token_ids: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        # Normalisation as in sampling_params.py:559-632.
        if 0 < self.temperature < _MAX_TEMP:
            self.temperature = max(self.temperature, _MAX_TEMP)
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        else:
            self.stop_token_ids = list(dict.fromkeys(self.stop_token_ids))
        if self.bad_words is None:
            self.bad_words = []
        else:
            self.bad_words = list(dict.fromkeys(self.bad_words))
        if self.logprobs is True:
            self.logprobs = 1
        if self.prompt_logprobs is True:
            self.prompt_logprobs = 1
        if self.stop and not self.include_stop_str_in_output:
            # characters held back from streamed text until the end (:600-601)
            self.output_text_buffer_length = max(len(s) for s in self.stop) - 1
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            # greedy: top_p/top_k/min_p reset, n must be 1 (:615-620, :769-773)
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0
            if self.n > 1:
                raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {self.n}.")
        self._all_stop_token_ids.update(self.stop_token_ids)
        if self.skip_reading_prefix_cache is None:
            self.skip_reading_prefix_cache = self.prompt_logprobs is not None

    def _verify_args(self) -> None:
        # Checks and messages as in sampling_params.py:49-62 and :634-767.
        if not isinstance(self.n, int):
            raise VLLMValidationError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise VLLMValidationError(f"n must be at least 1, got {self.n}.")
        if self.n > _MAX_N_SEQUENCES:
            raise VLLMValidationError(
                f"n must be at most {_MAX_N_SEQUENCES}, got {self.n}. "
                "To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
            )
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise VLLMValidationError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise VLLMValidationError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not math.isfinite(self.repetition_penalty):
            raise VLLMValidationError(f"repetition_penalty must be a finite number, got {self.repetition_penalty}.")
        if self.repetition_penalty <= 0.0:
            raise VLLMValidationError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if not math.isfinite(self.temperature):
            raise VLLMValidationError(
                f"temperature must be a finite number, got {self.temperature}.",
                parameter="temperature", value=self.temperature)
        if self.temperature < 0.0:
            raise VLLMValidationError(
                f"temperature must be non-negative, got {self.temperature}.",
                parameter="temperature", value=self.temperature)
        if self.temperature > 2.0:
            raise VLLMValidationError(
                f"temperature must be in [0, 2], got {self.temperature}.",
                parameter="temperature", value=self.temperature)
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(f"top_p must be in (0, 1], got {self.top_p}.",
                                      parameter="top_p", value=self.top_p)
        if self.top_k < -1:
            raise VLLMValidationError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not isinstance(self.top_k, int):
            raise VLLMValidationError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if not 0.0 <= self.min_p <= 1.0:
            raise VLLMValidationError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(
                f"max_tokens must be at least 1, got {self.max_tokens}.",
                parameter="max_tokens", value=self.max_tokens)
        if self.min_tokens < 0:
            raise VLLMValidationError(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise VLLMValidationError(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, got {self.min_tokens}.")
        if self.stream_interval is not None and self.stream_interval < 1:
            raise VLLMValidationError(
                f"stream_interval must be at least 1, got {self.stream_interval}.",
                parameter="stream_interval", value=self.stream_interval)
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise VLLMValidationError(
                f"logprobs must be non-negative or -1, got {self.logprobs}.", parameter="logprobs", value=self.logprobs)
        if self.prompt_logprobs is not None and self.prompt_logprobs != -1 and self.prompt_logprobs < 0:
            raise VLLMValidationError(
                f"prompt_logprobs must be non-negative or -1, got {self.prompt_logprobs}.",
                parameter="prompt_logprobs", value=self.prompt_logprobs)
        if not all(isinstance(st_id, int) for st_id in self.stop_token_ids):
            raise VLLMValidationError(f"stop_token_ids must contain only integers, got {self.stop_token_ids}.")
        if any(not stop_str for stop_str in self.stop):
            raise VLLMValidationError("stop cannot contain an empty string.")
        if self.stop and not self.detokenize:
            raise VLLMValidationError(
                "stop strings are only supported when detokenize is True. Set detokenize=True to use stop.")
        if any(not bad_word for bad_word in self.bad_words):
            raise VLLMValidationError(f"bad_words cannot contain an empty string. Got bad_words={self.bad_words}")

    @property
    def all_stop_token_ids(self) -> set[int]:
        return self._all_stop_token_ids

    def clone(self) -> "SamplingParams":
        """A deep copy (``sampling_params.py:897``)."""
        return copy.deepcopy(self)
