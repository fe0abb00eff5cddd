import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.sampling import exponential_ladder, sample_spans
from raylc.spec import Sampling


def _problems(Ls):
    return pl.DataFrame({"task": ["t"] * len(Ls), "problem_id": [f"p{i}" for i in range(len(Ls))], "L": Ls})


def test_exponential_ladder():
    assert exponential_ladder(1) == [0]
    assert exponential_ladder(3) == [0, 1, 2]
    assert exponential_ladder(250) == [0, 1, 2, 5, 10, 20, 50, 100, 200]
    assert exponential_ladder(200) == [0, 1, 2, 5, 10, 20, 50, 100]


@settings(max_examples=60, deadline=None)
@given(
    Ls=st.lists(st.integers(1, 300), min_size=1, max_size=4),
    every=st.integers(1, 7),
    fraction=st.sampled_from([0.0, 0.1, 0.2, 0.5]),
    strategy=st.sampled_from(["take_every", "enumerate"]),
)
def test_take_every_covers_exactly_the_claimed_spans(Ls, every, fraction, strategy):
    sampling = Sampling(strategy=strategy, every=every, stride_fraction=fraction)
    spans = sample_spans(_problems(Ls), sampling)
    assert spans.equals(sample_spans(_problems(Ls), sampling))  # deterministic
    for pid, L in zip(_problems(Ls)["problem_id"], Ls):
        got = spans.filter(pl.col("problem_id") == pid)
        for C in [*exponential_ladder(L), L]:
            starts = got.filter(pl.col("C") == C)["start"].to_list()
            if C in (0, L):
                assert starts == [0]
                continue
            stride = 1 if strategy == "enumerate" else max(every, int(fraction * C))
            assert starts == list(range(0, L - C + 1, stride))
        assert set(got["C"].to_list()) == set(exponential_ladder(L)) | {L}
        assert (got["start"] + got["C"] <= L).all()


def test_explicit_lengths_without_full_context():
    spans = sample_spans(_problems([10]), Sampling(lengths=[3, 20], every=4))
    assert spans["C"].to_list() == [3, 3]
    assert spans["start"].to_list() == [0, 4]
    spans = sample_spans(_problems([10]), Sampling(lengths=[3, "L"], every=4))
    assert spans["C"].to_list() == [3, 3, 10]
