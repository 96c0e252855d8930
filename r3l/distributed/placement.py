"""Where each process of a run goes, planned from the config and the GPUs torch sees before anything loads: the
learner ranks' devices, and the rollout workers' (the CPU, seeing no GPU, or GPUs Ray hands out, never the
learner's). A layout the machine cannot hold is refused here in one line, never a rank that dies in `set_device`
while the others wait, or a worker that lands on the learner's GPU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from r3l.config import Config, GeneratorConfig
from r3l.errors import UserError
from r3l.rollout.visible_devices import physical_gpu_ids

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
    engine: str | None = None  # the training process's vLLM engine: beside rank 0, on its device

    @property
    def worker_device(self) -> str | None:
        if not self.workers:
            return None
        return "cuda" if self.worker_gpus else "cpu"

    @property
    def workers_may_share_a_gpu(self) -> bool:
        """Whether Ray may put two GPU workers on one GPU (a fraction each): then no NCCL group holds them both."""
        return self.workers > 1 and 0 < self.worker_gpus < 1


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
    engine = engine_device(learner, generator)
    if not rollout_workers:
        return Placement(learner, engine=engine)
    if not worker_gpus:
        if generator == "vllm" and device_count:
            raise UserError(
                "generator=vllm on rollout workers without GPUs: a CUDA build of vLLM cannot generate on the CPU; "
                "set distributed.worker_gpus (1, or a fraction), or generator=hf for CPU workers"
            )
        return Placement(learner, rollout_workers, engine=engine)
    pool = worker_gpu_pool(learner, rollout_workers, worker_gpus, device_count) if local_ray else None
    return Placement(learner, rollout_workers, worker_gpus, pool, engine)


def engine_device(learner: tuple[str, ...], generator: str) -> str | None:
    """Where the training process's vLLM engine runs: on learner rank 0's device, in its colocated share (in a
    process of its own beside several ranks, shown only that GPU). One rank's engine runs in this process, where
    vLLM puts it on cuda:0 whatever the policy's GPU: a policy on another GPU is refused in one line."""
    if generator != "vllm":
        return None
    first = learner[0]
    if len(learner) == 1 and first.startswith("cuda") and learner_gpus(learner) != (0,):
        raise UserError(
            f"generator=vllm runs its engine in this process on cuda:0, and model.device is {first}; set "
            f"model.device=cuda:0 and CUDA_VISIBLE_DEVICES={physical_gpu_ids(learner_gpus(learner))[0]} (that GPU "
            "becomes cuda:0)"
        )
    return first


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


def worker_gpu_share(worker_gpus: float) -> float:
    """The gpu_memory_utilization of a vLLM engine on a worker's GPU share: vLLM reads it as a fraction of the whole
    GPU, so a half-GPU worker asks for 90% of its half (0.45), and two such engines fit one GPU."""
    return round(DEDICATED_GPU_SHARE * min(worker_gpus, 1.0), 3)


def worker_policy_device(placement: Placement, generator: str) -> str:
    """Where a rollout worker loads its copy of the policy: a vLLM engine builds its own copy on the GPU from it,
    so a vLLM worker keeps it on the CPU (on its GPU it would hold memory vLLM's start-up check counts as taken);
    an HF generator samples with it, on the worker's GPU (its cuda:0) or the CPU."""
    if placement.worker_device == "cpu" or generator == "vllm":
        return "cpu"
    return "cuda"


def worker_config(config: Config, placement: Placement) -> Config:
    """A rollout worker's config: one process (no learner ranks), on the device Ray gives it (a CPU worker on the
    CPU, a GPU worker on the GPU(s) it sees, as cuda:0) whatever model.device the learner has; a vLLM engine on a
    GPU share of its own takes 90% of that share unless generator.engine_args says otherwise (not the colocated
    40%), in the dtype it would have beside a policy on that GPU, built from a policy copy kept on the CPU."""
    device = worker_policy_device(placement, config.generator.name)
    one_process = config.distributed.model_copy(update={"learner_ranks": 1, "sharded_checkpoints": False})
    update: dict = {"model": config.model.model_copy(update={"device": device}), "distributed": one_process}
    if placement.worker_device == "cuda" and config.generator.name == "vllm":
        engine_args = config.generator.settings.get("engine_args") or {}
        given = config.generator.model_dump()
        if "gpu_memory_utilization" not in engine_args:
            given["engine_args"] = {**engine_args, "gpu_memory_utilization": worker_gpu_share(placement.worker_gpus)}
        if given.get("dtype", "auto") == "auto":  # resolved for the GPU, not for the CPU the policy copy is on
            given["dtype"] = "bfloat16" if worker_gpus_take_bf16() else "float32"
        update["generator"] = GeneratorConfig.model_validate(given)
    return config.model_copy(update=update)


def worker_gpus_take_bf16() -> bool:
    """Whether the workers' GPUs compute in bf16 natively (judged by this machine's first GPU where it has one;
    a machine without one, a cluster's driver, assumes a GPU from Ampere on)."""
    import torch

    from r3l.models.precision import native_bf16

    return not torch.cuda.is_available() or native_bf16(torch.device("cuda", 0))


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
