"""Where each process of a run goes: the learner ranks' devices and the rollout workers' (CPU, or GPUs Ray hands
out, never the learner's), planned from the config and the number of GPUs torch sees, before anything starts.
A layout that cannot work is refused here in one line (UserError) instead of hanging in init_process_group or
waiting on a placement group.

Pure functions of (settings, device count); `visible_gpu_count` and `physical_gpu_ids` read the machine."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch

from r3l.config import Config
from r3l.errors import UserError


@dataclass(frozen=True)
class Placement:
    """The planned devices: one per learner rank (rank 0 is the training process), the rollout workers' kind
    ("cpu", or "cuda" for a GPU Ray assigns), and, for a Ray this run starts, the GPU indices it may hand out."""

    learner: tuple[str, ...]
    worker_device: str | None = None  # None: no rollout workers
    workers: int = 0
    worker_gpus: float = 0.0
    ray_gpus: tuple[int, ...] | None = None  # a local Ray's GPUs (this process's indices); None: Ray decides
    notes: tuple[str, ...] = field(default=())

    def record(self) -> dict:
        """What summary.json keeps of the plan."""
        return {
            "learner_ranks": list(self.learner),
            "rollout_workers": self.workers,
            "worker_device": self.worker_device,
            "worker_gpus": self.worker_gpus,
            "ray_gpus": list(self.ray_gpus) if self.ray_gpus is not None else None,
        }


def learner_devices(device: torch.device, ranks: int, device_count: int) -> tuple[str, ...]:
    """The device of each learner rank: all on the CPU (gloo), or rank r on cuda:(N + r) for model.device
    cuda:N (one GPU each, NCCL); refused when torch sees too few GPUs."""
    if device.type != "cuda":
        return (str(device),) * ranks
    first = device.index or 0
    if first + ranks > device_count:
        wanted = f"cuda:{first}" if ranks == 1 else f"cuda:{first}..cuda:{first + ranks - 1}"
        raise UserError(
            f"distributed.learner_ranks={ranks} needs {wanted} (one GPU per rank) but torch sees "
            f"{device_count} GPU(s); lower distributed.learner_ranks, or use model.device=cpu (gloo ranks)"
        )
    return tuple(f"cuda:{first + rank}" for rank in range(ranks))


def worker_gpu_pool(learner: tuple[str, ...], workers: int, worker_gpus: float, device_count: int) -> tuple[int, ...]:
    """The GPUs a local Ray may give rollout workers: every GPU the learner does not use; refused when they are
    fewer than the workers ask for (a local Ray would otherwise hand them the learner's)."""
    used = {int(device.split(":")[1]) for device in learner if device.startswith("cuda:")}
    free = tuple(index for index in range(device_count) if index not in used)
    needed = math.ceil(workers * worker_gpus - 1e-9)
    if needed > len(free):
        besides = " besides the learner's" if used else ""
        raise UserError(
            f"{workers} rollout workers need {needed} GPU (the cluster has {len(free)}{besides}); lower "
            "distributed.rollout_workers or worker_gpus (fractions share a GPU), or use worker_gpus=0 (CPU workers)"
        )
    return free


def plan_placement(
    device: torch.device,
    learner_ranks: int,
    rollout_workers: int,
    worker_gpus: float,
    device_count: int,
    local_ray: bool,
    generator: str = "hf",
) -> Placement:
    """The whole plan (see Placement); `device` is model.device resolved, `device_count` the GPUs torch sees."""
    learner = learner_devices(device, learner_ranks, device_count)
    if not rollout_workers:
        if generator == "vllm" and learner_ranks > 1:
            raise UserError(
                "generator=vllm with distributed.learner_ranks > 1 in one process cannot start: vLLM's in-process "
                "engine takes the default process group the learner ranks need; explore on rollout workers "
                "(distributed.rollout_workers), or use generator=hf, or learner_ranks=1"
            )
        return Placement(learner)
    if not worker_gpus:
        if generator == "vllm" and device_count:
            raise UserError(
                "generator=vllm on rollout workers without GPUs: a CUDA build of vLLM cannot generate on the CPU; "
                "set distributed.worker_gpus (1, or a fraction), or use generator=hf for CPU workers"
            )
        return Placement(learner, "cpu", rollout_workers, 0.0)
    pool = worker_gpu_pool(learner, rollout_workers, worker_gpus, device_count) if local_ray else None
    return Placement(learner, "cuda", rollout_workers, worker_gpus, pool)


def layout_record(
    placement: Placement,
    device: torch.device,
    policy_dtype: str,
    autocast: bool,
    generator: str,
    generator_dtype: str,
    deferred: bool,
    torch_cuda: str | None,
) -> dict:
    """The resolved device, dtype and placement of every process (start-up log and summary.json)."""
    return {
        "device": str(device),
        "torch_cuda": torch_cuda,
        "policy_dtype": policy_dtype,
        "autocast_bf16": autocast,
        "generator": generator,
        "generator_dtype": generator_dtype,
        "generator_built": "at first use" if deferred else "at start",
        **placement.record(),
    }


def layout_lines(record: dict) -> list[str]:
    """One line per process (the trainer's policy and generator, each further learner rank, the workers)."""
    cuda = f"torch CUDA {record['torch_cuda']}" if record["torch_cuda"] else "a torch build without CUDA"
    autocast = "bf16 autocast" if record["autocast_bf16"] else "no autocast"
    lines = [
        f"trainer: policy on {record['device']} ({record['policy_dtype']} weights, {autocast}; {cuda}), "
        f"generator {record['generator']} in {record['generator_dtype']}, built {record['generator_built']}"
    ]
    lines += [f"learner rank {rank}: {device}" for rank, device in enumerate(record["learner_ranks"]) if rank]
    if record["rollout_workers"]:
        where = "cpu" if record["worker_device"] == "cpu" else f"{record['worker_gpus']:g} GPU each"
        pool = f" (GPUs {record['ray_gpus']})" if record["ray_gpus"] is not None else ""
        lines.append(f"rollout workers 0..{record['rollout_workers'] - 1}: {where}{pool}")
    return lines


def visible_gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_for(config: Config, device: torch.device, device_count: int | None = None) -> Placement:
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


DEDICATED_GPU_SHARE = 0.9  # of a worker's GPU share, for its vLLM engine (nothing else trains there)


def worker_config(config: Config, placement: Placement) -> Config:
    """A rollout worker's config: the device Ray gave it (a CPU worker on the CPU; a GPU worker sees only its
    own GPU(s), as cuda:0), whatever model.device the learner was given; a vLLM engine on a GPU share of its own
    takes 90% of that share unless generator.engine_args says otherwise (not the colocated 40%)."""
    device = "cpu" if placement.worker_device == "cpu" else "cuda"
    update: dict = {"model": config.model.model_copy(update={"device": device})}
    engine_args = config.generator.engine_args
    if device == "cuda" and config.generator.name == "vllm" and "gpu_memory_utilization" not in engine_args:
        share = round(DEDICATED_GPU_SHARE * min(placement.worker_gpus, 1.0), 3)
        update["generator"] = config.generator.model_copy(
            update={"engine_args": {**engine_args, "gpu_memory_utilization": share}}
        )
    return config.model_copy(update=update)


def worker_env(placement: Placement) -> dict[str, str]:
    """Environment of a rollout worker: a CPU worker sees no GPU (whatever Ray's version does with
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
