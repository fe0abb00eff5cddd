"""DOLCE PIG scenario: rho~ (Appendix B.1), rho (B.2), Algorithm 2 (raylc.dolce.pig)."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pig_reference import (
    brute_cover_pmf_table,
    exact_cover_pmf,
    exact_cover_pmf_vector,
    exact_density,
    exact_mode,
    paper_printed_cover_pmf,
    reference_pig_em,
    simulate_pig_task,
)
from scipy.stats import spearmanr

from raylc.dolce.categories import assign_categories, category_thresholds  # noqa: E402
from raylc.dolce.cells import (
    UNCERTAINTY_SCHEMA,
    CellStats,  # noqa: E402
)
from raylc.dolce.pig import (  # noqa: E402
    PIGFit,
    _chunks,
    _log_coeff_fourier,
    fit_pig_task,
    pig_bin_density,
    pig_cover_logpmf,
    pig_cover_pmf,
    pig_density,
    pig_pmf_mode,
)
from raylc.dolce.scenario import N_BINS, bucketize_scores  # noqa: E402

METHODS = ("auto", "lse", "fourier")


# =============================================================================== rho~ (B.1)
def _small_cases(max_L: int = 8):
    """Every (lam, k, L) with L <= max_L (valid or not) and its brute-force table."""
    for L in range(0, max_L + 1):
        for lam in range(0, L + 2):
            for k in range(0, L + 2):
                yield lam, k, L, brute_cover_pmf_table(lam, k, L)


def test_pmf_matches_brute_force_every_small_case():
    """All L <= 8, lam, k (incl. k lam > L, k = 0), C in 0..L, m in 0..lam: |diff| <= 1e-9."""
    rows, want = [], []
    for lam, k, L, table in _small_cases():
        for (C, m), p in table.items():
            if lam == 0 and k >= 1:
                p = Fraction(int(m == 0))  # convention (the enumeration agrees: one empty configuration)
            rows.append((m, lam, k, L, C))
            want.append(float(p))
    m, lam, k, L, C = (np.array(c) for c in zip(*rows))
    want = np.array(want)
    assert len(rows) > 5000
    for method in METHODS:
        got = pig_cover_pmf(m, lam, k, L, C, method=method)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=method)


def test_corrected_closed_form_is_exact_and_paper_print_is_not():
    """The sign-restored closed form equals the enumeration exactly; the printed one does not."""
    n_diff = 0
    for lam, k, L, table in _small_cases(7):
        if lam == 0 or k < 1 or k * lam > L:
            continue
        for (C, m), p in table.items():
            assert exact_cover_pmf(m, lam, k, L, C) == p, (m, lam, k, L, C)
            n_diff += paper_printed_cover_pmf(m, lam, k, L, C) != p
    assert n_diff > 0
    # e.g. L = 4, lam = 2, k = 1, C = 2: the printed expression sums to 11/3, not 1
    printed = sum(paper_printed_cover_pmf(m, 2, 1, 4, 2) for m in range(3))
    assert printed == Fraction(11, 3)
    assert sum(exact_cover_pmf(m, 2, 1, 4, 2) for m in range(3)) == 1


@settings(max_examples=60, deadline=None)
@given(lam=st.integers(0, 12), k=st.integers(0, 4), extra=st.integers(0, 30), c=st.floats(0, 1))
@example(lam=40, k=3, extra=500, c=0.4)
def test_the_simulators_pmf_vector_is_the_closed_form(lam, k, extra, c):
    """pig_reference's hoisted vector equals :func:`exact_cover_pmf` per m, also for invalid k."""
    L = max(k, 1) * lam + extra
    C = round(c * L)
    want = np.array([float(exact_cover_pmf(m, lam, k, L, C)) for m in range(lam + 1)])
    np.testing.assert_array_equal(exact_cover_pmf_vector(lam, k, L, C), want)


@pytest.mark.parametrize(
    "lam,k,L,C",
    [
        (1000, 5, 10**6, 1000),
        (1000, 5, 10**6, 1),
        (1000, 5, 10**6, 999_999),
        (50, 20, 10**6, 5000),
        (10, 1000, 10**6, 300),
        (5, 2, 10**6, 10**5),
        (300, 1, 300, 57),
        (100, 3, 300, 200),
        (60, 5, 300, 200),
        (20, 10, 300, 50),
        (7, 3, 21, 10),
    ],
)
def test_pmf_sums_to_one_and_is_finite(lam, k, L, C):
    m = np.arange(lam + 1)
    p = pig_cover_pmf(m, lam, k, L, C)
    assert np.all(np.isfinite(p)) and np.all(p >= 0) and np.all(p <= 1)
    assert abs(p.sum() - 1.0) < 1e-9
    # mean covered fraction = 1 - binom(L - k, C) / binom(L, C) (linearity over groups)
    frac = 1.0 - float(pig_cover_pmf(0, 1, k, L, C))
    assert abs((m * p).sum() / lam - frac) < 1e-8


