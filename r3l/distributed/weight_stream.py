"""Weights from the trainer to the rollout workers as a stream over a process group of their own: the
version first, then the tensors in buckets (same dtype, up to `bucket_bytes`), broadcast from the trainer.
gloo with CPU tensors, or NCCL with GPU tensors where the trainer and every worker are on GPUs (`stream_device`);
the group is its own (a TCPStore and a ProcessGroup object), so it lives beside the learner ranks' default
group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

BUCKET_BYTES = 64 << 20


@dataclass(frozen=True)
class Entry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def bytes(self) -> int:
        return max(1, torch.Size(self.shape).numel()) * torch.empty((), dtype=self.dtype).element_size()


def manifest(state_dict: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> list[Entry]:
    """What is sent, in order (`dtype`: what floating-point tensors are cast to before sending)."""
    return [
        Entry(name, tuple(tensor.shape), dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype)
        for name, tensor in state_dict.items()
    ]


def plan_buckets(entries: Sequence[Entry], bucket_bytes: int = BUCKET_BYTES) -> list[list[int]]:
    """Consecutive entries of one dtype, up to `bucket_bytes` a bucket (a larger tensor is a bucket alone)."""
    buckets: list[list[int]] = []
    size = 0
    for index, entry in enumerate(entries):
        if buckets and entries[buckets[-1][0]].dtype == entry.dtype and size + entry.bytes <= bucket_bytes:
            buckets[-1].append(index)
            size += entry.bytes
        else:
            buckets.append([index])
            size = entry.bytes
    return buckets


def stream_device(trainer_device: str, workers_on_gpus: bool, shared_gpus: bool = False) -> str:
    """Where the stream's buffers live at the workers' end: a worker's own GPU (NCCL; a worker sees its GPU as
    cuda:0) only where the trainer's policy and every worker are on GPUs and no two workers may share one, else
    the CPU (gloo). NCCL refuses two ranks of one communicator on one GPU, which fractional worker_gpus allow."""
    return "cuda:0" if trainer_device.startswith("cuda") and workers_on_gpus and not shared_gpus else "cpu"


def end_device(device: str) -> torch.device:
    """The device of one end, with its index: "cuda" alone is this process's current GPU (torch.cuda.set_device
    and NCCL take indexed devices only)."""
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return resolved


class WeightStream:
    """One end of the stream: rank 0 sends (the trainer), ranks 1..N receive (the workers)."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world: int,
        entries: Sequence[Entry],
        timeout_s: float,
        bucket_bytes: int = BUCKET_BYTES,
        device: str = "cpu",
    ):
        """`device`: this end's buffers, "cpu" (gloo) or a CUDA device (NCCL; every end on CUDA)."""
        timeout = timedelta(seconds=timeout_s)
        self.device = end_device(device)
        self.store = dist.TCPStore(host, port, world, is_master=rank == 0, timeout=timeout)
        self.group: Any
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            options = dist.ProcessGroupNCCL.Options()  # absent from CPU builds of torch: reached on CUDA only
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(self.store, rank, world, options)
        else:
            self.group = dist.ProcessGroupGloo(self.store, rank, world, timeout)
        self.rank = rank
        self.entries = list(entries)
        self.buckets = plan_buckets(self.entries, bucket_bytes)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self.group.broadcast([tensor], dist.BroadcastOptions()).wait()  # type: ignore[attr-defined]  # not in torch's stubs

    def send(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        self._broadcast(torch.tensor([version], dtype=torch.int64, device=self.device))
        for bucket in self.buckets:
            entries = [self.entries[i] for i in bucket]
            flat = torch.cat([state_dict[e.name].detach().to(self.device, e.dtype).reshape(-1) for e in entries])
            self._broadcast(flat)

    def receive(self) -> tuple[int, dict[str, torch.Tensor]]:
        version = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._broadcast(version)
        weights: dict[str, torch.Tensor] = {}
        for bucket in self.buckets:
            entries = [self.entries[i] for i in bucket]
            flat = torch.empty(
                sum(torch.Size(e.shape).numel() for e in entries), dtype=entries[0].dtype, device=self.device
            )
            self._broadcast(flat)
            offset = 0
            for entry in entries:
                count = torch.Size(entry.shape).numel()
                weights[entry.name] = flat[offset : offset + count].view(entry.shape)
                offset += count
        return int(version.item()), weights
