"""Tokenizers and context-window truncation (LongBench middle, HELMET end, start, refuse)."""

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.text.prompts import TEMPLATE, render_prompts
from raylc.text.tokenize import DefaultTokenizer, get_tokenizer
from raylc.text.truncation import PromptTooLong, fit_to_window, split_prompt

HEAD, _rest = TEMPLATE.split("{context}")
_MIDDLE, _TAIL = _rest.split("{question}")
QUESTION = "What is the code of vault V-17?"
TAIL = _MIDDLE + QUESTION + _TAIL


def _word(i: int) -> str:
    letters = ""
    while True:
        i, r = divmod(i, 26)
        letters += "abcdefghijklmnopqrstuvwxyz"[r]
        if i == 0:
            return "w" + letters


def words(n: int, start: int = 0) -> str:
    """``n`` distinct letter-only words: one default-tokenizer token each."""
    return " ".join(_word(i) for i in range(start, start + n))


# --- default tokenizer ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(0, 50), st.integers(0, 50))
def test_default_tokenizer_round_trips_every_contiguous_slice(text, a, b):
    tok = DefaultTokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.count(text) == len(ids)
    i, j = sorted((min(a, len(ids)), min(b, len(ids))))
    pieces = tok.pieces(text)
    assert tok.decode(ids[i:j]) == "".join(pieces[i:j])
    assert tok.decode(ids[:i]) + tok.decode(ids[i:]) == text


def test_default_tokenizer_is_stable_and_approximate():
    a, b = DefaultTokenizer(), DefaultTokenizer()
    text = "The ledger, entry 12345: add 7.\n\nQuestion: What?"
    assert a.encode(text) == b.encode(text)  # stable hash ids, not order of first sight
    assert a.pieces("The  ledger 12345.") == ["The", "  ledger", " 123", "45", "."]
    with pytest.raises(ValueError, match="unknown token id"):
        a.decode([123])


def test_get_tokenizer_specs():
    assert isinstance(get_tokenizer(None), DefaultTokenizer) and get_tokenizer("default") is get_tokenizer(None)
    with pytest.raises(ValueError, match="unknown tokenizer 'gpt2'"):
        get_tokenizer("gpt2")


def test_hf_tokenizer_without_transformers_is_a_clear_error():
    try:
        import transformers  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("transformers is installed: the missing-package error cannot be shown")
    with pytest.raises(ImportError, match="needs 'transformers'"):
        get_tokenizer("hf:some-org/some-model-not-on-disk")


# --- fit_to_window -------------------------------------------------------------------------


def test_fits_unchanged():
    tok = DefaultTokenizer()
    prompt, cut = fit_to_window(HEAD, words(100), TAIL, tok, 10_000, 32, "middle")
    assert (prompt, cut) == (HEAD + words(100) + TAIL, 0)


def test_300k_token_prompt_is_cut_to_fit_131072():
    tok = get_tokenizer(None)
    context = words(300_000)
    assert tok.count(HEAD + context + TAIL) > 300_000
    prompt, cut = fit_to_window(HEAD, context, TAIL, tok, 131072, 32, "middle")
    n = tok.count(prompt)
    assert n + 32 <= 131072 and n >= 131072 - 32 - 2  # uses the window, no more
    assert prompt.startswith(HEAD) and prompt.endswith(TAIL)  # instruction and question intact
    kept = tok.count(prompt[len(HEAD) : len(prompt) - len(TAIL)])
    assert cut == 300_000 - kept


