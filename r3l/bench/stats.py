"""Pure summaries of repeated measurements: min/median/max, paired ratios, and the equal-work check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median


def spread(values: Sequence[float]) -> dict[str, float]:
    """min, median and max of `values`."""
    if not values:
        raise ValueError("no measurements to summarise")
    return {"min": float(min(values)), "median": float(median(values)), "max": float(max(values))}


def spread_cell(figures: dict[str, float], fmt: str) -> str:
    """A table cell "median [min, max]" of a `spread`, each formatted by `fmt` (e.g. ".1f")."""
    return f"{figures['median']:{fmt}} [{figures['min']:{fmt}}, {figures['max']:{fmt}}]"


def median_ratio(numerator: dict[str, float], denominator: dict[str, float]) -> float:
    """The ratio of two `spread`s' medians (a zero denominator counts as 1e-9)."""
    return numerator["median"] / max(denominator["median"], 1e-9)


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Ratio of each repeat's pair (A B measured back to back), so slow spells of a shared machine cancel."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} against {len(denominators)} measurements cannot be paired")
    return [a / b for a, b in zip(numerators, denominators)]


@dataclass(frozen=True)
class Workload:
    """What one side was asked to do and what it did, summed over the measured steps."""

    settings: dict[str, object]  # prompts, group size, max new tokens, temperature, dtype, updates, micro-batch
    prompt_ids: tuple[tuple[int, ...], ...]
    completions: int
    generated_tokens: int
    trained_tokens: int


def equal_work_problems(a: Workload, b: Workload, token_tolerance: float) -> list[str]:
    """Why `a` and `b` are not the same work (empty when they are).

    Settings, prompts (token for token) and completion counts must match exactly; generated and trained
    token totals are sampled, so they must agree within `token_tolerance` (relative to the larger).
    """
    problems = [
        f"{key}: {a.settings.get(key)!r} vs {b.settings.get(key)!r}"
        for key in sorted(set(a.settings) | set(b.settings))
        if a.settings.get(key) != b.settings.get(key)
    ]
    if a.prompt_ids != b.prompt_ids:
        differing = sum(x != y for x, y in zip(a.prompt_ids, b.prompt_ids)) + abs(len(a.prompt_ids) - len(b.prompt_ids))
        problems.append(f"prompt tokens differ in {differing} of {max(len(a.prompt_ids), len(b.prompt_ids))} prompts")
    if a.completions != b.completions:
        problems.append(f"completions: {a.completions} vs {b.completions}")
    for name in ("generated_tokens", "trained_tokens"):
        x, y = getattr(a, name), getattr(b, name)
        if abs(x - y) > token_tolerance * max(x, y, 1):
            problems.append(f"{name}: {x} vs {y} (more than {token_tolerance:.0%} apart)")
    return problems


def relative_difference(x: float, y: float) -> float:
    """|x - y| relative to the larger of the two (0 when both are 0)."""
    return abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) > 0 else 0.0
