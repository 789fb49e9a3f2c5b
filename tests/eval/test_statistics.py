"""Wilson and Newcombe intervals against published values and an independent implementation (scipy)."""

from __future__ import annotations

import math

import pytest

from vlarl_cli.training.evaluation import newcombe_interval, wilson_interval


def test_wilson_published_example() -> None:
    # Newcombe 1998 (Stat. Med. 17:857), Table I: 81/263 -> Wilson score interval 0.2553 to 0.3662.
    lo, hi = wilson_interval(81, 263)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)


def test_wilson_hand_computed_small_n() -> None:
    # 0/10 and 10/10 by hand with z = 1.96: z^2 = 3.8416, upper(0/10) = z^2/n / (1 + z^2/n) = 0.27754...
    z2 = 1.96**2
    expected_hi = (z2 / 10) / (1 + z2 / 10)
    assert wilson_interval(0, 10) == pytest.approx((0.0, expected_hi), abs=1e-12)
    assert wilson_interval(10, 10) == pytest.approx((1 - expected_hi, 1.0), abs=1e-12)
    # 1/2: centre 0.5, half = z/(1+z^2/2) * sqrt(1/8 + z^2/16)
    half = 1.96 / (1 + z2 / 2) * math.sqrt(0.25 / 2 + z2 / 16)
    assert wilson_interval(1, 2) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-12)


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (3, 7), (25, 50), (49, 50), (0, 50), (137, 500), (500, 500)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    from scipy.stats import binomtest, norm

    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    ours = wilson_interval(k, n, z=float(norm.ppf(0.975)))
    assert ours == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_wilson_edge_cases() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


@pytest.mark.parametrize("a,b,expected", [
    # Newcombe 1998 (Stat. Med. 17:873), Table II, method 10 (hybrid score), examples (a), (b), (d): p1 - p2 there
    # is our B - A.
    ((48, 80), (56, 70), (0.0524, 0.3339)),
    ((3, 10), (9, 10), (0.1705, 0.8090)),
    ((0, 29), (5, 56), (-0.0381, 0.1926)),
])
def test_newcombe_published_examples(a: tuple[int, int], b: tuple[int, int], expected: tuple[float, float]) -> None:
    d, lo, hi = newcombe_interval(a[0], a[1], b[0], b[1])
    assert d == pytest.approx(b[0] / b[1] - a[0] / a[1])
    assert (round(lo, 4), round(hi, 4)) == expected


def test_newcombe_antisymmetric() -> None:
    d, lo, hi = newcombe_interval(12, 50, 30, 50)
    d2, lo2, hi2 = newcombe_interval(30, 50, 12, 50)
    assert (d2, lo2, hi2) == pytest.approx((-d, -hi, -lo), abs=1e-12)
