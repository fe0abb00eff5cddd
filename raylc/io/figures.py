"""Figures: matplotlib set up once (Agg, no TeX parsing of names), saved as PNG, and drawn to
bytes so that a plotting failure leaves nothing half-written in a store."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable, Optional


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend. Task and model names are data, never TeX
    (a task named ``$$`` is drawn as it is)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


#: Colour-blind-safe colours for models: Okabe & Ito (2008), black last; then Paul Tol's muted scheme.
MODEL_PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
                 "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499")


def model_colors(models: Any) -> dict[str, str]:
    """One colour per model name, from :data:`MODEL_PALETTE` in sorted-name order: the same
    model has the same colour in every figure drawn from one set of models."""
    names = sorted({str(m) for m in models})
    return {m: MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, m in enumerate(names)}


def save_figure(fig: Any, path: str | Path, title: Optional[str] = None, tight: bool = False) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders created) and close it; returns the path."""
    if title:
        fig.suptitle(title)
    if tight:
        fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=110)
    pyplot().close(fig)
    return out


def png_bytes(draw: dict[str, Callable[[Path], Any]]) -> dict[str, bytes]:
    """``{file name: PNG bytes}``: each ``draw[name](path)`` writes its figure to a temporary
    path, read back before anything reaches a store."""
    with tempfile.TemporaryDirectory() as tmp:
        out = {}
        for name, fn in draw.items():
            fn(Path(tmp, name))
            out[name] = Path(tmp, name).read_bytes()
        return out
