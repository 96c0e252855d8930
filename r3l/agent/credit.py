"""R3L's pivotal credit as pure mask rules: what a retry and its base do not train (their shared prefix)."""

from __future__ import annotations

from collections.abc import Sequence


def pivotal_mask(loss_mask: Sequence[int], turn_spans: Sequence[tuple[int, int]], pivot: int) -> list[int]:
    """`loss_mask` with the first `pivot` assistant turns (the prefix a retry shares with its base) set to 0."""
    mask = list(loss_mask)
    for start, end in turn_spans[:pivot]:
        mask[start:end] = [0] * (end - start)
    return mask


def turns_only(loss_mask: Sequence[int], turn_spans: Sequence[tuple[int, int]], first_turn: int) -> list[int]:
    """A mask that trains assistant turns `first_turn`.. as `loss_mask` does, and nothing else."""
    mask = [0] * len(loss_mask)
    for start, end in turn_spans[first_turn:]:
        mask[start:end] = list(loss_mask[start:end])
    return mask
