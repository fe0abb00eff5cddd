"""Figures: matplotlib set up once (Agg, no TeX parsing of names), saved as PNG, and drawn to
bytes so that a plotting failure leaves nothing half-written in a store."""

from __future__ import annotations

import functools
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

#: Fallback families for characters DejaVu Sans lacks, in order of preference: CJK (Noto Sans CJK
#: is Debian's ``fonts-noto-cjk``; each of its regional families has every CJK ideograph, kana
#: and Hangul), then monochrome emoji. Colour bitmap fonts (Noto Color Emoji) cannot be drawn by
#: Agg and are not listed. The first installed family of each group is used.
CJK_FAMILIES = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR", "Source Han Sans",
                "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback",
                "IPAexGothic", "IPAGothic")
EMOJI_FAMILIES = ("Noto Emoji", "Symbola")
#: Font files that hold those families, looked for among the system's fonts when matplotlib's font
#: cache (built once, maybe before the fonts were installed) does not list them.
_FALLBACK_FILES = re.compile(r"(notosanscjk|sourcehansans|wqy|droidsansfallback|ipaexg|ipag|notoemoji-|symbola)",
                             re.IGNORECASE)
_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


def font_families(paths: Optional[Iterable[str]] = None) -> list[str]:
    """``DejaVu Sans``, then the first installed family of :data:`CJK_FAMILIES` and of
    :data:`EMOJI_FAMILIES`: matplotlib draws each character in the first family of the list that
    has it (each family costs a font look-up per text drawn). ``paths`` (default: the system's
    font files) are added to matplotlib's font manager when their name looks like a fallback font."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    registered = {f.fname for f in manager.ttflist}
    for path in font_manager.findSystemFonts() if paths is None else paths:
        if _FALLBACK_FILES.search(Path(path).name) and str(path) not in registered:
            try:
                manager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                continue  # an unreadable font file: skip it
    known = {f.name for f in manager.ttflist}
    firsts = (next((f for f in group if f in known), None) for group in (CJK_FAMILIES, EMOJI_FAMILIES))
    return ["DejaVu Sans", *(f for f in firsts if f is not None)]


@functools.cache
def _installed_families() -> tuple[str, ...]:
    return tuple(font_families())


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend. Task and model names are data, never TeX
    (a task named ``$$`` is drawn as it is), in DejaVu Sans with the installed CJK and emoji
    fonts as fallbacks (:func:`font_families`)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["font.family"] = list(_installed_families())
    warnings.filterwarnings("ignore", message=_MISSING_GLYPH.pattern)  # one line per figure instead
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(out, format="png", dpi=110)
    missing = set()
    for w in caught:
        m = _MISSING_GLYPH.search(str(w.message))
        if m:
            missing.add(chr(int(m.group(1))))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    pyplot().close(fig)
    if missing:
        warnings.warn(f"{out.name}: no installed font draws {''.join(sorted(missing))!r}, shown as boxes; "
                      "install a font that covers them (Debian/Ubuntu: fonts-noto-cjk, fonts-symbola)", stacklevel=2)
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
