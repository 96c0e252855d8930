"""Intervals for a held-out success rate: Wilson score intervals on success counts, pooled over seeds."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

Z_95 = 1.959964  # two-sided 95% quantile of the standard normal

Counts = tuple[int, int]  # (successes, tasks evaluated)


def wilson_interval(successes: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion: inside [0, 1] by construction, and sensible at 0 and
    at `total` successes, where the normal approximation collapses to a point. No tasks: [0, 1]."""
    if total <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= total:
        raise ValueError(f"{successes} successes out of {total}")
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def pooled(counts: Sequence[Counts]) -> tuple[float, float, float] | None:
    """(success rate, low, high) of the successes and tasks summed over runs (the 95% Wilson interval);
    None without any evaluated task."""
    successes, total = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if total <= 0:
        return None
    low, high = wilson_interval(successes, total)
    return successes / total, low, high


def pooled_before(counts: Sequence[Counts]) -> tuple[float, float, float] | None:
    """`pooled` for the evaluations before training. Every seed of a config starts from the same model, so
    seeds whose evaluations agree exactly repeated one evaluation (greedy decoding on the same tasks): counted
    once, they do not narrow the interval. Evaluations that differ are pooled."""
    if counts and len(set(counts)) == 1:
        return pooled(counts[:1])
    return pooled(counts)


def estimate(
    values: Sequence[float],
    counts: Sequence[Counts | None],
    pool: Callable[[Sequence[Counts]], tuple[float, float, float] | None] = pooled,
) -> tuple[float, float, float] | None:
    """(success, low, high) of several runs' evaluations: `pool` of their counts when every run has them;
    otherwise the mean success with NaN bounds (an interval is not invented). None without any value."""
    if not values:
        return None
    known = [c for c in counts if c is not None]
    if len(known) == len(counts) and (interval := pool(known)) is not None:
        return interval
    return sum(values) / len(values), math.nan, math.nan
