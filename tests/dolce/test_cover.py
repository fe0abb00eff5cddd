"""pi(lambda, k; L, C) of the COW scenario (Appendix A.1) against brute-force enumeration."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from dolce_reference import brute_cover_prob, closed_form_cover_prob, placements
from hypothesis import given, settings
from hypothesis import strategies as st

from raylc.dolce import cow_cover_prob


def _all_small_cases(L_max: int = 12):
    for L in range(L_max + 1):
        for lam in range(L + 1):
            for k in range(L + 1):
                for C in range(L + 1):
                    yield lam, k, L, C


def test_exhaustive_against_enumeration_L_le_12():
    cases = np.array(list(_all_small_cases()))
    got = cow_cover_prob(cases[:, 0], cases[:, 1], cases[:, 2], cases[:, 3])
    want = np.array([float(brute_cover_prob(*map(int, c))) for c in cases])
    assert got.shape == want.shape == (len(cases),)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    # the scalar path agrees with the broadcast path
    for i in range(0, len(cases), 97):
        assert cow_cover_prob(*map(int, cases[i])) == pytest.approx(want[i], abs=1e-9)


def test_the_tests_closed_form_is_exact_L_le_12():
    """The test's own transcription of Appendix A.1 equals enumeration in exact arithmetic."""
    for lam, k, L, C in _all_small_cases(10):
        assert closed_form_cover_prob(lam, k, L, C) == brute_cover_prob(lam, k, L, C), (lam, k, L, C)


