"""Fit prompts into a model's context window by cutting the context only.

A prompt is ``head + context + tail`` (instruction, document, question). When
``tokens(prompt) + max_tokens > max_model_len`` the context is cut to the allowed number
of tokens; the head and tail are never touched:

* ``middle`` keeps the first and last halves of the allowed context tokens, the end taking
  the odd one, decoded together, as LongBench v2's ``pred.py`` cuts its prompt
  (``input_ids[:n//2] + input_ids[-n//2:]``, one ``decode``; "truncated from the middle").
  The official scripts' own cut of the whole prompt (LongBench v1, each half decoded on its own;
  v2 at its ``model2maxlen``) is :func:`truncate_prompt_middle` (``suite.max_length``);
* ``end`` keeps the start of the context (HELMET "truncate the document from the end");
* ``start`` keeps the end of the context;
* ``refuse`` raises :class:`PromptTooLong` (backends record it as the row's error).

Token counts come from the given tokenizer; its ``count`` may include fixed overhead
(a chat template), which is then budgeted for too.
"""

from __future__ import annotations

from typing import Literal, Optional

from raylc.text.prompts import TEMPLATE
from raylc.text.tokenize import HFTokenizer, Tokenizer

Policy = Literal["middle", "end", "start", "refuse"]
POLICIES = ("middle", "end", "start", "refuse")


class PromptTooLong(ValueError):
    """A prompt that cannot (or, with policy ``refuse``, may not) be fitted into the window."""


def split_prompt(prompt: str, template: str = TEMPLATE) -> tuple[str, str, str]:
    """``(head, context, tail)`` of a prompt rendered from ``template`` (``{context}``, ``{question}``).

    The tail starts at the last occurrence of the text between ``{context}`` and
    ``{question}``. A prompt not rendered from the template is all context: ``("", prompt, "")``.
    """
    head, rest = template.split("{context}")
    middle, tail = rest.split("{question}")
    i = prompt.rfind(middle) if middle else -1
    if prompt.startswith(head) and prompt.endswith(tail) and i >= len(head):
        return head, prompt[len(head) : i], prompt[i:]
    return "", prompt, ""


def _keep(ids: list[int], n: int, policy: str) -> list[int]:
    if n <= 0:
        return []
    if policy == "middle":
        first = n // 2
        return ids[:first] + ids[len(ids) - (n - first) :]
    if policy == "end":
        return ids[:n]
    return ids[len(ids) - n :]  # "start"


def _max_tokens_text(max_tokens: int, source: Optional[str]) -> str:
    """``the request's max_tokens N (from ...)`` for a message: the number the window was
    budgeted with, which a suite's per-task limit may have set instead of the probe's."""
    where = source or "the suite's limit for this task if it sets one, else probe.sampling.max_tokens"
    return f"the request's max_tokens {max_tokens} (from {where})"


def fit_to_window(
    head: str,
    context: str,
    tail: str,
    tokenizer: Tokenizer,
    max_model_len: int,
    max_tokens: int,
    policy: Policy = "middle",
    max_tokens_from: Optional[str] = None,
) -> tuple[str, int]:
    """``(prompt, context tokens cut)`` with ``count(prompt) + max_tokens <= max_model_len``.

    Raises :class:`PromptTooLong` for policy ``refuse`` when a cut is needed, or when head
    and tail alone leave no room. ``max_tokens`` is the request's own (a suite may set one per
    task, e.g. HELMET's 100 for json_kv, overriding ``probe.sampling.max_tokens``); the
    message names it and where it came from (``max_tokens_from``, else both possibilities).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown truncation policy {policy!r} (allowed: {', '.join(POLICIES)})")
    prompt = head + context + tail
    limit = max_model_len - max_tokens
    total = tokenizer.count(prompt)
    if total <= limit:
        return prompt, 0
    budget = _max_tokens_text(max_tokens, max_tokens_from)
    if policy == "refuse":
        raise PromptTooLong(f"prompt has {total} tokens + {budget} > max_model_len {max_model_len} "
                            "(truncation: refuse)")
    fixed = tokenizer.count(head + tail)
    ids = tokenizer.encode(context)
    keep = min(len(ids), limit - fixed)
    while keep > 0:
        prompt = head + tokenizer.decode(_keep(ids, keep, policy)) + tail
        over = tokenizer.count(prompt) - limit
        if over <= 0:
            return prompt, len(ids) - keep
        keep -= max(over, 1)  # token merges at the seams: shrink and re-check
    prompt = head + tail
    if tokenizer.count(prompt) <= limit:
        return prompt, len(ids)
    raise PromptTooLong(
        f"instruction and question alone need {fixed} tokens + {budget} > max_model_len {max_model_len}"
    )


def truncate_prompt_middle(head: str, context: str, tail: str, tokenizer: Tokenizer,
                           max_length: int, *, together: bool = False) -> tuple[str, str, str]:
    """The *whole* prompt cut as the official ``pred.py`` scripts cut it: a prompt of more than
    ``max_length`` tokens keeps its first ``max_length // 2`` tokens and its last ones, and
    nothing is re-counted. LongBench v1 (``LongBench/pred.py``): ``half = int(max_length/2)`` at
    each end, each half decoded on its own. With ``together``, LongBench v2 (``pred.py``
    ``query_llm``): ``input_ids[:max_len//2] + input_ids[-max_len//2:]`` (the end takes the odd
    token), decoded as one. Both count the ids of Hugging Face's ``tokenizer.encode(prompt)``,
    the special tokens it adds (a model's BOS) included, and decode with
    ``skip_special_tokens=True``: with an ``hf:`` tokenizer the BOS takes one of the first
    half's tokens and is dropped from the text (raylc's default tokenizer adds none).
    Returned as ``(head, context, tail)`` again when the cut prompt still starts with ``head``
    and ends with ``tail`` (the cut fell inside the context, the usual case), else as
    ``("", cut prompt, "")``."""
    text = head + context + tail
    if isinstance(tokenizer, HFTokenizer):
        ids, added = tokenizer.encode(text, special=True), set(tokenizer.encode("", special=True))
    else:
        ids, added = tokenizer.encode(text), set()
    if len(ids) <= max_length:
        return head, context, tail
    first = ids[:max_length // 2]
    last = ids[len(ids) - (max_length - max_length // 2 if together else max_length // 2):]
    first, last = [i for i in first if i not in added], [i for i in last if i not in added]
    cut = tokenizer.decode(first + last) if together else tokenizer.decode(first) + tokenizer.decode(last)
    if cut.startswith(head) and cut.endswith(tail) and len(cut) >= len(head) + len(tail):
        return head, cut[len(head):len(cut) - len(tail)], tail
    return "", cut, ""


def counted_cut(head: str, context: str, tail: str, tokenizer: Tokenizer, max_length: Optional[int], *,
                together: bool = False) -> tuple[str, str, str, int, int]:
    """A released benchmark's prompt as its suite builds it: ``(head, context, tail)`` cut by
    :func:`truncate_prompt_middle` when ``max_length`` is set, the context's token count before the
    cut and after it (the context counted again only when the cut changed it)."""
    n = kept = tokenizer.count(context)
    if max_length is not None:
        cut = truncate_prompt_middle(head, context, tail, tokenizer, max_length, together=together)
        if cut[1] is not context:
            head, context, tail = cut
            kept = min(n, tokenizer.count(context))
    return head, context, tail, n, kept