def test_large_L_against_exact_integers():
    """lam = 1000, k = 5, L = 1e6: the alternating sum's terms reach 2^m times the result;
    the auto method (positive forms / checked signed LSE / Cauchy integral) stays accurate."""
    lam, k, L, C = 1000, 5, 10**6, 1000
    for m in (0, 1, 3, 5, 8, 12, 20, 30):
        exact = float(exact_cover_pmf(m, lam, k, L, C))
        got = float(pig_cover_pmf(m, lam, k, L, C))
        assert got == pytest.approx(exact, rel=1e-9, abs=0)
    # the plain signed log-sum-exp of the same sum is numerically useless there
    assert abs(float(pig_cover_pmf(20, lam, k, L, C, method="lse")) / float(exact_cover_pmf(20, lam, k, L, C)) - 1) > 1


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 80),
    lam_frac=st.floats(0.0, 1.0),
    k=st.integers(1, 12),
    C_frac=st.floats(0.0, 1.0),
)
@example(L=67, lam_frac=0.5, k=3, C_frac=0.4375)  # saddle at r = 1: theta = pi hits x = -1 exactly
def test_pmf_matches_exact_integers_medium(L, lam_frac, k, C_frac):
    lam = int(lam_frac * (L // k))
    C = int(round(C_frac * L))
    m = np.arange(lam + 1)
    want = np.array([float(exact_cover_pmf(int(mm), lam, k, L, C)) for mm in m])
    for method in ("auto", "fourier"):
        got = pig_cover_pmf(m, lam, k, L, C, method=method)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300, err_msg=method)


def test_pmf_conventions_and_broadcasting():
    assert pig_cover_pmf(0, 0, 3, 10, 4) == 1.0 and pig_cover_pmf(1, 0, 3, 10, 4) == 0.0
    assert pig_cover_pmf(0, 4, 3, 10, 4) == 0.0  # k lam > L
    assert pig_cover_pmf(0, 2, 0, 10, 4) == 0.0  # k < 1
    assert pig_cover_pmf(3, 2, 1, 10, 4) == 0.0  # m > lam
    assert pig_cover_pmf(-1, 2, 1, 10, 4) == 0.0
    assert pig_cover_pmf(0, 2, 1, 10, 11) == 0.0  # C > L
    assert pig_cover_pmf(2, 2, 2, 10, 10) == 1.0  # full context covers every group
    assert pig_cover_pmf(0, 2, 2, 10, 0) == 1.0  # empty span covers none
    assert isinstance(pig_cover_pmf(1, 2, 1, 10, 4), float)
    out = pig_cover_pmf(np.arange(4)[:, None], 3, np.array([1, 2, 3]), 12, 5)
    assert out.shape == (4, 3)
    np.testing.assert_allclose(out.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.exp(pig_cover_logpmf(np.arange(4), 3, 2, 12, 5)), out[:, 1])
    with pytest.raises(ValueError):
        pig_cover_pmf(0.5, 2, 1, 10, 4)
    with pytest.raises(ValueError):
        pig_cover_pmf(0, 2, 1, 10, 4, method="nope")


def test_mode_matches_exact():
    cases = [
        (lam, k, L, C)
        for L in range(1, 13)
        for lam in range(0, L + 1)
        for k in (1, 2, 3, 5)
        if k * lam <= L
        for C in range(L + 1)
    ]
    lam, k, L, C = (np.array(c) for c in zip(*cases))
    got = pig_pmf_mode(lam, k, L, C)
    want = np.array([exact_mode(*c) for c in cases])
    np.testing.assert_array_equal(got, want)
    assert pig_pmf_mode(3, 5, 10, 4) == -1  # invalid
    assert pig_pmf_mode(0, 0, 5, 2) == -1 and pig_pmf_mode(0, 1, 5, 6) == -1  # lambda = 0 but k < 1; C > L
    assert isinstance(pig_pmf_mode(2, 1, 6, 3), np.integer) and pig_pmf_mode(2, 1, 6, 3) == exact_mode(2, 1, 6, 3)
    grid = pig_pmf_mode(np.array([0, 1, 2, 3])[:, None], np.array([1, 2]), 8, 5)
    assert grid.shape == (4, 2)
    assert grid.tolist() == [[exact_mode(lam, k, 8, 5) for k in (1, 2)] for lam in (0, 1, 2, 3)]


# =============================================================================== helpers and return types
def test_chunks_keep_rows_times_width_within_the_bound():
    """_chunks splits the width-sorted order into consecutive pieces of at most 2^21 (rows x max width)
    elements, a width of 0 counted as 1; a row wider than the bound goes alone."""
    order = np.array([5, 3, 9])
    assert [c.tolist() for c in _chunks(order, np.full(3, 2**20))] == [[5, 3], [9]]  # 2 x 2^20 = 2^21 fits
    assert [c.tolist() for c in _chunks(order, np.array([1, 2**20, 2**20]))] == [[5, 3], [9]]
    assert [c.tolist() for c in _chunks(order, np.array([1, 2**21, 2**21]))] == [[5], [3], [9]]
    assert [c.tolist() for c in _chunks(np.array([4, 7]), np.array([2**22, 2**22]))] == [[4], [7]]
    assert [c.size for c in _chunks(np.arange(2**21 + 1), np.zeros(2**21 + 1, dtype=np.int64))] == [2**21, 1]
    assert list(_chunks(np.array([], dtype=np.int64), np.array([], dtype=np.int64))) == []


def test_cauchy_coefficients_against_exact_integers():
    """_log_coeff_fourier = log [x^C] (1 + x)^n0 ((1 + x)^k - 1)^m; for n0 = 0, k = 2 that is
    [x^C] x^m (2 + x)^m = binom(m, C - m) 2^(2m - C). (600, 610): phi0 keeps exp() in range
    (the coefficient is e^458); (4000, 4400): the point count follows the spread sigma ~ 20;
    (3, 4): the saddle point is r = 1, so theta = pi lands on x = -1."""
    m = np.array([600, 4000, 3])
    C = np.array([610, 4400, 4])
    want = [math.log(math.comb(mm, cc - mm) * 2 ** (2 * mm - cc)) for mm, cc in zip(m.tolist(), C.tolist())]
    got = _log_coeff_fourier(np.zeros(3), np.full(3, 2), m, C)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_lse_method_takes_the_signed_sum_even_where_a_positive_form_exists():
    """method="lse" forces the alternating sum in every case: at k = 2 it is as useless as at k = 5
    (test_large_L_against_exact_integers), while "auto" takes the positive k = 2 form."""
    exact = float(exact_cover_pmf(20, 1000, 2, 10**6, 1000))
    assert float(pig_cover_pmf(20, 1000, 2, 10**6, 1000)) == pytest.approx(exact, rel=1e-9, abs=0)
    assert abs(float(pig_cover_pmf(20, 1000, 2, 10**6, 1000, method="lse")) / exact - 1) > 1


def test_lse_maps_a_signed_sum_that_cancels_below_zero_to_probability_zero():
    """lam = 10, k = 2, L = 1020, C = 10: the alternating sum at m = 7 and 9 cancels to a non-positive
    value in floating point; "lse" gives rho~ = 0 there (its docstring), "auto" the exact value."""
    for m in (7, 9):
        assert pig_cover_logpmf(m, 10, 2, 1020, 10, method="lse") == -np.inf
        assert pig_cover_pmf(m, 10, 2, 1020, 10, method="lse") == 0.0
        exact = float(exact_cover_pmf(m, 10, 2, 1020, 10))
        assert exact > 0 and float(pig_cover_pmf(m, 10, 2, 1020, 10)) == pytest.approx(exact, rel=1e-9, abs=0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("m,lam,k,L,C", [(1, 1, 2, 5, 4), (1, 3, 3, 9, 1), (1, 4, 3, 12, 1), (5, 5, 2, 12, 11)])
def test_a_certain_cover_has_probability_exactly_one(method, m, lam, k, L, C):
    """Certain events (any 4 of 5 units hold one of 2 members; C = 1 where every unit holds a member)
    whose computed log rho~ rounds up to ~2e-16 are clipped at log 1 = 0, so rho~ is exactly 1."""
    assert exact_cover_pmf(m, lam, k, L, C) == 1
    assert pig_cover_logpmf(m, lam, k, L, C, method=method) == 0.0
    assert pig_cover_pmf(m, lam, k, L, C, method=method) == 1.0


@pytest.mark.parametrize("m,lam,k,L,C", [(600, 600, 3, 1800, 1013), (1300, 1300, 3, 3900, 1840), (1700,
                                                                                                  1700, 3, 5100, 4148),
                                         (2400, 2400, 3, 7200, 4021), (60, 61, 200, 12200, 6000),
                                         (30, 31, 1000, 31000, 15000)])
def test_cauchy_integral_at_large_m_and_large_k_against_exact_integers(m, lam, k, L, C):
    """Rows the auto method sends to the Cauchy integral: m in the thousands (phi0 keeps exp() in range;
    values down to 1e-293) and k in the hundreds (the point count follows the variance of a group of k)."""
    exact = float(exact_cover_pmf(m, lam, k, L, C))
    # approx's abs=1e-12 would pass 0
    assert float(pig_cover_pmf(m, lam, k, L, C)) == pytest.approx(exact, rel=1e-9, abs=0)


def test_fourier_method_where_the_generating_function_overflows():
    """method="fourier" at Re log G > 709 (k = 1000, the whole context but one unit observed): exactly 1."""
    assert float(pig_cover_pmf(1, 1, 1000, 1000, 999, method="fourier")) == pytest.approx(1.0, rel=1e-9)


def test_bin_density_in_small_chunks_equals_one_pass(monkeypatch):
    """pig_bin_density sums its (entry, m) terms in pieces of about _CHUNK (2^21); with pieces of 4 terms
    every boundary occurs (entries wider than a piece, many pieces) and the result is the one-pass result."""
    import raylc.dolce.pig as pig

    rng = np.random.default_rng(3)
    lam = rng.integers(0, 61, 40)  # a bin holds up to 7 values of m
    k = rng.integers(1, 4, 40)
    L = k * lam + rng.integers(0, 20, 40)
    cases = [(rng.integers(0, N_BINS, 40), lam, k, L, (rng.random(40) * L).astype(int)),
             (np.zeros(41, int), 10, 1, 100, 10)]  # 41 entries of one term each: 11 pieces
    want = [pig_bin_density(*args) for args in cases]
    monkeypatch.setattr(pig, "_CHUNK", 4)
    for args, one_pass in zip(cases, want):
        np.testing.assert_array_equal(pig_bin_density(*args), one_pass)


def test_noise_resets_to_uniform_when_its_prior_underflows():
    """One problem the oracle explains exactly (C = 3 all 1, C = 6 all 0): P_i(N) decays geometrically and
    is exactly 0 after about 1,100 EM steps; P(y|N) then has no mass to estimate from and is uniform."""
    st = CellStats.from_scores(np.array(["a"] * 20), np.array([10] * 20), np.array([3] * 10 + [6] * 10),
                               np.array([1.0] * 10 + [0.0] * 10))
    fit = PIGFit(n_steps=1100, likelihood="paper").fit_stats(st)
    assert fit.prior_oracle_[0] == 1.0
    np.testing.assert_array_equal(fit.noise_, np.full(3, 1.0 / 3.0))


def test_public_calls_emit_no_runtime_warning():
    """Divisions, logs and overflows in unselected np.where branches stay silent (np.errstate): the mode
    search, the Cauchy integral and an EM fit with a padded empty cell and a cell without 0 / IDK mass."""
    rng = np.random.default_rng(1)
    problem = np.array(["a"] * 40 + ["b"] * 20)
    s = np.concatenate([np.round(rng.uniform(0, 0.6, 20), 1), np.ones(20), np.round(rng.uniform(0.2, 0.8, 20), 1)])
    stats = CellStats.from_scores(problem, np.array([20] * 40 + [12] * 20),
                                  np.array([4] * 20 + [10] * 20 + [6] * 20), s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pig_pmf_mode(20, 10, 300, 50)
        pig_cover_pmf(np.arange(6), 5, 3, 300, 50)
        PIGFit().fit_stats(stats)


def test_scalar_arguments_give_python_floats():
    """Scalars in, a float out (a 0-d array is not a float); any array argument gives an array."""
    assert isinstance(pig_cover_logpmf(1, 2, 1, 10, 4), float)
    # k = 1 is hypergeometric: binom(2, 1) binom(8, 3) / binom(10, 4)
    assert pig_cover_logpmf(1, 2, 1, 10, 4) == pytest.approx(np.log(2 * 56 / 210), rel=1e-12)
    assert isinstance(pig_density(0.5, 2, 1, 10, 4), float)
    got = pig_cover_logpmf(np.array([1]), 2, 1, 10, 4)
    assert isinstance(got, np.ndarray) and got.shape == (1,)
    got = pig_density(0.5, np.array([2]), 1, 10, 4)
    assert isinstance(got, np.ndarray) and got.shape == (1,)
    assert isinstance(pig_density(0.5, 0, 1, 10, 4), float)
    with pytest.raises(ValueError, match=r"^method must be 'auto', 'lse' or 'fourier'$"):
        pig_cover_logpmf(0, 2, 1, 10, 4, method="nope")


# =============================================================================== rho (B.2)
def test_density_grid_points_and_paper_branches():
    L, C = 30, 7
    for lam, k in [(1, 1), (2, 3), (5, 2), (10, 3), (30, 1)]:
        m = np.arange(lam + 1)
        pm = pig_cover_pmf(m, lam, k, L, C)
        # grid branch: (lam + 1) rho~
        np.testing.assert_allclose(pig_density(m / lam, lam, k, L, C), (lam + 1) * pm, rtol=1e-12, atol=1e-300)
        # off-grid branch verbatim: (lam^2 + lam)[(b - s) rho~(a) + (s - a) rho~(b)]
        s = np.linspace(0, 1, 257)[1:-1]
        s = s[np.abs(s * lam - np.round(s * lam)) > 1e-9]
        a, b = np.floor(s * lam) / lam, np.ceil(s * lam) / lam
        ra = pig_cover_pmf(np.round(a * lam).astype(int), lam, k, L, C)
        rb = pig_cover_pmf(np.round(b * lam).astype(int), lam, k, L, C)
        want = (lam**2 + lam) * ((b - s) * ra + (s - a) * rb)
        np.testing.assert_allclose(pig_density(s, lam, k, L, C), want, rtol=1e-10, atol=1e-300)
        # continuity at the grid points, and the trapezoid integral of the approximation
        eps = 1e-9
        inner = m[1:-1] / lam
        left, right = pig_density(inner - eps, lam, k, L, C), pig_density(inner + eps, lam, k, L, C)
        np.testing.assert_allclose(left, right, atol=1e-6 * (lam + 1))
        grid = np.linspace(0, 1, 20001)
        integral = np.trapezoid(pig_density(grid, lam, k, L, C), grid)
        assert integral == pytest.approx((lam + 1) / lam * (1 - (pm[0] + pm[-1]) / 2), rel=1e-6)


def test_density_conventions():
    assert pig_density(0.3, 0, 2, 10, 4) == 1.0  # lambda = 0: flat
    assert pig_density(0.3, 6, 2, 10, 4) == 0.0  # k lam > L
    assert pig_density(1.2, 2, 2, 10, 4) == 0.0
    assert np.isnan(pig_density(np.nan, 2, 2, 10, 4))
    out = pig_density(np.array([[0.0], [0.5], [1.0]]), np.array([1, 2]), 2, 10, 4)
    assert out.shape == (3, 2)


def test_density_at_the_edges_by_hand():
    """rho = (lambda + 1) rho~ at the grid points and its interpolation between them, worked by hand."""
    # C = 0 covers no group (rho~(0) = 1); C = L covers all (rho~(lambda) = 1); lambda = 2, L = 5
    assert pig_density(0.0, 2, 1, 5, 0) == pytest.approx(3.0) and pig_density(0.25, 2, 1, 5, 0) == pytest.approx(1.5)
    assert pig_density(1.0, 2, 1, 5, 5) == pytest.approx(3.0) and pig_density(0.75, 2, 1, 5, 5) == pytest.approx(1.5)
    # k lambda = L: 2 pairs fill 4 units; of the 3 pairings x 3 windows of 2 units, 3 cover one pair
    # and 6 both: rho~ = (0, 1/3, 2/3)
    assert [pig_density(s, 2, 2, 4, 2) for s in (0.0, 0.25, 0.5, 1.0)] == pytest.approx([0.0, 0.5, 1.0, 2.0])
    # scores of another real type are read as floats
    np.testing.assert_allclose(pig_density([Fraction(1, 4), Fraction(1, 2)], 2, 2, 4, 2), [0.5, 1.0], rtol=1e-12)
    # lambda = 0 needs valid k and C as well
    assert pig_density(0.3, 0, 1, 10, 10) == 1.0 and pig_density(0.3, 0, 0, 10, 4) == 0.0
    assert pig_density(0.3, 0, 1, 10, 11) == 0.0


@settings(max_examples=80, deadline=None)
@given(L=st.integers(1, 25), lam=st.integers(0, 25), k=st.integers(1, 6), C=st.integers(0, 25), s=st.floats(0, 1))
def test_density_matches_exact(L, lam, k, C, s):
    C = min(C, L)
    assert pig_density(s, lam, k, L, C) == pytest.approx(exact_density(s, lam, k, L, C), rel=1e-10, abs=1e-300)


# =============================================================================== EM (Algorithm 2)
def _arrays(obs):
    problem = np.array([o[0] for o in obs])
    L = np.array([o[1] for o in obs])
    C = np.array([o[2] for o in obs])
    s = np.array([np.nan if o[3] is None else o[3] for o in obs])
    return problem, L, C, s


def _compare(fit: PIGFit, ref: dict):
    assert list(fit.problems_) == ref["problems"]
    assert list(fit.lam_) == ref["lam"]
    assert list(fit.k_) == ref["k"]
    np.testing.assert_allclose(fit.loglik_, ref["loglik"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fit.prior_oracle_, ref["prior_oracle"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fit.noise_, ref["noise"], rtol=1e-9, atol=1e-9)
    assert list(fit.lam_q_) == ref["lam_q"]
    want_hit = [ref["hit_rate"][p][c] for p, c in zip(fit.cells_problem_, fit.cells_C_)]
    np.testing.assert_allclose(fit.hit_rate_, want_hit, rtol=1e-9, atol=1e-9)
    # the last step's objective of every valid pair (the input of the posterior)
    pairs = fit.pairs_
    for i, want in enumerate(ref["pairs"]):
        mine = pairs["problem"] == i
        got = dict(zip(zip(pairs["lam"][mine].tolist(), pairs["k"][mine].tolist()), pairs["loglik"][mine]))
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[p] for p in want], list(want.values()), rtol=1e-9, atol=1e-9)


@st.composite
def small_tasks(draw):
    obs = []
    for p in range(draw(st.integers(1, 3))):
        L = draw(st.integers(1, 12))
        for _ in range(draw(st.integers(1, 10))):
            C = draw(st.integers(0, L))
            kind = draw(st.sampled_from(["idk", "grid", "float"]))
            if kind == "idk":
                s = None
            elif kind == "grid":
                s = draw(st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 2 / 3, 1.0]))
            else:
                s = draw(st.floats(0.0, 1.0))
            obs.append((f"q{p}", L, C, s))
    return obs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obs=small_tasks(), hit_rate=st.sampled_from(["mode", "mean"]), n_steps=st.sampled_from([1, 2, 5]))
