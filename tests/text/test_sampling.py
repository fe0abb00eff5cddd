import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.text.sampling import Sampling, exponential_ladder, sample_spans


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


def _span_set(df):
    return set(zip(df["problem_id"].to_list(), df["C"].to_list(), df["start"].to_list()))


@settings(max_examples=40, deadline=None)
@given(
    Ls=st.lists(st.integers(2, 200), min_size=1, max_size=3),
    strategy=st.sampled_from(["sample_rate", "sample_ip_rate"]),
    rate=st.floats(0.05, 1.0),
    seed=st.integers(0, 3),
)
def test_random_strategies_are_seeded_subsets_of_enumeration(Ls, strategy, rate, seed):
    problems = _problems(Ls)
    sampling = Sampling(strategy=strategy, rate=rate)
    spans = sample_spans(problems, sampling, seed)
    assert spans.equals(sample_spans(problems, sampling, seed))  # reproducible from the seed
    full = _span_set(sample_spans(problems, Sampling(strategy="enumerate")))
    assert _span_set(spans) <= full
    for pid, L in zip(problems["problem_id"], Ls):  # the single C = 0 and C = L spans are always kept
        got = spans.filter(pl.col("problem_id") == pid)
        assert got.filter(pl.col("C") == 0).height == 1 and got.filter(pl.col("C") == L).height == 1
    # a span's fate depends only on (seed, problem, C, start): sampling one problem alone agrees
    first = sample_spans(problems.head(1), sampling, seed)
    assert first.equals(spans.filter(pl.col("problem_id") == problems["problem_id"][0]))


def test_sample_rates_follow_their_probability():
    problems = _problems([400] * 5)
    spans = sample_spans(problems, Sampling(strategy="sample_rate", rate=0.3, lengths=[1, 5]), seed=1)
    per_c = spans.group_by("C").len().sort("C")["len"].to_list()  # 5 problems x ~400 starts x 0.3
    assert all(abs(n - 0.3 * 5 * 398) < 0.1 * 5 * 398 for n in per_c)
    ip = sample_spans(problems, Sampling(strategy="sample_ip_rate", rate=2.0, lengths=[1, 2, 20]), seed=1)
    counts = dict(ip.group_by("C").len().rows())
    assert counts[1] == 5 * 400 and counts[2] == 5 * 399  # rate / C >= 1: every start
    assert abs(counts[20] - 0.1 * 5 * 381) < 0.35 * 0.1 * 5 * 381


def test_take_ip_rate_and_length_subsets():
    problems = _problems([300])
    spans = sample_spans(problems, Sampling(strategy="take_ip_rate", stride_fraction=0.2))
    for C, starts in spans.group_by("C").agg("start").rows():
        if 0 < C < 300:
            assert starts == list(range(0, 300 - C + 1, max(1, int(0.2 * C))))
    long_only = sample_spans(problems, Sampling(min_length=10))
    assert set(long_only["C"]) == {0, 10, 20, 50, 100, 200, 300}
    short_only = sample_spans(problems, Sampling(max_length=10))
    assert set(short_only["C"]) == {0, 1, 2, 5, 10, 300}
    with pytest.raises(ValueError, match="take_ip_rate needs stride_fraction"):
        Sampling(strategy="take_ip_rate")


@settings(max_examples=60, deadline=None)
@given(
    Ls=st.lists(st.integers(1, 300), min_size=1, max_size=4),
    strides=st.dictionaries(st.sampled_from([0, 1, 2, 5, 10, 20, 50, 100, 200, 7]), st.integers(1, 400), max_size=6),
    fraction=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_per_length_strides_take_exactly_every_sth_start(Ls, strides, fraction):
    sampling = Sampling(every=strides, stride_fraction=fraction)
    problems = _problems(Ls)
    spans = sample_spans(problems, sampling)
    assert spans.equals(sample_spans(problems, Sampling(every=dict(reversed(strides.items())),
                                                        stride_fraction=fraction)))
    got = {(p, C): starts for p, C, starts in spans.group_by("problem_id", "C").agg("start").rows()}
    for pid, L in zip(problems["problem_id"], Ls):
        for C in exponential_ladder(L)[1:]:  # lengths the mapping does not list use stride 1
            s = max(strides.get(C, 1), int(fraction * C))
            assert sorted(got[pid, C]) == list(range(0, L - C + 1, s))
        assert got[pid, 0] == [0] and got[pid, L] == [0]
        assert {C for p, C in got if p == pid} == set(exponential_ladder(L)) | {L}


def test_every_mapping_validation_and_scalar_equivalence():
    problems = _problems([120, 37])
    ladder = exponential_ladder(120)
    assert sample_spans(problems,
                        Sampling(every={c: 3 for c in ladder})).equals(sample_spans(problems, Sampling(every=3)))
    assert Sampling(every={"5": "2", 1: 4}).every == {1: 4, 5: 2}  # YAML/JSON keys are normalized and sorted
    for bad in (0, {5: 0}, {-1: 2}, "x", 2.5, {5: 2.5}, [3], None):
        with pytest.raises(ValueError, match="every must be a stride >= 1 or a mapping"):
            Sampling(every=bad)


@pytest.mark.parametrize("strategy", ["enumerate", "sample_rate", "sample_ip_rate", "take_ip_rate"])
def test_strategies_other_than_take_every_ignore_every(strategy):
    """``every`` is take_every's stride: the other strategies observe the same spans with or without it."""
    problems = _problems([60, 45])
    base = {"strategy": strategy, "rate": 0.5 if strategy == "sample_rate" else 2.0,
            "stride_fraction": 0.2 if strategy == "take_ip_rate" else 0.0}
    plain = sample_spans(problems, Sampling(**base), seed=3)
    assert plain.equals(sample_spans(problems, Sampling(**base, every=7), seed=3))
    assert plain.equals(sample_spans(problems, Sampling(**base, every={5: 9, 10: 4}), seed=3))


def test_the_default_seed_is_zero_and_rows_are_sorted_by_task_first():
    problems = pl.DataFrame({"task": ["b", "a", "a"], "problem_id": ["a1", "b2", "b1"], "L": [30, 30, 30]})
    sampling = Sampling(strategy="sample_rate", rate=0.5)
    spans = sample_spans(problems, sampling)
    assert spans.equals(sample_spans(problems, sampling, seed=0))
    assert not spans.equals(sample_spans(problems, sampling, seed=1))
    assert spans["task"].to_list() == sorted(spans["task"].to_list())
    assert spans.equals(spans.sort("task", "problem_id", "C", "start"))
    assert spans.schema == pl.Schema({"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                      "start": pl.Int64})
