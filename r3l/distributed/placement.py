"""Where each process of a run goes, planned from the config and the GPUs torch sees before anything loads: the
learner ranks' devices, and the rollout workers' (the CPU, seeing no GPU, or GPUs Ray hands out, never the
learner's). A layout the machine cannot hold is refused here in one line, never a rank that dies in `set_device`
while the others wait, or a worker that lands on the learner's GPU."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from r3l.config import Config, GeneratorConfig
from r3l.errors import UserError

DEDICATED_GPU_SHARE = 0.9  # of a worker's GPU share, for its vLLM engine (nothing else runs there)


@dataclass(frozen=True)
class Placement:
    """One device per learner rank (rank 0 is the training process); the rollout workers, their GPU share each
    (0: CPU workers), and for a Ray this run starts, the GPU indices it may hand them (None: Ray's cluster
    decides, and a clash with the learner is looked for once they run)."""

    learner: tuple[str, ...]
    workers: int = 0
    worker_gpus: float = 0.0
    ray_gpus: tuple[int, ...] | None = None

    @property
    def worker_device(self) -> str | None:
        if not self.workers:
            return None
        return "cuda" if self.worker_gpus else "cpu"


def rank_devices(device: str, world: int, device_count: int) -> list[str]:
    """The device of each learner rank: on CUDA, rank r on the GPU r places after the model's own (model.device
    cuda:N puts rank 0 on cuda:N); on a CPU, every rank on the CPU."""
    if not device.startswith("cuda"):
        return ["cpu"] * world
    first = int(device.partition(":")[2] or 0)
    if first + world > device_count:
        raise UserError(
            f"distributed.learner_ranks={world} needs {world} GPUs from cuda:{first}, and this machine has "
            f"{device_count}; lower distributed.learner_ranks (one rank per GPU) or set model.device=cuda:0"
        )
    return [f"cuda:{first + rank}" for rank in range(world)]


def learner_gpus(learner: Sequence[str]) -> tuple[int, ...]:
    """The GPU indices the learner ranks use (none where they are on the CPU)."""
    return tuple(int(device.partition(":")[2] or 0) for device in learner if device.startswith("cuda"))


def worker_gpu_pool(learner: tuple[str, ...], workers: int, worker_gpus: float, device_count: int) -> tuple[int, ...]:
    """The GPUs a local Ray may hand rollout workers: every GPU the learner leaves; too few is refused (a local
    Ray would otherwise hand a worker the learner's)."""
    used = set(learner_gpus(learner))
    free = tuple(index for index in range(device_count) if index not in used)
    needed = math.ceil(workers * worker_gpus - 1e-9)
    if needed > len(free):
        besides = " besides the learner's" if used else ""
        raise UserError(
            f"{workers} rollout workers need {needed} GPU(s) and this machine has {len(free)}{besides}; lower "
            "distributed.rollout_workers or worker_gpus (fractions share a GPU), or set worker_gpus=0 (CPU workers)"
        )
    return free


def plan_placement(
    device: str,
    learner_ranks: int,
    rollout_workers: int,
    worker_gpus: float,
    device_count: int,
    local_ray: bool,
    generator: str,
) -> Placement:
    """The whole plan; `device` is model.device resolved, `device_count` the GPUs torch sees."""
    learner = tuple(rank_devices(device, learner_ranks, device_count))
    if not rollout_workers:
        return Placement(learner)
    if not worker_gpus:
        if generator == "vllm" and device_count:
            raise UserError(
                "generator=vllm on rollout workers without GPUs: a CUDA build of vLLM cannot generate on the CPU; "
                "set distributed.worker_gpus (1, or a fraction), or generator=hf for CPU workers"
            )
        return Placement(learner, rollout_workers)
    pool = worker_gpu_pool(learner, rollout_workers, worker_gpus, device_count) if local_ray else None
    return Placement(learner, rollout_workers, worker_gpus, pool)


def visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_for(config: Config, device: str, device_count: int | None = None) -> Placement:
    d = config.distributed
    return plan_placement(
        device,
        d.learner_ranks,
        d.rollout_workers,
        d.worker_gpus,
        visible_gpu_count() if device_count is None else device_count,
        local_ray=d.ray_address is None,
        generator=config.generator.name,
    )


def physical_gpu_ids(indices: tuple[int, ...], visible: str | None = None) -> list[str]:
    """The machine's ids of this process's GPU indices, through CUDA_VISIBLE_DEVICES where it is set (what a
    child process, such as a Ray raylet, must be given to see the same GPUs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return [str(index) for index in indices]
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    return [ids[index] for index in indices]


def worker_config(config: Config, placement: Placement) -> Config:
    """A rollout worker's config: one process (no learner ranks), on the device Ray gives it (a CPU worker on the
    CPU, a GPU worker on the GPU(s) it sees, as cuda:0) whatever model.device the learner has; a vLLM engine on a
    GPU share of its own takes 90% of that share unless generator.engine_args says otherwise (not the colocated
    40%)."""
    device = "cpu" if placement.worker_device == "cpu" else "cuda"
    one_process = config.distributed.model_copy(update={"learner_ranks": 1, "sharded_checkpoints": False})
    update: dict = {"model": config.model.model_copy(update={"device": device}), "distributed": one_process}
    engine_args = config.generator.settings.get("engine_args") or {}
    if device == "cuda" and config.generator.name == "vllm" and "gpu_memory_utilization" not in engine_args:
        share = round(DEDICATED_GPU_SHARE * min(placement.worker_gpus, 1.0), 3)
        given = {**config.generator.model_dump(), "engine_args": {**engine_args, "gpu_memory_utilization": share}}
        update["generator"] = GeneratorConfig.model_validate(given)
    return config.model_copy(update=update)


def worker_env(placement: Placement) -> dict[str, str]:
    """A rollout worker's environment: a CPU worker sees no GPU (whatever Ray's version does with
    CUDA_VISIBLE_DEVICES for actors without GPUs)."""
    return {"CUDA_VISIBLE_DEVICES": ""} if placement.worker_device == "cpu" else {}


def colliding_workers(
    assigned: list[tuple[str, list[str]]], learner_node: str, learner_gpus: list[str]
) -> list[tuple[int, str]]:
    """(worker index, GPU id) of each worker Ray put on one of the learner's GPUs: `assigned` holds each worker's
    (node id, Ray's GPU ids), `learner_gpus` the physical ids of the learner's GPUs on `learner_node`."""
    return [
        (index, gpu)
        for index, (node, gpus) in enumerate(assigned)
        if node == learner_node
        for gpu in gpus
        if gpu in learner_gpus
    ]


def layout_lines(layout: dict) -> list[str]:
    """The start-up log's line per process: the trainer's policy and generator, each further learner rank, the
    rollout workers."""
    cuda = f"torch CUDA {layout['torch_cuda']}" if layout["torch_cuda"] else "a torch build without CUDA"
    autocast = "bf16 autocast" if layout["autocast_bf16"] else "no autocast"
    lines = [
        f"trainer: policy on {layout['device']} ({layout['policy_dtype']} weights, {autocast}; {cuda}), "
        f"generator {layout['generator']} in {layout['generator_dtype']}, built {layout['generator_built']}"
    ]
    lines += [f"learner rank {rank}: {device}" for rank, device in enumerate(layout["learner_ranks"]) if rank]
    if layout["rollout_workers"]:
        where = "CPU, seeing no GPU" if not layout["worker_gpus"] else f"{layout['worker_gpus']:g} GPU each"
        pool = f" (from GPUs {layout['ray_gpus']})" if layout["ray_gpus"] is not None else ""
        lines.append(f"rollout workers 0..{layout['rollout_workers'] - 1}: {where}{pool}")
    return lines