# the C = 0 cell's scores of 1 get no oracle mass once lambda* > 0 (mode 0): line 1105's 0/0 guard
@example(obs=[("q", 2, 0, 1.0), ("q", 2, 2, 1.0), ("q", 2, 2, 1.0), ("q", 2, 1, 0.5), ("q", 2, 2, 1.0),
              ("q", 2, 0, 1.0),
              ("q", 2, 2, 1.0), ("q", 2, 1, 0.0), ("q", 2, 0, 1.0)], hit_rate="mode", n_steps=5)
def test_em_matches_literal_algorithm_2(obs, hit_rate, n_steps):
    ref = reference_pig_em(obs, n_steps=n_steps, hit_rate=hit_rate)
    fit = PIGFit(n_steps=n_steps, hit_rate=hit_rate, likelihood="paper").fit_stats(CellStats.from_scores(*_arrays(obs)))
    _compare(fit, ref)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_em_matches_literal_algorithm_2_seeded(seed):
    rng = np.random.default_rng(seed)
    obs = []
    for p in range(4):
        L = int(rng.integers(3, 16))
        lam = int(rng.integers(1, L + 1))
        for _ in range(int(rng.integers(5, 25))):
            C = int(rng.choice([0, 1, 2, 5, 10, L]) if rng.random() < 0.7 else rng.integers(0, L + 1))
            C = min(C, L)
            r = rng.random()
            s = None if r < 0.15 else (float(rng.integers(0, lam + 1)) / lam if r < 0.7 else float(rng.random()))
            obs.append((f"p{p}", L, C, s))
    _compare(PIGFit(likelihood="paper").fit_stats(CellStats.from_scores(*_arrays(obs))), reference_pig_em(obs))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obs=small_tasks(), likelihood=st.sampled_from(["score", "binned"]), hit_rate=st.sampled_from(["mode", "mean"]),
       n_steps=st.sampled_from([1, 3]))