def test_middle_keeps_first_and_last_halves_like_longbench():
    tok = DefaultTokenizer()
    n, room = 1000, 200
    limit = tok.count(HEAD + TAIL) + room
    prompt, cut = fit_to_window(HEAD, words(n), TAIL, tok, limit + 10, 10, "middle")
    assert cut == n - room
    # token slices keep their leading whitespace: the halves join with the original space
    assert prompt == HEAD + words(room // 2) + " " + words(room // 2, start=n - room // 2) + TAIL


def test_end_keeps_start_and_start_keeps_end():
    tok = DefaultTokenizer()
    limit = tok.count(HEAD + TAIL) + 50
    end, cut = fit_to_window(HEAD, words(500), TAIL, tok, limit, 0, "end")
    assert end == HEAD + words(50) + TAIL and cut == 450  # HELMET: truncate the document from the end
    start, cut = fit_to_window(HEAD, words(500), TAIL, tok, limit, 0, "start")
    assert start == HEAD + " " + words(50, start=450) + TAIL and cut == 450


def test_refuse_and_impossible_windows():
    tok = DefaultTokenizer()
    with pytest.raises(PromptTooLong, match="truncation: refuse"):
        fit_to_window(HEAD, words(500), TAIL, tok, 300, 10, "refuse")
    assert fit_to_window(HEAD, words(5), TAIL, tok, 10_000, 10, "refuse")[1] == 0
    with pytest.raises(PromptTooLong, match="instruction and question alone"):
        fit_to_window(HEAD, words(500), TAIL, tok, 20, 10, "middle")
    with pytest.raises(ValueError, match="unknown truncation policy"):
        fit_to_window(HEAD, "", TAIL, tok, 100, 1, "left")  # type: ignore[arg-type]


def test_split_prompt_matches_render_prompts():
    problems = pl.DataFrame({"problem_id": ["p"], "units": [["Alpha one.", "Beta\n\nQuestion: two."]],
                             "question": [QUESTION]})
    spans = pl.DataFrame({"problem_id": ["p"], "C": [2], "start": [0]})
    prompt = render_prompts(spans, problems)[0]
    head, context, tail = split_prompt(prompt)
    assert (head, context, tail) == (HEAD, "Alpha one. Beta\n\nQuestion: two.", TAIL)
    assert split_prompt("free text") == ("", "free text", "")


# --- a real (BPE) tokenizer, built offline ---------------------------------------------------


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers", reason="no real tokenizer offline: 'tokenizers' is not installed")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [TEMPLATE,
              QUESTION, words(3000)] + [f"Ledger entry {i} of 9 for vault V-{i}: add {i * 7}." for i in range(200)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_real_bpe_tokenizer_cuts_300k_to_fit(bpe_path):
    tok = get_tokenizer(f"hf:{bpe_path}")
    assert tok.decode(tok.encode(HEAD + QUESTION)) == HEAD + QUESTION
    context = words(100_000)
    total = tok.count(HEAD + context + TAIL)
    assert total > 131072
    prompt, cut = fit_to_window(HEAD, context, TAIL, tok, 131072, 64, "middle")
    assert tok.count(prompt) + 64 <= 131072 and cut > 0
    assert prompt.startswith(HEAD) and prompt.endswith(TAIL)
    body = prompt[len(HEAD) : len(prompt) - len(TAIL)]
    assert body.startswith(words(3)) and body.endswith(_word(99_999))  # both halves kept


@pytest.mark.parametrize("kept, expected", [
    (4, [0, 1, 8, 9]),  # even: two from the start, two from the end
    (5, [0, 1, 7, 8, 9]),  # odd: floor(n/2) from the start, the extra token from the end
    (1, [9]),
    (0, []),
])
def test_middle_split_of_odd_and_even_kept_counts(kept, expected):
    """Exact rows of the middle cut, worked out by hand from ``_keep``'s rule: the first
    ``n // 2`` ids and the last ``n - n // 2`` (issue 19: an odd count split the other way must
    fail a test)."""
    from raylc.text.truncation import _keep

    assert _keep(list(range(10)), kept, "middle") == expected


@pytest.mark.parametrize(("prompt", "want"), [
    # head, context, tail of TEMPLATE-like "H{context}M{question}T" prompts (the tail at the last M)
    ("H ctx M q T", ("H", " ctx ", "M q T")),
    ("HM q T", ("H", "", "M q T")),             # empty context: the middle starts right after the head
    ("H a M b M q T", ("H", " a M b ", "M q T")),  # the last middle
    ("X ctx M q T", ("", "X ctx M q T", "")),   # not from the template: all context
    ("H ctx M q", ("", "H ctx M q", "")),        # wrong tail
    ("H q T", ("", "H q T", "")),                # no middle
])
def test_split_prompt_exact_parts(prompt, want):
    assert split_prompt(prompt, "H{context}M{question}T") == want


def test_split_prompt_without_a_middle_is_all_context():
    assert split_prompt("H ctx q T", "H{context}{question}T") == ("", "H ctx q T", "")


def test_exact_fits_and_the_default_policy():
    """A prompt whose tokens plus max_tokens equal the window fits as it is; one token more is
    cut by the default policy, middle; a context cut to nothing still fits head + tail."""
    tok = DefaultTokenizer()
    n = tok.count(HEAD + words(40) + TAIL)
    assert fit_to_window(HEAD, words(40), TAIL, tok, n + 7, 7, "refuse") == (HEAD + words(40) + TAIL, 0)
    prompt, cut = fit_to_window(HEAD, words(40), TAIL, tok, n + 6, 7)
    assert cut == 1 and prompt == fit_to_window(HEAD, words(40), TAIL, tok, n + 6, 7, "middle")[0]
    fixed = tok.count(HEAD + TAIL)
    assert fit_to_window(HEAD, words(40), TAIL, tok, fixed + 7, 7, "end") == (HEAD + TAIL, 40)
    assert fit_to_window(HEAD, words(40), TAIL, tok, fixed + 8, 7, "end") == (HEAD + words(1) + TAIL, 39)


def test_messages_name_the_max_tokens_and_where_it_came_from():
    tok = DefaultTokenizer()
    with pytest.raises(PromptTooLong) as err:
        fit_to_window(HEAD, words(500), TAIL, tok, 300, 10, "refuse", max_tokens_from="suite.max_tokens[json_kv]")
    assert "+ the request's max_tokens 10 (from suite.max_tokens[json_kv]) > max_model_len 300" in str(err.value)
    with pytest.raises(PromptTooLong) as err:
        fit_to_window(HEAD, words(500), TAIL, tok, 20, 10, "middle")
    assert str(err.value) == (
        f"instruction and question alone need {tok.count(HEAD + TAIL)} tokens + the request's max_tokens 10 (from "
        "the suite's limit for this task if it sets one, else probe.sampling.max_tokens) > max_model_len 20")
    with pytest.raises(ValueError) as err:
        fit_to_window(HEAD, "", TAIL, tok, 100, 1, "left")  # type: ignore[arg-type]
    assert str(err.value) == "unknown truncation policy 'left' (allowed: middle, end, start, refuse)"


class _SeamTokenizer:
    """One token per character, plus one for each "ba": a middle cut of "b..ba..a" keeps its "ba" seam,
    so the first candidate is one token over the window (as BPE merges can make it)."""

    name = "seam"

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(map(chr, ids))

    def count(self, text: str) -> int:
        return len(text) + text.count("ba")


def test_a_cut_one_token_over_the_window_is_shrunk_again():
    """keep = 12 of 20 counts 13 > 12 (the seam); one more token goes: 11 kept, exactly 12 tokens."""
    tok = _SeamTokenizer()
    prompt, cut = fit_to_window("", "b" * 10 + "a" * 10, "", tok, max_model_len=12, max_tokens=0)
    assert (prompt, cut) == ("b" * 5 + "a" * 6, 9) and tok.count(prompt) == 12
