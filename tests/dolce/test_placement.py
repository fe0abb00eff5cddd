"""COW's likelihood for evidence that stays put (raylc/dolce/placement.py) and its use in the
posterior: the forward pass against enumeration of every placement, and a document's spans."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.dolce.cow import COWFit
from raylc.dolce.placement import (
    BUDGET,
    FEW_BUDGET,
    _chain_step,
    _window_lse,
    _window_sum,
    few_copies_loglik,
    few_copies_work,
    placement_loglik,
    placement_logliks,
    placement_work,
)


def _enumerated(L, lam, k, start, C, lg1, lg0):
    """log mean over Assumption 1's placements of prod_w g_w(covered), by listing them."""
    M = L - lam + 1
    rows = []
    for A in itertools.combinations(range(M), k):
        if any(b - a < lam for a, b in zip(A, A[1:])):
            continue
        total = np.zeros(lg1.shape[1])
        for w in range(len(C)):
            if C[w] < lam:
                continue
            covered = any(start[w] <= a and a + lam <= start[w] + C[w] for a in A)
            total += lg1[w] if covered else lg0[w]
        rows.append(total)
    rows = np.array(rows)
    top = rows.max(axis=0)
    return top + np.log(np.exp(rows - top).mean(axis=0))


@st.composite
def _problems(draw):
    L = draw(st.integers(2, 9))
    lam = draw(st.integers(1, L - 1))
    n = draw(st.integers(1, 10))
    C = [draw(st.integers(0, L)) for _ in range(n)]
    start = [draw(st.integers(0, L - c)) for c in C]
    G = draw(st.integers(1, 3))
    vals = st.floats(-8.0, 0.0)
    lg1 = np.array([[draw(vals) for _ in range(G)] for _ in range(n)])
    lg0 = np.array([[draw(vals) for _ in range(G)] for _ in range(n)])
    return L, lam, np.array(C), np.array(start), lg1, lg0


@settings(max_examples=150, deadline=None)
@given(_problems())
def test_the_forward_pass_equals_enumerating_every_placement(case):
    L, lam, C, start, lg1, lg0 = case
    k_max = L // lam
    got = placement_loglik(L, lam, k_max, start, C, lg1, lg0)
    for k in range(1, k_max + 1):
        np.testing.assert_allclose(got[:, k - 1], _enumerated(L, lam, k, start, C, lg1, lg0), rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(_problems(), min_size=2, max_size=5))
