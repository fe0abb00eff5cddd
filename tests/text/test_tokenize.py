"""The default tokenizer's batch count equals its one-text count on any text."""

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.text.tokenize import _POLARS_FROM, DefaultTokenizer, count_texts

ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=60)
ANY = st.text(max_size=40)
MIXED = st.lists(st.one_of(ASCII, ANY, st.sampled_from(["", " ", "\x1f", "a\x85b", "١٢٣4", "x_y", "\u00a0"])),
                 max_size=12)


@settings(max_examples=300, deadline=None)
@given(texts=MIXED)
def test_count_many_equals_count(texts):
    tok = DefaultTokenizer()
    want = [tok.count(t) for t in texts]
    assert tok.count_many(pl.Series(texts, dtype=pl.String)).tolist() == want
    assert count_texts(pl.Series(texts, dtype=pl.String), tok).tolist() == want


@settings(max_examples=20, deadline=None)
@given(texts=MIXED, odd=st.sampled_from(["", "\x1f", "naïve", "数学"]), reps=st.integers(1, 3))
def test_long_texts_count_their_pieces(texts, odd, reps):
    """From _POLARS_FROM characters ``count`` goes through Polars; it still counts ``pieces``
    (``re.findall``), also where an odd character sends the text back to ``re``."""
    tok = DefaultTokenizer()
    text = ("Key 12345 -> value_x!\n\n" * (_POLARS_FROM // 20)) * reps + odd + "".join(texts)
    assert len(text) >= _POLARS_FROM
    assert tok.count(text) == len(tok.pieces(text))
    assert tok.count(text[:_POLARS_FROM - 1]) == len(tok.pieces(text[:_POLARS_FROM - 1]))


def test_count_many_known_pieces():
    tok = DefaultTokenizer()
    texts = ["Key 12345 -> value_x!\n\n", "", "\x1fword", "naïve 2024"]
    # Key| 123|45| -|>| value|_|x|!|\n\n
    assert tok.count_many(pl.Series(texts)).tolist() == [len(tok.pieces(t)) for t in texts] == [10, 0, 1, 3]
