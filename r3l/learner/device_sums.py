"""The learner's metric sums, kept as tensors on the device through an update and read to the host at once: on
a GPU each read of a value waits for every kernel queued before it, so a read per micro-batch stalls the learner."""

from collections.abc import Mapping
from typing import Any

import torch

Sums = dict[str, Any]  # name -> a float or a 0-dim tensor on the learner's device


def host_floats(values: list[Any]) -> list[float]:
    """`values` (floats and 0-dim tensors) as floats, the tensors read in one transfer."""
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    read = iter(torch.stack([t.detach().float() for t in tensors]).tolist() if tensors else [])
    return [next(read) if isinstance(value, torch.Tensor) else float(value) for value in values]


def sums_on_host(sums: Mapping[str, Any]) -> dict[str, float]:
    """Every sum as a float, read in one transfer."""
    return dict(zip(sums, host_floats(list(sums.values())), strict=True))