@example(obs=[("q0", 4, 2, None), ("q0", 4, 2, 0.5), ("q0", 4, 4, 1.0), ("q0", 4, 1, 0.25), ("q1", 3, 1, 1 / 3),
              ("q1", 3, 0, None), ("q1", 3, 2, 0.95)], likelihood="binned", hit_rate="mode", n_steps=3)
def test_em_options_match_literal_algorithm_2(obs, likelihood, hit_rate, n_steps):
    """likelihood="score" / "binned": line 1108 at each observation's own score (its bin), IDK as 0."""
    ref = reference_pig_em(obs, n_steps=n_steps, hit_rate=hit_rate, likelihood=likelihood)
    fit = PIGFit(n_steps=n_steps, hit_rate=hit_rate, likelihood=likelihood)
    _compare(fit.fit_stats(CellStats.from_scores(*_arrays(obs))), ref)


@pytest.mark.parametrize("likelihood", ["score", "binned"])
def test_em_options_from_a_table_with_repeated_scores_match_literal_algorithm_2(likelihood):
    """fit() groups the table per (problem, C, score): counts above 1, IDK rows, several problems."""
    rng = np.random.default_rng(7)
    obs = []
    for p, L in enumerate((6, 9, 5)):
        for C in (0, 1, 2, 3, L):
            for _ in range(int(rng.integers(2, 6))):
                r = rng.random()
                s = None if r < 0.2 else (float(rng.choice([0.0,
                                                            0.25, 0.5, 0.9, 1.0])) if r < 0.8 else float(rng.random()))
                obs.append((f"p{p}", L, C, s))
    table = pl.DataFrame(
        {"task": "t", "problem_id": [o[0] for o in obs], "L": [o[1] for o in obs], "C": [o[2] for o in obs],
         "start": 0, "score": [o[3] for o in obs], "metric": "rouge"},
        schema_overrides={"score": pl.Float64},
    )
    fit = PIGFit(n_steps=3, likelihood=likelihood).fit(table)
    _compare(fit, reference_pig_em(obs, n_steps=3, likelihood=likelihood))


