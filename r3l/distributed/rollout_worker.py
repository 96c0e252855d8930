"""A rollout worker: one process (a Ray actor) with its own generator, environments and strategy, which
explores the shard of each step's batch it is given with the weights it was last sent."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


class RolloutWorker:
    def __init__(self, config: dict[str, Any], threads: int):
        import torch

        from r3l.build import build_parts
        from r3l.config import Config
        from r3l.seeding import seed_everything

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        torch.set_num_threads(threads)
        parsed = Config.model_validate(config)
        seed_everything(parsed.run.seed)
        self.parts = build_parts(parsed)
        self.parts.model = None  # the generator holds its own copy; the learner's lives in the trainer
        self.version = -1

    def ready(self) -> int:
        return os.getpid()

    def dtype(self) -> str:
        """The dtype this worker's generator runs in (the trainer sends the weights in it)."""
        return str(getattr(self.parts.generator, "dtype", "torch.float32")).removeprefix("torch.")

    def gpus(self) -> tuple[str, list[str]]:
        """(this worker's Ray node, the ids of the GPUs Ray gave it)."""
        import ray

        return ray.get_runtime_context().get_node_id(), [str(gpu) for gpu in ray.get_gpu_ids()]

    def node(self) -> str:
        """The Ray node this worker was placed on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def open_stream(
        self, host: str, port: int, rank: int, world: int, entries, timeout_s: float, device: str = "cpu"
    ) -> int:
        """Join the trainer's weight stream; `device`: this worker's GPU, cuda:0 (NCCL), or the CPU (gloo)."""
        from r3l.distributed.weight_stream import WeightStream

        self.stream = WeightStream(host, port, rank, world, entries, timeout_s, device=device)
        return rank

    def receive_weights(self) -> int:
        """The next version from the trainer's weight stream, loaded into the generator."""
        version, weights = self.stream.receive()
        return self.sync_weights(weights, version)

    def sync_weights(self, state_dict, version: int) -> int:
        self.parts.generator.sync_weights(state_dict)
        self.version = version
        return version

    def explore(self, tasks: Sequence, step: int, version: int):
        if version != self.version:
            raise RuntimeError(f"worker has weights version {self.version}, the step needs {version}")
        experiences, metrics = self.parts.strategy.explore(tasks, step)
        return experiences, metrics, self.parts.generator.stats
