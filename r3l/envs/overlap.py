"""Held-out tasks that are training tasks by content: the same prompt, or the same problem by the environment's own
near-duplicate key (arithmetic's numbers, operators and answer; a game's map or secret), not by their labels."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any


def training_overlap(
    held_out: Sequence[Any], training: Iterable[Any], key: Callable[[Any], Hashable]
) -> list[tuple[bool, bool]]:
    """For each held-out task (tasks have `.prompt`): (its prompt is a training prompt, its near-duplicate key is a
    training task's)."""
    prompts, keys = set(), set()
    for task in training:
        prompts.add(task.prompt)
        keys.add(key(task))
    return [(task.prompt in prompts, key(task) in keys) for task in held_out]


def overlap_counts(
    held_out: Sequence[Any], training: Iterable[Any], key: Callable[[Any], Hashable]
) -> tuple[int, int, int]:
    """(held-out tasks whose prompt is a training prompt, held-out tasks whose near-duplicate key is a training
    task's, held-out tasks)."""
    flags = training_overlap(held_out, training, key)
    return sum(exact for exact, _ in flags), sum(near for _, near in flags), len(flags)


def overlap_line(exact: int, near: int, total: int, rule: str) -> str:
    """`rule`: what the environment's near-duplicate key counts as one problem."""
    return (
        f"Held-out/training overlap: {exact} of {total} held-out problems are a training prompt; {near} of {total} "
        f"are a training problem written another way (the environment's near-duplicate key: {rule})."
    )