def test_score_counts_are_checked_and_may_hold_lists():
    one = (np.array(["a", "a"]), np.array([10, 10]), np.array([5, 3]))
    y = (np.array([0.5, 0.0]), np.array([0.5, 0.0]), np.array([0.0, 1.0]))
    fit = PIGFit(likelihood="score")
    lists = fit.fit_stats(CellStats(*one, *y, score_counts=(["a", "a"], [5, 3], [0.5, None], [1, 1]))).loglik_
    arrays = fit.fit_stats(CellStats(*one, *y, score_counts=(*one[::2], np.array([0.5, np.nan]), np.ones(2)))).loglik_
    np.testing.assert_array_equal(lists, arrays)
    # a score row with count 0 is no observation
    zero = fit.fit_stats(CellStats(*one, *y, score_counts=(["a"] * 3, [5, 3, 5], [0.5, None, 0.9], [1, 1, 0]))).loglik_
    np.testing.assert_array_equal(zero, arrays)
    with pytest.raises(ValueError, match=r"^score_counts arrays must be 1-D and aligned$"):
        fit.fit_stats(CellStats(*one, *y, score_counts=(one[0], one[2], np.array([0.5]), np.ones(2))))
    two_d = tuple(np.asarray(a).reshape(1, 2) for a in (one[0], one[2], [0.5, 0.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match=r"^score_counts arrays must be 1-D and aligned$"):
        fit.fit_stats(CellStats(*one, *y, score_counts=two_d))
    for stranger in (["a", "b"], ["0", "a"]):  # after the last problem; between problems
        with pytest.raises(ValueError, match=r"^score_counts holds a problem without statistics$"):
            fit.fit_stats(CellStats(*one, *y, score_counts=(np.array(stranger), one[2],
                                                            np.array([0.5, 0.0]), np.ones(2))))
    # a problem without score rows contributes nothing to its pairs' objectives: all 0, the first pair wins
    two = (np.array(["a", "b"]), np.array([10, 4]), np.array([5, 3]))
    fit.fit_stats(CellStats(*two, *y, score_counts=(["a"], [5], [0.5], [1.0])))
    assert fit.loglik_[1] == 0.0 and (fit.lam_[1], fit.k_[1]) == (0, 3)
    np.testing.assert_array_equal(fit.pairs_["loglik"][fit.pairs_["problem"] == 1], 0.0)
    with pytest.raises(ValueError, match=r"^C must hold integers, got non-integral values$"):
        fit.fit_stats(CellStats(*one, *y, score_counts=(one[0], np.array([5.5, 3.0]),
                                                        np.array([0.5, 0.0]), np.ones(2))))


def test_cell_stats_from_counts_equal_from_scores_and_merge_duplicates():
    obs, _ = simulate_pig_task(4, seed=5, L_range=(20, 40))
    problem, L, C, s = (obs[c].to_numpy() for c in ("problem_id", "L", "C", "score"))
    s = s.astype(float)
    a = PIGFit(likelihood="paper").fit_stats(CellStats.from_scores(problem, L, C, s))
    idk = np.isnan(s)
    half = np.arange(s.size) % 2 == 0  # split every cell into two rows
    rows = [
        (
            problem[mk], L[mk], C[mk], np.ones(mk.sum()),
            np.where(idk, 0, s)[mk], np.where(idk, 0, 1 - s)[mk], idk[mk].astype(float),
        )
        for mk in (half, ~half)
    ]
    problem, L, C, n, y1, y0, nidk = (np.concatenate(col) for col in zip(*rows))
    b = PIGFit(likelihood="paper").fit_stats(CellStats(problem, L, C, y1, y0, nidk, n=n))
    for attr in ("lam_", "k_", "loglik_", "prior_oracle_", "noise_", "hit_rate_", "cells_C_"):
        np.testing.assert_allclose(getattr(a, attr), getattr(b, attr), rtol=1e-12)


def test_bin_density_matches_brute_force_every_small_case():
    """pig_bin_density = N_BINS * P(m / lambda in bin b) from the enumeration (bins of
    bucketize_scores applied to m / lambda), every L <= 8; the bin masses sum to 1."""
    rows, want = [], []
    for lam, k, L, table in _small_cases():
        valid = k >= 1 and k * lam <= L
        for C in range(L + 1):
            for b in range(N_BINS):
                if not valid:
                    p = 0.0
                elif lam == 0:
                    p = 1.0
                else:
                    bins = bucketize_scores(np.arange(lam + 1) / lam)
                    p = N_BINS * float(sum(table[(C, m)] for m in range(lam + 1) if bins[m] == b))
                rows.append((b, lam, k, L, C))
                want.append(p)
    b, lam, k, L, C = (np.array(c) for c in zip(*rows))
    got = pig_bin_density(b, lam, k, L, C)
    np.testing.assert_allclose(got, np.array(want), rtol=0, atol=1e-9)
    per_case = {}
    for row, v in zip(rows, got):
        if row[1] > 0 and row[2] >= 1 and row[2] * row[1] <= row[3]:
            per_case[row[1:]] = per_case.get(row[1:], 0.0) + v / N_BINS
    assert per_case and all(abs(t - 1.0) < 1e-9 for t in per_case.values())
    assert pig_bin_density(3, 0, 1, 5, 2) == 1.0 and pig_bin_density(0, 2, 3, 5, 2) == 0.0  # lambda = 0; k lambda > L
    with pytest.raises(ValueError):
        pig_bin_density(N_BINS, 1, 1, 5, 2)


def test_fit_pig_task_frame_and_categories():
    obs, _ = simulate_pig_task(6, seed=11, L_range=(30, 80))
    problems, info = fit_pig_task(obs)
    assert problems.columns == ["task", "problem_id", "scenario", "lam", "k", "category", "loglik", "prior_oracle",
                                *UNCERTAINTY_SCHEMA]
    assert problems["problem_id"].to_list() == sorted(problems["problem_id"].to_list())
    assert set(problems["scenario"]) == {"PIG"}
    assert set(info) == {"p_noise_1", "p_noise_0", "p_noise_idk", "lam_p", "k_p", "em_steps", "em_ll_change",
                         "share_draws"}
    assert sum(info[f"p_noise_{y}"] for y in ("1", "0", "idk")) == pytest.approx(1.0)
    ladder = obs.filter((pl.col("C") > 0) & (pl.col("C") < pl.col("L")))["C"].unique().to_numpy()
    assert (info["lam_p"], info["k_p"]) == category_thresholds(ladder)
    fit = PIGFit().fit_stats(CellStats.from_scores(
        *(obs[c].to_numpy() for c in ("problem_id", "L", "C")), obs["score"].to_numpy().astype(float)))
    np.testing.assert_array_equal(problems["lam"].to_numpy(), fit.lam_)
    np.testing.assert_array_equal(problems["k"].to_numpy(), fit.k_)
    np.testing.assert_allclose(problems["loglik"].to_numpy(), fit.loglik_, rtol=1e-12)
    cats = assign_categories(fit.lam_, fit.k_, info["lam_p"], info["k_p"], fit.lam_q_)
    assert problems["category"].to_list() == list(cats)
    # the option path groups by score and agrees with PIGFit(likelihood="score") on per-observation statistics
    p2, _ = fit_pig_task(obs, likelihood="score")
    fit2 = PIGFit(likelihood="score").fit_stats(CellStats.from_scores(
        *(obs[c].to_numpy() for c in ("problem_id", "L", "C")), obs["score"].to_numpy().astype(float)
    ))
    np.testing.assert_array_equal(p2["lam"].to_numpy(), fit2.lam_)
    np.testing.assert_allclose(p2["loglik"].to_numpy(), fit2.loglik_, rtol=1e-10)
    # likewise for likelihood="binned"
    p3, _ = fit_pig_task(obs, likelihood="binned")
    fit3 = PIGFit(likelihood="binned").fit_stats(CellStats.from_scores(
        *(obs[c].to_numpy() for c in ("problem_id", "L", "C")), obs["score"].to_numpy().astype(float)
    ))
    np.testing.assert_array_equal(p3["lam"].to_numpy(), fit3.lam_)
    np.testing.assert_array_equal(p3["k"].to_numpy(), fit3.k_)
    np.testing.assert_allclose(p3["loglik"].to_numpy(), fit3.loglik_, rtol=1e-10)


@pytest.mark.parametrize(
    "fn,names",
    [
        (pig_cover_logpmf, ("m", "lam", "k", "L", "C")),
        (pig_cover_pmf, ("m", "lam", "k", "L", "C")),
        (pig_pmf_mode, ("lam", "k", "L", "C")),
        (lambda *a: pig_density(0.5, *a), ("lam", "k", "L", "C")),
        (pig_bin_density, ("b", "lam", "k", "L", "C")),
    ],
)
def test_a_non_integer_argument_is_named(fn, names):
    for i, name in enumerate(names):
        args = [1] * len(names)
        args[i] = 1.5
        with pytest.raises(ValueError, match=rf"^{name} must hold integers, got non-integral values$"):
            fn(*args)


def test_bin_density_broadcasts_and_names_the_bin_range():
    def want(b, lam, k, L, C):  # 10 P(bin b | O), the bin of m / lam in integer arithmetic
        return 10 * float(sum(exact_cover_pmf(m, lam, k, L, C) for m in range(lam + 1) if min(10 * m // lam, 9) == b))

    assert (isinstance(pig_bin_density(9, 2, 1, 4, 2), float)
            and pig_bin_density(9, 2, 1, 4, 2) == pytest.approx(want(9, 2, 1, 4, 2), rel=1e-12))
    # lambda = 2 leaves bins 1-4 and 6-8 empty; the last entry's bin (4) is one of them
    bins = np.array([0, 5, 9, 4])
    got = pig_bin_density(bins[:, None], 2, np.array([1, 2, 3]), 6, 3)
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got, [[want(b, 2, k, 6, 3) for k in (1, 2, 3)] for b in bins], rtol=1e-12)
    # lambda = 25: bins of two and three values of m
    got = pig_bin_density(np.arange(N_BINS), 25, 1, 40, 13)
    np.testing.assert_allclose(got, [want(b, 25, 1, 40, 13) for b in range(N_BINS)], rtol=1e-12)
    for b in (-1, N_BINS):
        with pytest.raises(ValueError, match=r"^bin b must lie in 0 \.\. 9$"):
            pig_bin_density(b, 2, 1, 4, 2)


def test_cell_stats_per_score_only_for_the_options_and_fit_pig_task_passes_its_options():
    obs = [("p0", 6, 0, None), ("p0", 6, 2, 0.5), ("p0", 6, 2, 0.5), ("p0", 6, 3, 1.0), ("p0", 6, 6, 1.0),
           ("p1", 5, 1, 0.0), ("p1", 5, 1, None), ("p1", 5, 2, 0.3), ("p1", 5, 5, 0.8), ("p1", 5, 3, 0.5)]
    table = pl.DataFrame(
        {"task": "t", "problem_id": [o[0] for o in obs], "L": [o[1] for o in obs], "C": [o[2] for o in obs],
         "start": 0, "score": [o[3] for o in obs], "metric": "rouge"},
        schema_overrides={"score": pl.Float64},
    )
    assert PIGFit(likelihood="paper").cell_stats(table).score_counts is None
    for likelihood in ("score", "binned"):
        problem, C, s, count = PIGFit(likelihood=likelihood).cell_stats(table).score_counts
        assert list(zip(problem, C, s.tolist(), count)) == [
            ("p0", 0, pytest.approx(np.nan, nan_ok=True), 1), ("p0", 2, 0.5, 2), ("p0", 3, 1.0, 1), ("p0", 6, 1.0, 1),
            ("p1", 1, pytest.approx(np.nan, nan_ok=True), 1), ("p1", 1, 0.0, 1), ("p1", 2, 0.3, 1), ("p1", 3, 0.5, 1),
            ("p1", 5, 0.8, 1),
        ]
    for options in ({"likelihood": "paper", "hit_rate": "mean"}, {"likelihood": "score"},
                    {"likelihood": "binned", "hit_rate": "mean"}):
        problems, info = fit_pig_task(table, n_steps=2, **options)
        ref = reference_pig_em(obs, n_steps=2, **options)
        assert info["em_steps"] == 2
        assert problems["lam"].to_list() == ref["lam"] and problems["k"].to_list() == ref["k"]
        np.testing.assert_allclose(problems["loglik"].to_numpy(), ref["loglik"], rtol=1e-9)
        np.testing.assert_allclose(problems["prior_oracle"].to_numpy(), ref["prior_oracle"], rtol=1e-9)


def test_default_hyperparameters():
    """Algorithm 2's T = 5 and hit rate, the binned likelihood (likelihood="paper" is Algorithm 2's); the
    EM runs to a tolerance only when asked, at most 1000 steps."""
    fit = PIGFit()
    assert (fit.n_steps, fit.likelihood, fit.hit_rate, fit.tol, fit.max_steps, fit.uncertainty_steps) == (
        5, "binned", "mode", 0.0, 1000, 0)


def test_input_validation():
    base = dict(task="t", problem_id="a", L=10, C=5, start=0, score=0.5, metric="rouge")
    ok = pl.DataFrame([base])
    with pytest.raises(ValueError, match="outside"):
        fit_pig_task(ok.with_columns(score=pl.lit(1.5)))
    with pytest.raises(ValueError, match="exactly one task"):
        fit_pig_task(pl.concat([ok, ok.with_columns(task=pl.lit("u"))]))
    with pytest.raises(ValueError, match="C > L"):
        fit_pig_task(ok.with_columns(C=pl.lit(11, dtype=pl.Int64), start=pl.lit(0, dtype=pl.Int64)))
    with pytest.raises(ValueError, match="missing"):
        fit_pig_task(ok.drop("metric"))
    with pytest.raises(ValueError, match="partial"):
        fit_pig_task(ok.with_columns(C=pl.lit(10, dtype=pl.Int64)))
    with pytest.raises(ValueError):
        PIGFit().fit_stats(CellStats.from_scores(np.array(["a"]), np.array([10]), np.array([5]), np.array([1.5])))
    with pytest.raises(ValueError, match="several context lengths"):
        PIGFit().fit_stats(CellStats.from_scores(np.array(["a", "a"]), np.array([10, 11]), np.array([5, 5]),
                                                 np.array([0.5, 0.5])))
    one_cell = (np.array(["a"]), np.array([10]), np.array([5]))
    with pytest.raises(ValueError, match="n must equal"):
        PIGFit().fit_stats(CellStats(*one_cell, np.array([1.0]), np.array([1.0]), np.array([0.0]), n=np.array([3.0])))
    with pytest.raises(ValueError, match="hit_rate"):
        PIGFit(hit_rate="median").fit_stats(CellStats.from_scores(np.array(["a"]), np.array([10]), np.array([5]),
                                                                  np.array([0.5])))
    with pytest.raises(ValueError, match=r"^hit_rate must be 'mode' \(paper\) or 'mean'$"):
        PIGFit(hit_rate="median").fit(ok)
    with pytest.raises(ValueError, match=r"^likelihood must be 'binned', 'paper' \(Algorithm 2\) or 'score'$"):
        PIGFit(likelihood="exact").fit(ok)
    with pytest.raises(ValueError, match="score_counts"):
        PIGFit(likelihood="score").fit_stats(CellStats(*one_cell, np.array([0.5]), np.array([0.5]), np.array([0.0]),
                                                       n=np.array([1.0])))


# =============================================================================== recovery
def _recovery(obs: pl.DataFrame, planted: pl.DataFrame, **options) -> tuple[float, float]:
    problems, info = fit_pig_task(obs, **options)
    j = problems.join(planted, on="problem_id")
    max_c = obs.filter(pl.col("C") < pl.col("L")).group_by("problem_id").agg(max_c=pl.col("C").max())
    j = j.join(max_c, on="problem_id")
    planted_cat = assign_categories(
        j["planted_lam"].to_numpy(), j["planted_k"].to_numpy(), info["lam_p"], info["k_p"], j["max_c"].to_numpy()
    )
    share = float(np.mean(planted_cat == j["category"].to_numpy()))
    rho = float(spearmanr(j["planted_lam"].to_numpy(), j["lam"].to_numpy()).statistic)
    return share, rho


@pytest.fixture(scope="module")
def recovery_data():
    """Data drawn from the PIG model itself (Eq. 6): m ~ rho~(m; lambda, k, L, C) afresh for
    every span, noise scores uniform on [0, 1] (p(x|N) = 1); seeds 1, 2 x 40 problems."""
    return [simulate_pig_task(40, seed=seed, redraw_each_observation=True, noise_kind="uniform") for seed in (1, 2)]


@pytest.fixture(scope="module")
def placement_data():
    """The realistic design: members placed once per problem, task-level Beta noise."""
    return [simulate_pig_task(40, seed=seed) for seed in (1, 2)]


# PAPER-LEVEL TARGETS: category share >= 0.75 and Spearman(lambda planted, lambda fitted) >=
# 0.95: not met by the faithful Algorithm 2 (likelihood="paper"), met by the default
# likelihood="binned" on both designs. Figures per seed
# (seeds 1, 2 here; seeds 1-6 and T = 50 in the README); asserted with a small margin.
@pytest.mark.parametrize(
    "data,options,min_share,min_rho",
    [
        # Model data, paper defaults (Algorithm 2 as printed): share 0.475 / 0.550, Spearman
        # 0.411 / 0.400. Reason: line 1108 evaluates rho at the cell-level hit rate
        # P_{i,C}(y = 1|O), whose model value E[m]/lambda = 1 - binom(L - k, C)/binom(L, C)
        # depends on k only; lambda is identified only through how concentrated rho~ is at that
        # rate, which the (lambda + 1) factor rewards, so small lambda (1, 2: nearly binary
        # scores, COW-like problems the Dip Test would route to COW) is fitted as lambda in the
        # tens (category IV) and lambda = L as ~maxC. More EM steps do not help (README).
        ("recovery_data", {"likelihood": "paper"}, 0.46, 0.36),
        # Options, measured side by side. Hit rate = expected covered
        # fraction instead of the mode: 0.450 / 0.500, Spearman 0.546 / 0.504.
        ("recovery_data", {"likelihood": "paper", "hit_rate": "mean"}, 0.43, 0.46),
        # rho at each observed score (plain mixture of Eq. 5): 0.800 / 0.675, Spearman
        # 0.754 / 0.729; lambda >= 5 is recovered well, lambda in {1, 2} still is not
        # (exact-zero scores get density (lambda + 1) rho~(0), which favours large lambda).
        ("recovery_data", {"likelihood": "score"}, 0.70, 0.70),
        # oracle and noise compared per 0.1 score bin (pig_bin_density): 1.000 / 1.000,
        # Spearman 0.998 / 1.000: the 0.75 / 0.95 targets
        ("recovery_data", {"likelihood": "binned"}, 0.75, 0.95),
        # members placed once per problem, Beta noise: 0.450 / 0.625, Spearman 0.400 / 0.356
        ("placement_data", {"likelihood": "paper"}, 0.50, 0.33),
        # 0.600 / 0.650, Spearman 0.360 / 0.453
        ("placement_data", {"likelihood": "score"}, 0.58, 0.36),
        # 1.000 / 0.975, Spearman 0.991 / 0.996
        ("placement_data", {"likelihood": "binned"}, 0.75, 0.95),
    ],
)
def test_parameter_recovery(request, data, options, min_share, min_rho):
    shares, rhos = zip(*(_recovery(obs, planted, **options) for obs, planted in request.getfixturevalue(data)))
    share, rho = float(np.mean(shares)), float(np.mean(rhos))
    print(f"PIG recovery, {data}, {options or 'paper'}: category share {shares} -> {share:.3f}; "
          f"Spearman {rhos} -> {rho:.3f}")
    assert share >= min_share
    assert rho >= min_rho
