"""The learner across N ranks with torch FSDP2 (`fully_shard`): parameters, gradients and optimizer state
sharded; each rank runs its share of the micro-batches and the gradients are summed, so an update equals the
one-process update. gloo on CPU, NCCL on GPUs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist


def share_micro_batches(batches: Sequence[list[int]], rank: int, world: int) -> list[list[int] | None]:
    """Rank `rank`'s micro-batches (every world-th one), padded with None to the same count on every rank:
    each forward and backward of a sharded model is a collective, so ranks must run equally many (a None is
    run with weight zero)."""
    mine = list(batches[rank::world])
    return mine + [None] * (math.ceil(len(batches) / world) - len(mine))


class RankGroup:
    """This process's rank in the default process group, and the reductions the learner needs."""

    def __init__(self):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def share(self, batches: Sequence[list[int]]) -> list[list[int] | None]:
        return share_micro_batches(batches, self.rank, self.world)

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Each key summed over ranks (a key a rank lacks counts as zero there)."""
        key_lists: list = [None] * self.world
        dist.all_gather_object(key_lists, sorted(values))
        keys = sorted(set().union(*key_lists))
        total = torch.tensor([float(values.get(key, 0.0)) for key in keys], dtype=torch.float64)
        dist.all_reduce(total)
        return dict(zip(keys, total.tolist()))

    def shard(self, policy, root, per_layer: bool = True) -> None:
        """Shard `policy` in place: with `per_layer`, each decoder layer on its own and the rest (embedding,
        tied LM head, final norm) with `root`, the module whose forward the learner calls; without, all of it
        as one group at `root` (the shared-prefix forward calls every layer twice, and FSDP2 reduces a layer's
        gradient after the first of the two backward passes, so there a layer cannot be a group of its own).
        Every rank first takes rank 0's weights. FSDP averages gradients over ranks, so the learner scales each
        rank's backward by the world size (`backward_scale`): each rank's loss is its share of one sum."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        device = next(policy.parameters()).device
        mesh = init_device_mesh(device.type, (self.world,))  # the policy's device type, not the machine's default
        with torch.no_grad():
            for tensor in policy.state_dict().values():
                dist.broadcast(tensor, src=0)
        if per_layer:
            for name, module in policy.named_modules():
                if _is_decoder_layer(name, module):
                    fully_shard(module, mesh=mesh)
        fully_shard(root, mesh=mesh)

    @property
    def backward_scale(self) -> float:
        return float(self.world)

    def max(self, value: float) -> float:
        total = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(total, op=dist.ReduceOp.MAX)
        return float(total.item())

    def all_true(self, flag: bool) -> bool:
        value = torch.tensor([0.0 if flag else 1.0])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value.item() == 0.0


def _is_decoder_layer(name: str, module) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2] == "layers" and parts[-1].isdigit()