@settings(max_examples=300, deadline=None)
@given(L=st.integers(13, 3000), data=st.data())
def test_package_equals_the_closed_form_at_large_L(L, data):
    """Beyond enumeration: the package's log-space evaluation against the exact integer form."""
    lam = data.draw(st.integers(1, L))
    k = data.draw(st.integers(1, max(1, L // lam)))
    C = data.draw(st.integers(0, L))
    want = float(closed_form_cover_prob(lam, k, L, C))
    assert cow_cover_prob(lam, k, L, C) == pytest.approx(want, abs=1e-9), (lam, k, L, C)


def test_placement_count_is_stars_and_bars():
    for L in range(1, 11):
        for lam in range(1, L + 1):
            for k in range(1, L // lam + 1):
                assert len(placements(L, lam, k)) == comb(L - k * lam + k, k)


def test_conventions_and_known_values():
    assert cow_cover_prob(0, 0, 0, 0) == 1.0
    assert cow_cover_prob(0, 7, 10, 0) == 1.0  # empty evidence is always covered
    assert cow_cover_prob(3, 0, 10, 5) == 0.0  # k < 1
    assert cow_cover_prob(3, 4, 10, 9) == 0.0  # k lambda > L
    assert cow_cover_prob(3, 1, 10, 2) == 0.0  # C < lambda
    assert cow_cover_prob(3, 2, 10, 10) == 1.0  # full context
    assert cow_cover_prob(3, 2, 10, 15) == 1.0  # C > L
    # k = 1: pi = (C - lambda + 1) / (L - lambda + 1) averaged over windows, e.g. L = 5, lambda = 2, C = 3
    assert cow_cover_prob(2, 1, 5, 3) == pytest.approx(float(brute_cover_prob(2, 1, 5, 3)), abs=1e-15)
    # pi is not monotone in k: packing forces the copies to the ends
    assert cow_cover_prob(6, 1, 12, 8) == pytest.approx(3 / 7, abs=1e-12)
    assert cow_cover_prob(6, 2, 12, 8) == pytest.approx(2 / 5, abs=1e-12)
    assert brute_cover_prob(6, 2, 12, 8) == Fraction(2, 5)


def test_broadcasting_and_scalar_output():
    out = cow_cover_prob(np.arange(4)[:, None], np.array([1, 2, 3]), 20, 6)
    assert out.shape == (4, 3) and out.dtype == np.float64
    assert type(cow_cover_prob(2, 2, 20, 6)) is np.float64  # a scalar for scalars, not a 0-d array
    assert cow_cover_prob([2], 2, 20, 6).shape == (1,)
    assert np.all(out[0] == 1.0)


@pytest.mark.parametrize(("bad", "name"), [((-1, 1, 5, 2), "lam"), ((1, -1, 5, 2), "k"), ((1, 1, -5, 2), "L"),
                                          ((1, 1, 5, -2), "C"), ((1.5, 1, 5, 2), "lam"), ((1, 1, 5.5, 2), "L")])
def test_rejects_invalid_arguments_naming_them(bad, name):
    with pytest.raises(ValueError, match=rf"^{name} must "):
        cow_cover_prob(*bad)


def test_rejects_non_numbers():
    with pytest.raises(ValueError):
        cow_cover_prob("a", 1, 5, 2)


@st.composite
def large_case(draw, L_max=10**6):
    L = draw(st.integers(50, L_max))
    lam = draw(st.integers(1, L))
    k = draw(st.integers(1, L // lam))
    C = draw(st.integers(lam, L))
    return lam, k, L, C


@settings(max_examples=150, deadline=None)
@given(large_case())
def test_large_L_finite_in_range_and_monotone_in_C(case):
    lam, k, L, C = case
    Cs = np.unique(np.clip(np.array([C - 2, C - 1, C, C + 1, C + 2, L - 1, L]), lam, L))
    p = cow_cover_prob(lam, k, L, Cs)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    # gammaln of arguments ~1e6 carries ~1e-9 absolute error
    assert np.all(np.diff(p) >= -1e-8)
    assert p[-1] == 1.0


@settings(max_examples=150, deadline=None)
@given(large_case())
def test_large_L_monotone_in_k_when_not_packed(case):
    """Non-decreasing in k while at least lambda units stay free after adding a copy
    ((k + 2) lambda <= L); near full packing it can decrease (see the known-value test)."""
    lam, k, L, C = case
    ks = np.arange(1, min(L // lam - 1, k + 3) + 1)
    if ks.size < 2:
        return
    p = cow_cover_prob(lam, ks, L, C)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p) >= -1e-8)


def test_monotone_in_k_exhaustive_moderate_L():
    L = 120
    lam, k, C = np.meshgrid(np.arange(1, L + 1), np.arange(1, L + 1), np.arange(L + 1), indexing="ij")
    m = ((k + 2) * lam <= L) & (C >= lam)
    lam, k, C = lam[m], k[m], C[m]
    assert np.all(cow_cover_prob(lam, k + 1, L, C) - cow_cover_prob(lam, k, L, C) >= -1e-12)


def test_L_one_million():
    L = 10**6
    lam = np.array([1, 1, 2, 10, 1000, 10**5, 5 * 10**5, 10**6, 1, 3])
    k = np.array([1, 10**6, 5 * 10**5, 7, 3, 9, 2, 1, 1000, 333_333])
    C = np.array([1, 1, 3, 10**4, 2 * 10**5, 10**6 - 1, 9 * 10**5, 10**6, 500, 10])
    p = cow_cover_prob(lam, k, L, C)
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))
    assert p[1] == 1.0 and p[2] == 1.0 and p[7] == 1.0  # every unit is evidence / full context
    # k = 1, lambda = 1, C = 1: exactly one window of L covers the unit span
    assert p[0] == pytest.approx(1e-6, abs=1e-9)  # absolute (not relative) accuracy ~1e-9 at L = 1e6
    # lambda = 1: every window misses all k unit copies with probability binom(L - C, k) / binom(L, k)
    assert p[8] == pytest.approx(float(1 - Fraction(comb(L - 500, 1000), comb(L, 1000))), abs=1e-8)
    # exact value by rational arithmetic for one moderate case at L = 1e6
    lam0, k0, C0 = 10, 3, 1000
    w = L - C0 - k0 * lam0 + k0
    u = min(C0, 2 * lam0 - 2)
    bracket = 2 * k0 * lam0 + 2 * lam0 + w - 2 * k0 - k0 * u - 1
    num = 2 * (k0 + 1) * comb(w + lam0, k0 + 1) + (k0 - 1) * bracket * comb(w + u, k0)
    exact = 1 - Fraction(num, (k0 + 1) * comb(L - k0 * lam0 + k0, k0) * (L - C0 + 1))
    assert cow_cover_prob(lam0, k0, L, C0) == pytest.approx(float(exact), abs=1e-8)
