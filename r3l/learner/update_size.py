"""How much an update moved the weights: the share of weights it changed and the RMS of the change against the
weights' RMS, measured on a fixed sample of each trainable parameter's elements (chosen once, so it costs a few
small gathers a step even at 7B). An update that changes almost nothing is named with its likely cause: bf16
weights round away an Adam step below half their resolution (2^-9 of a weight); in float32 an lr far below the
weights' RMS does the same (2^-24).

Sharded (FSDP2) parameters are sampled in each rank's local shard; the learner sums the counts over ranks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

SAMPLED_PER_PARAMETER = 256  # elements watched in each parameter (all of a smaller one)
SMALL_CHANGED_SHARE = 0.1  # below it, a finite update with a gradient is warned about
LOW_PRECISION = (torch.bfloat16, torch.float16)


def changed_share(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """The share of elements whose value differs (0-dim float32)."""
    return (before != after).float().mean()


def relative_rms(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """RMS of the change over RMS of the weights before it (0-dim float32; inf for all-zero weights)."""
    before32 = before.float()
    return (after.float() - before32).pow(2).mean().sqrt() / before32.pow(2).mean().sqrt()


def update_sums(before: torch.Tensor, after: torch.Tensor) -> dict[str, Any]:
    """What `changed_share` and `relative_rms` are made of, as sums that add over parameters and ranks: 0-dim
    tensors not yet read (a read waits for the device) and the element count."""
    before32 = before.float()
    return {
        "elements": float(before.numel()),
        "changed": (before != after).float().sum(),
        "delta_sq": (after.float() - before32).pow(2).sum(),
        "weight_sq": before32.pow(2).sum(),
    }


def update_metrics(sums: Mapping[str, float], lr: float) -> dict[str, float]:
    """From summed `update_sums` (nothing without elements): `update/changed_share`, `update/relative_rms` and
    `update/lr_over_weight_rms` (the learning rate against the sampled weights' RMS)."""
    if sums.get("elements", 0.0) <= 0:
        return {}
    metrics = {"update/changed_share": sums["changed"] / sums["elements"]}
    if sums.get("weight_sq", 0.0) > 0:
        metrics["update/relative_rms"] = (sums["delta_sq"] / sums["weight_sq"]) ** 0.5
        metrics["update/lr_over_weight_rms"] = lr / (sums["weight_sq"] / sums["elements"]) ** 0.5
    return metrics


def local_tensor(parameter: torch.Tensor) -> torch.Tensor:
    """A parameter's elements on this rank: an FSDP2 (DTensor) parameter's local shard, else the parameter."""
    data = parameter.detach()
    return data.to_local() if hasattr(data, "to_local") else data


def sample_indices(size: int, count: int, seed: int) -> torch.Tensor:
    """`count` element indices in [0, size) drawn with a fixed seed (all of them when size <= count); drawn with
    replacement, so that a parameter of billions of elements costs no permutation of them."""
    if size <= count:
        return torch.arange(size)
    return torch.randint(0, size, (count,), generator=torch.Generator().manual_seed(seed))


class WeightSample:
    """A fixed random sample of each trainable parameter's (local) elements, read before and after an update.
    Indices are drawn once per parameter (a fixed seed, so every run watches the same elements) and drawn again
    only if a parameter's local size changes."""

    def __init__(self, parameters: Iterable[torch.Tensor], per_parameter: int = SAMPLED_PER_PARAMETER, seed: int = 0):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.per_parameter = per_parameter
        self.seed = seed
        self._indices: dict[int, tuple[int, torch.Tensor]] = {}  # parameter -> (its local size, sampled indices)

    @property
    def low_precision(self) -> bool:
        """Whether some sampled parameter is kept in bf16/fp16."""
        return any(p.dtype in LOW_PRECISION for p in self.parameters)

    def _flat_sample(self, index: int, parameter: torch.Tensor) -> torch.Tensor | None:
        flat = local_tensor(parameter).reshape(-1)
        if flat.numel() == 0:  # an empty shard on this rank
            return None
        size, chosen = self._indices.get(index, (-1, None))
        if chosen is None or size != flat.numel() or chosen.device != flat.device:
            chosen = sample_indices(flat.numel(), self.per_parameter, self.seed + index).to(flat.device)
            self._indices[index] = (flat.numel(), chosen)
        return flat.index_select(0, chosen)

    def read(self) -> torch.Tensor | None:
        """The sampled elements, one float32 vector (None when this rank holds none)."""
        pieces = [self._flat_sample(i, p) for i, p in enumerate(self.parameters)]
        kept = [piece.float() for piece in pieces if piece is not None]
        return torch.cat(kept) if kept else None

    def sums(self, before: torch.Tensor | None) -> dict[str, Any]:
        """`update_sums` between `before` (a `read` before the update) and the elements now."""
        after = self.read()
        if before is None or after is None:
            return {}
        return update_sums(before, after)


def update_size_warning(metrics: Mapping[str, float], threshold: float = SMALL_CHANGED_SHARE) -> str | None:
    """One line when a finite update with a nonzero gradient changed under `threshold` of the sampled weights,
    naming the likely cause; None otherwise."""
    share = metrics.get("update/changed_share")
    if share is None or share >= threshold or metrics.get("nonfinite_update") or not metrics.get("grad_norm"):
        return None
    if metrics.get("update/stochastic_rounding"):  # a weight moves by a whole bf16 step with the update's odds:
        return None  # few change in one update, and the update is kept on average (r3l/learner/optimizer.py)
    lr, ratio = metrics.get("lr", 0.0), metrics.get("update/lr_over_weight_rms")
    if metrics.get("update/low_precision"):
        cause = (
            f"the trainable weights are bf16/fp16, and an Adam step of about lr ({lr:.2g}) below half their "
            f"resolution (2^-9 of a weight) rounds away; keep float32 master weights"
        )
    elif ratio is not None and ratio < 1e-6:
        cause = f"lr ({lr:.2g}) is tiny against the weights' RMS (lr/RMS {ratio:.2g}): the step rounds away in float32"
    else:
        cause = "most sampled weights got no step: frozen or unused parameters, or gradients that are all zero"
    return f"the update changed {share:.1%} of the sampled weights: {cause}"
