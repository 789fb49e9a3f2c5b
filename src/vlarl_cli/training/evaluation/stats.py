"""Confidence intervals of success rates: Wilson for one rate, Newcombe for the difference of two.

Wilson score interval (Wilson 1927, JASA 22:209) for one rate; for the difference of two rates
(:func:`vlarl_cli.training.evaluation.compare`) Newcombe's hybrid score interval, his method 10 (Newcombe
1998, Stat. Med. 17:873), significant when it excludes 0. Trials of two checkpoints start from the same
init states, but their outcomes are not paired tightly enough (sampling noise, different trajectories)
for McNemar to be the safer default.
"""

from __future__ import annotations

import math

Z95 = 1.96


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927).

    centre = (p + z^2 / 2n) / (1 + z^2 / n), half width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2).
    Unlike the normal approximation it stays inside [0, 1] and is not degenerate at 0/n or n/n, which is
    exactly where small LIBERO evaluations land. ``n == 0`` gives the uninformative (0, 1).
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clamp rounding noise only (the exact interval is within [0, 1])
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """Difference ``p2 - p1`` and its Newcombe hybrid score interval (Newcombe 1998, method 10).

    With Wilson limits (l_i, u_i) of each rate: lower = d - sqrt((p2 - l2)^2 + (u1 - p1)^2),
    upper = d + sqrt((u2 - p2)^2 + (p1 - l1)^2), d = p2 - p1.

    Returns:
        (difference, lower, upper).
    """
    if n1 == 0 or n2 == 0:
        return float("nan"), -1.0, 1.0
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, z)
    l2, u2 = wilson_interval(k2, n2, z)
    d = p2 - p1
    return d, d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