def test_items_run_together_give_what_each_gives_alone(cases):
    G = min(c[4].shape[1] for c in cases)
    items = [(L, lam, L // lam, start, C, lg1[:, :G], lg0[:, :G]) for L, lam, C, start, lg1, lg0 in cases]
    for together, item in zip(placement_logliks(items), items):
        np.testing.assert_allclose(together, placement_loglik(*item), rtol=1e-12, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(_problems())
def test_the_chain_over_copies_equals_the_forward_pass(case):
    """The chain (past the forward pass's budget) is exact: every k, any spans."""
    L, lam, C, start, lg1, lg0 = case
    k_max = L // lam
    np.testing.assert_allclose(few_copies_loglik(L, lam, k_max, start, C, lg1, lg0),
                               placement_loglik(L, lam, k_max, start, C, lg1, lg0), rtol=1e-9, atol=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(0, 45), st.integers(0, 45), st.sampled_from([1.0, 30.0, 2000.0]),
       st.integers(0, 2**32 - 1))
def test_the_sliding_window_equals_summing_each_window(M, lo, width, scale, seed):
    """Windows of any width and place, terms spread by up to thousands of nats (past exp's
    range: the log-space branch), some -inf."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0.0, scale, (M, 2))
    u[rng.random((M, 2)) < 0.2] = -np.inf
    hi = lo + width
    want = np.full((M, 2), -np.inf)
    for y in range(M):
        a, b = max(y - hi, 0), y - lo
        if b >= a:
            want[y] = np.logaddexp.reduce(u[a:b + 1], axis=0)
    got = _window_lse(u, lo, hi)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-9, atol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(0, 45), st.integers(0, 45), st.integers(0, 2**32 - 1))
def test_the_doubling_window_sum_equals_summing_each_window(M, lo, width, seed):
    rng = np.random.default_rng(seed)
    e = rng.exponential(1.0, (M, 3)) * (rng.random((M, 3)) < 0.8)
    hi = lo + width
    want = np.array([e[max(y - hi, 0):max(y - lo + 1, 0)].sum(axis=0) for y in range(M)])
    np.testing.assert_allclose(_window_sum(e, lo, hi), want, rtol=1e-12, atol=0)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 40), st.lists(st.integers(1, 12), min_size=1, max_size=4),
       st.sampled_from([1.0, 30.0, 400.0, 2000.0]), st.integers(0, 2**32 - 1))
def test_a_chain_step_equals_summing_each_pair(M, gaps, scale, seed):
    """Bands in exp space and, past EXP_RANGE nats of spread, in log space, mixed in one step;
    some terms -inf."""
    rng = np.random.default_rng(seed)
    edges = np.cumsum([1, *gaps])
    bands = [(t, int(lo), int(hi)) for t, (lo, hi) in enumerate(zip(edges[:-1], edges[1:] - 1)) if lo < M]
    v = rng.normal(0.0, scale, (M, 2))
    v[rng.random((M, 2)) < 0.2] = -np.inf
    left = rng.normal(0.0, scale / 4, (len(gaps), M, 2))
    right = rng.normal(0.0, scale / 4, (len(gaps), M, 2))
    want = np.full((M, 2), -np.inf)
    for b in range(M):
        for t, lo, hi in bands:
            a = np.arange(max(b - hi, 0), b - lo + 1)
            if a.size:
                want[b] = np.logaddexp(want[b], right[t][b] + np.logaddexp.reduce(v[a] - left[t][a], axis=0))
    got = _chain_step(v, left, right, bands)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-9, atol=1e-9)


def _document_task(answers: dict[str, dict[int, str]], L: int = 8) -> pl.DataFrame:
    """One task of L-unit documents: every span of C = 0, 1, 2, 5 and L; ``answers[pid][C]`` the
    outcomes by start ('1' right, '0' wrong, '?' IDK), every other C wrong."""
    rows = []
    for pid, by_c in answers.items():
        for C in (0, 1, 2, 5, L):
            outcomes = by_c.get(C, "0" * (1 if C in (0, L) else L - C + 1))
            for s, x in enumerate(outcomes):
                score = None if x == "?" else float(x)
                rows.append(("docs", pid, L, C, s, score, "subem"))
    return pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                      "start": pl.Int64, "score": pl.Float64, "metric": pl.String}, orient="row")


def _one_paragraph(unit: int, L: int = 8, miss: str = "0") -> dict[int, str]:
    """A probe that answers right exactly on the spans holding paragraph ``unit``, ``miss``
    elsewhere (the closed-book span too)."""
    return {C: "".join("1" if s <= unit < s + C else miss for s in range(L - C + 1)) for C in (1, 2, 5)} | \
        {0: miss, L: "1"}


@pytest.mark.parametrize("miss", ["0", "?"])
def test_one_paragraph_per_document_is_retrieval_whatever_the_probe_says_without_it(miss):
    """Ten documents, each answered right on exactly the spans that hold one paragraph, wrong
    (a probe that never abstains) or IDK elsewhere: every problem is lambda = 1, k = 1 (III),
    confidently. Under Eq. 3 alone (spans drawn independently, ``BUDGET`` = 0) eight of the ten
    came out II at confidence 0.65-0.85: the counts alone do not place the right answers."""
    task = _document_task({f"p{i}": _one_paragraph(i % 8, miss=miss) for i in range(10)})
    fit = COWFit(uncertainty_steps=100).fit(task)
    assert fit.category_.tolist() == ["III"] * 10
    assert fit.lam_.tolist() == [1] * 10 and fit.k_.tolist() == [1] * 10
    assert (fit.uncertainty_["confidence"] > 0.9).all()


def _ladder_task(answers: dict[str, int], L: int, lengths=(1, 2, 5, 10, 20, 50, 100)) -> pl.DataFrame:
    """One task of L-unit documents, every start at each length below L plus C = 0 and L: problem
    ``pid`` is answered right exactly on the spans holding unit ``answers[pid]``, wrong elsewhere."""
    rows = [("docs", pid, L, C, s, float(C == L or (C > 0 and s <= unit < s + C)), "subem")
            for pid, unit in answers.items()
            for C in (0, *[c for c in lengths if c < L], L) for s in range(1 if C in (0, L) else L - C + 1)]
    return pl.DataFrame(rows, schema={"task": pl.String, "problem_id": pl.String, "L": pl.Int64, "C": pl.Int64,
                                      "start": pl.Int64, "score": pl.Float64, "metric": pl.String}, orient="row")


def test_a_copy_near_the_edge_of_a_long_document_is_retrieval():
    """Documents past the forward pass's budget (L = 120, 140, every start at C = 1 .. 100) whose
    one answering unit lies near an edge: spans of 50 or 100 units hold it only from a few
    starts, where Eq. 3 (every span's cover drawn afresh) expects most of them to. Eq. 3 alone
    (``FEW_BUDGET`` = 0) reported II (lambda = 2, k = 50) for four and IV for one; the chain over
    the copies places the unit and reports III, confidently."""
    from raylc.dolce import cow

    task = pl.concat([_ladder_task({f"a{u}": u for u in (0, 3, 116)}, 120),
                      _ladder_task({f"b{u}": u for u in (2, 137)}, 140)])
    fit = COWFit(uncertainty_steps=60).fit(task)
    exact, few = cow._placement_cost(fit.pairs_, fit.L_, fit.lam_q_)
    assert (exact > BUDGET).all() and (few <= cow.FEW_BUDGET).all()
    assert fit.category_.tolist() == ["III"] * 5 and (fit.uncertainty_["confidence"] > 0.9).all()
    old = cow.FEW_BUDGET
    try:
        cow.FEW_BUDGET = 0
        eq3 = COWFit(uncertainty_steps=60).fit(task)
    finally:
        cow.FEW_BUDGET = old
    assert "III" not in eq3.category_.tolist()


def test_long_documents_keep_eq3_alone():
    """Past both budgets the positional sums are skipped: the posterior reads Eq. 3's pairs only."""
    from raylc.dolce import cow

    L = 2000
    task = _ladder_task({"p0": 7}, L)
    fit = COWFit(n_steps=2, uncertainty_steps=4)
    fit.fit(task)
    runs = fit._posterior_fits(fit.cell_stats(task))
    exact, few = cow._placement_cost(runs[0].pairs_, fit.L_, fit.lam_q_)
    assert exact[0] > BUDGET and few[0] > cow.FEW_BUDGET
    assert all(len(fit.posterior_pairs(task, r)) == 1 for r in runs)


@pytest.mark.parametrize("replant", [True, False])
def test_spans_drawn_independently_skip_the_chain(replant, monkeypatch):
    """The chain is tried on a few problems first: where Eq. 3's pairs win there by a wide margin
    (copies re-placed for every span, as Eq. 3 draws them) the task keeps Eq. 3 alone; copies that
    stay put take the placement variants, less those far behind there (``VARIANT_MARGIN``). The
    frames equal those of a fit that runs the chain on every problem (checked on the calibration
    generators, seeds 0-1) and keeps every variant."""
    from dolce_reference import simulate_cow_task

    from raylc.dolce import cow
    from raylc.dolce.uncertainty import problem_uncertainty

    monkeypatch.setattr(cow, "PROBE_PROBLEMS", 6)  # 12 problems, 6 tried first (16 of 24 take 2.5x the time)
    task, _, _ = simulate_cow_task(12, 1, L_range=(60, 120), replant_each_observation=replant)
    fit = COWFit(n_steps=5, uncertainty_steps=30)
    fit.fit(task)
    runs = fit._posterior_fits(fit.cell_stats(task))
    exact, few = cow._placement_cost(runs[0].pairs_, fit.L_, fit.lam_q_)
    assert ((exact > BUDGET) & (few <= cow.FEW_BUDGET)).sum() > cow.PROBE_PROBLEMS
    sizes = {len(fit.posterior_pairs(task, r)) for r in runs}
    if replant:
        assert sizes == {1}
        return
    # copies that stay put: the variants far behind on the first problems are dropped for the rest,
    # and the frames equal those of a fit that keeps every variant
    everything = 1 + len(cow.NOISE_GRID) ** cow.SPAN_CLASSES
    assert all(1 < n < everything for n in sizes)
    pruned = [p for r in runs for p in fit.posterior_pairs(task, r)]
    old = cow.VARIANT_MARGIN
    try:
        cow.VARIANT_MARGIN = np.inf
        every = [p for r in runs for p in fit.posterior_pairs(task, r)]
    finally:
        cow.VARIANT_MARGIN = old
    assert len(every) == everything * len(runs)
    u, v = (problem_uncertainty(p, fit.problems_.size, fit.lam_p_, fit.k_p_, fit.lam_q_) for p in (pruned, every))
    assert np.array_equal(u["category"], v["category"]) and np.array_equal(u["pair"], v["pair"])
    assert np.allclose(u["confidence"], v["confidence"], atol=1e-3)


#: SmolLM2-135M-Instruct's answers on ``jobs/real-dolce-smollm2.yaml``'s figures task (float32,
#: vLLM's CPU engine, seed 0; saved by ``tests/benchmarks/real_dolce_agreement.py --save-obs``):
#: per problem, right (1) or wrong (0) by start at C = 0, 1, 2, 5 and L = 7. It never says IDK.
SMOLLM2_FIGURES = {
    "figures-01": "0 0100000 110001 110 1",
    "figures-02": "0 0000101 000110 111 1",
    "figures-03": "0 0010001 011001 111 1",
    "figures-04": "0 0000011 000010 011 1",
    "figures-05": "0 0100000 110000 110 1",
    "figures-06": "0 0000010 000011 011 1",
    "figures-07": "0 0100000 110000 110 1",
    "figures-08": "0 0000011 000011 011 1",
    "figures-09": "0 0010000 000001 111 1",
    "figures-10": "0 0000100 000110 111 1",
}


def test_a_real_probe_read_by_its_single_paragraphs():
    """A real probe errs more often on spans of several paragraphs than on one: SmolLM2 answers
    every figures problem from exactly the single paragraphs that state the figure, but on the
    spans of two it misses a covered paragraph or picks the figure from a neighbour. With one
    P(1|N) per span class (:func:`raylc.dolce.cow.span_class`) the posterior reads the problems
    as their single paragraphs imply (tests/real_implied.py) for 9 of 10; with one P(1|N) for
    every span (``SPAN_CLASSES`` = 1) for 8: figures-02, answered from paragraphs 4 and 6 alone
    but not from the span of 5-6, came out III (0.57) instead of II."""
    from real_implied import implied_categories

    from raylc.dolce import cow

    task = _document_task({pid: dict(zip((0, 1, 2, 5, 7), s.split())) for pid, s in SMOLLM2_FIGURES.items()}, L=7)
    implied = implied_categories(task).sort("problem_id")["category"].to_list()
    assert implied.count("II") == 4  # paragraphs 2, 4 or 5 and the summary paragraph 6

    def agreement(classes: int) -> tuple[int, dict]:
        old = cow.SPAN_CLASSES
        try:
            cow.SPAN_CLASSES = classes
            fit = COWFit(uncertainty_steps=200).fit(task)
        finally:
            cow.SPAN_CLASSES = old
        got = dict(zip(fit.problems_.astype(str), fit.category_.tolist()))
        return sum(got[p] == c for p, c in zip(sorted(SMOLLM2_FIGURES), implied)), got

    agree, got = agreement(cow.SPAN_CLASSES)
    assert agree >= 9 and got["figures-02"] == "II"
    assert agreement(1)[0] == 8


def test_the_work_of_a_document_of_a_billion_units_does_not_wrap():
    """L k_max for L near 10^9 overflows int64: the work wrapped to a small number, the forward
    pass was chosen and asked for terabytes. In float64 it stays past the budget, and the fit of
    such a task ends at once."""
    L = np.array([10**9], dtype=np.int64)
    assert placement_work(L, 1, L, 5, 60)[0] > BUDGET and few_copies_work(L, 1, L, 4, 60)[0] > FEW_BUDGET
    assert placement_work(np.array([40]), 2, np.array([3]), 10, 12)[0] == 39 * 4 * 10 * 12  # as before
    spans = [(0, 0, 0.0), (1, 5, 1.0), (1, 100, 0.0), (2, 7, 0.0), (5, 0, 1.0), (10**9, 0, 1.0)]
    obs = pl.DataFrame([dict(task="t", problem_id=f"p{p}", L=10**9, C=C, start=s, score=x, metric="em")
                        for p in range(3) for C, s, x in spans])
    fit = COWFit(uncertainty_steps=20).fit(obs)
    assert fit.frames()[0].height == 3
