"""Figures: fonts for CJK and emoji names, one warning line for characters no font draws (issue 18)."""

from __future__ import annotations

import warnings

import pytest

from raylc.io.figures import font_families, pyplot, save_figure

VAI = "\ua500\ua501"  # Vai syllables: in no font a machine is likely to have


def _font_with(path, family: str, text: str) -> None:
    """A TrueType font named ``family`` with a filled square glyph for each character of ``text``."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    def square():
        pen = TTGlyphPen(None)
        pen.moveTo((100, 0)), pen.lineTo((100, 700)), pen.lineTo((900, 700)), pen.lineTo((900, 0))
        pen.closePath()
        return pen.glyph()

    names = [f"g{ord(c):04X}" for c in text]
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder([".notdef", *names])
    fb.setupCharacterMap({ord(c): n for c, n in zip(text, names)})
    fb.setupGlyf({n: square() for n in [".notdef", *names]})
    fb.setupHorizontalMetrics({n: (1000, 100) for n in [".notdef", *names]})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": family, "styleName": "Regular"})
    fb.setupOS2(sTypoAscender=800, usWinAscent=800, usWinDescent=200)
    fb.setupPost()
    fb.save(str(path))


def _save(title: str, path) -> list[str]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 1.5))
    ax.set_title(title)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_figure(fig, path)
    return [str(w.message) for w in caught]


def test_characters_no_font_draws_give_one_warning_line_naming_them(tmp_path):
    messages = _save(f"task {VAI} {VAI}", tmp_path / "f.png")
    assert len(messages) == 1, messages
    assert "f.png" in messages[0] and repr(VAI) in messages[0] and "fonts-noto-cjk" in messages[0]
    assert "\n" not in messages[0]


def test_a_fallback_font_found_among_font_files_draws_what_dejavu_lacks(tmp_path, monkeypatch):
    from matplotlib import font_manager

    import raylc.io.figures as figures

    font = tmp_path / "DroidSansFallback.ttf"  # a fallback font's file name and family
    _font_with(font, "Droid Sans Fallback", VAI)
    # the first installed CJK family is used: put this one first, whatever else is installed
    monkeypatch.setattr(figures, "CJK_FAMILIES", ("Droid Sans Fallback", *figures.CJK_FAMILIES))
    try:
        assert "Droid Sans Fallback" in font_families([str(font), str(tmp_path / "unrelated.ttf")])
        figures._installed_families.cache_clear()  # pyplot() sets the families it finds now
        assert _save(f"task {VAI}", tmp_path / "f.png") == []
    finally:
        font_manager.fontManager.ttflist = [f for f in font_manager.fontManager.ttflist if f.fname != str(font)]
        font_manager.fontManager._findfont_cached.cache_clear()
        figures._installed_families.cache_clear()


def test_an_unreadable_font_file_is_skipped(tmp_path):
    bad = tmp_path / "NotoSansCJK-Regular.ttc"
    bad.write_bytes(b"not a font")
    assert font_families([str(bad)])[0] == "DejaVu Sans"


def test_installed_cjk_fonts_draw_cjk_and_hangul_names(tmp_path):
    families = font_families()
    if not any("CJK" in f or "Han" in f or "WenQuanYi" in f for f in families):
        pytest.skip("no CJK font installed (Debian: apt-get install fonts-noto-cjk)")
    assert _save("答案 질문 かな", tmp_path / "f.png") == []
