"""The learner's rank group: what it asks of the processes that train together (share the micro-batches, sum the
metrics, agree on a step), with the one-process group, where each of those is the identity. The distributed group
(FSDP2 over several processes) is `r3l.distributed.fsdp.RankGroup`; the learner runs one path for both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class Ranks(Protocol):
    @property
    def backward_scale(self) -> float: ...  # each rank's loss is its share of one sum; FSDP averages over ranks

    def share(self, batches: Sequence[list[int]]) -> list[list[int] | None]: ...

    def sum(self, values: dict[str, float]) -> dict[str, float]: ...

    def max(self, value: float) -> float: ...

    def all_true(self, flag: bool) -> bool: ...

    def shard(self, policy, root, per_layer: bool = True) -> None: ...


class OneProcess:
    """The rank group of a learner alone: all micro-batches its own, sums and agreement as they are, nothing
    sharded."""

    backward_scale = 1.0

    def share(self, batches: Sequence[list[int]]) -> list[list[int] | None]:
        return list(batches)

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        return dict(values)

    def max(self, value: float) -> float:
        return value

    def all_true(self, flag: bool) -> bool:
        return flag

    def shard(self, policy, root, per_layer: bool = True) -> None:
        return None


def backward_adding_nothing(loss: torch.Tensor) -> None:
    """A backward pass whose gradients are all zero (finite even when `loss` is not): on sharded ranks every
    rank must run each backward, since FSDP reduces gradients in it."""
    (torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * 0.0).backward()
