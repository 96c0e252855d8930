"""R3L's group budget as pure rules: how a task's group splits into base episodes and retries, and which base
episodes the retry slots go to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def split_budget(group_size: int, base_fraction: float, reflect_retry: bool = True) -> tuple[int, int]:
    """(base episodes, retry slots) per task: `base_fraction` of the group on base episodes (at least one)."""
    if not reflect_retry:
        return group_size, 0
    base = min(group_size, max(1, round(group_size * base_fraction)))
    return base, group_size - base


def choose_retries(candidates: Sequence[T], slots: int, per_base: int = 1) -> list[T]:
    """The candidates the retry slots go to, in order: each candidate once, then again while slots remain, up
    to `per_base` times each. Slots left over stay empty (the group is smaller, never padded)."""
    chosen: list[T] = []
    for _ in range(per_base):
        for candidate in candidates:
            if len(chosen) == slots:
                return chosen
            chosen.append(candidate)
    return chosen
