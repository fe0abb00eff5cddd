"""What every plan shares: its error, the cost lines of its summary, the planned job's cap, and
writing the planned job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    from raylc.text.tokenize import Tokenizer


class PlanError(ValueError):
    """A job or budget that cannot be planned; the message is one line."""


def cost_rows(tokens: int, price_per_mtok: Optional[float],
              tokens_per_s_per_gpu: Optional[float]) -> list[tuple[str, str]]:
    """``(item, value)`` summary rows: GPU-hours of ``tokens`` at ``tokens_per_s_per_gpu`` and
    their cost at ``price_per_mtok`` (each only when given)."""
    rows = []
    if tokens_per_s_per_gpu:
        rows.append(("GPU-hours",
                     f"{tokens / tokens_per_s_per_gpu / 3600:,.2f} at {tokens_per_s_per_gpu:,g} tokens/s/GPU"))
    if price_per_mtok is not None:
        rows.append(("cost", f"${price_per_mtok * tokens / 1e6:,.2f} at ${price_per_mtok:g} per million tokens"))
    return rows


def capped(job: Any, budget_tokens: int) -> Any:
    """``job`` with its run-time prompt-token cap (``inference.max_prompt_tokens``) at the plan's
    budget, unless its own cap is lower: a run of the planned job stops rather than send more."""
    cap = job.inference.max_prompt_tokens
    if cap is not None and cap <= budget_tokens:
        return job
    return job.model_copy(update={"inference": job.inference.model_copy(update={"max_prompt_tokens": budget_tokens})})


def write_whole(text: str, path: Union[str, Path]) -> None:
    """``text`` to ``path`` through a temporary file and a rename: whole or not at all. A symbolic
    link is followed (its target is written, the link kept); a path that is there and is not a
    regular file (a folder, a FIFO, a device) is one :class:`PlanError` line, never replaced."""
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise PlanError(f"{path}: not a regular file; give a file path to write the plan to")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def plan_tokenizer(spec: Optional[str], section: str = "probe") -> Tokenizer:
    """The tokenizer ``spec`` names (None: the offline default), or one :class:`PlanError` line
    (``section``: the job section whose ``tokenizer`` to set, ``probe`` or ``judge``)."""
    from raylc.text.tokenize import get_tokenizer

    try:
        return get_tokenizer(spec)
    except Exception as exc:  # a missing package, file or Hub access: one line for the CLI
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = "set probe.tokenizer or pass --tokenizer" if section == "probe" else f"set {section}.tokenizer"
        raise PlanError(f"cannot load tokenizer {spec!r} ({first}): {hint}") from None
