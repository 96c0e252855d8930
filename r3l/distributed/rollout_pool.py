"""The trainer's side of rollout workers: starts them as Ray actors, sends each the policy's weights after
every update (with a version number) and splits each step's batch across them (`distributed.rollout_workers`)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from r3l.build import resolve_device
from r3l.config import Config
from r3l.distributed.placement import (
    Placement,
    colliding_workers,
    learner_gpus,
    plan_for,
    worker_config,
    worker_env,
)
from r3l.distributed.rollout_worker import RolloutWorker
from r3l.distributed.sharding import merge_shard_metrics, moved_twins, twin_shards
from r3l.errors import RunStopped, UserError
from r3l.logging import console
from r3l.rollout.visible_devices import environment_while, physical_gpu_ids

if TYPE_CHECKING:
    from r3l.distributed.weight_stream import WeightStream


@dataclass
class Exploration:
    """A batch being explored: its shards of tasks, the step, the weights version it was sent with."""

    shards: list[list]
    step: int
    version: int
    futures: list[Any]
    workers: list[Any]  # who was given each shard (a worker replaced since is not replaced again)
    moved_twins: int = 0  # tasks put beside a twin (same prompt) on another worker than their contiguous shard


class RolloutPool:
    def __init__(self, config: Config, placement: Placement | None = None):
        """`placement`: where the workers go (distributed/placement.py): on the CPU, seeing no GPU, or on GPUs
        Ray hands out; a Ray started here is shown only the GPUs the learner leaves."""
        try:
            import ray
        except ImportError:
            raise UserError("distributed.rollout_workers needs Ray: pip install 'r3l[ray]'") from None
        import torch

        self._ray = ray
        self.settings = config.distributed
        self.placement = placement or plan_for(config, str(resolve_device(config.model.device)))
        if self.settings.weight_sync == "broadcast" and self.settings.on_worker_failure == "retry":
            raise UserError(
                "distributed.weight_sync=broadcast cannot take in a replacement worker (its process "
                "group is fixed); use on_worker_failure=fail or weight_sync=object_store"
            )
        self._config = worker_config(config, self.placement).model_dump(mode="json")
        self._dtype = torch.float32  # until the workers say which dtype their generators run in
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            self._start_ray()
        self._actor = ray.remote(RolloutWorker)
        self.stream: WeightStream | None = None
        self.restarts = 0
        self.version = -1
        self._weights: Any = None  # a ray ObjectRef of the latest weights (weight_sync=object_store)
        started = time.perf_counter()
        self._placement: Any = None  # a ray PlacementGroup
        self.workers: list = []
        try:
            self._placement = self._reserve()
            self.workers = [self._start_worker(index) for index in range(self.settings.rollout_workers)]
            self._wait([worker.ready.remote() for worker in self.workers], "start")
            self._dtype = self._agreed_dtype()
            self._check_gpus()
        except BaseException:
            self.close()  # no actor, placement group or local Ray left behind
            raise
        console.print(
            f"{len(self.workers)} rollout workers ready in {time.perf_counter() - started:.0f} s "
            f"(weights sent in {str(self._dtype).removeprefix('torch.')})"
        )

    def _start_ray(self) -> None:
        """A local Ray (or a connection to `distributed.ray_address`). A local one is shown only the GPUs the
        learner leaves (CUDA_VISIBLE_DEVICES while it starts: its raylet reads it once), so it never hands a
        worker the learner's GPU."""
        local = self.settings.ray_address is None
        wanted = math.ceil(self.settings.rollout_workers * self.settings.worker_cpus)
        gpus = self.placement.ray_gpus if local else None
        shown = {"CUDA_VISIBLE_DEVICES": ",".join(physical_gpu_ids(gpus))} if gpus is not None else {}
        # Ray >= 2.50 says at each local start that it turned token authentication on (its default, kept): a
        # banner about Ray's own security default, not about this run
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        with environment_while(shown):  # the raylet reads CUDA_VISIBLE_DEVICES once, as it starts
            self._ray.init(
                **ray_init_options(
                    self.settings.ray_address,
                    max(os.cpu_count() or 1, wanted) if local else None,
                    len(gpus) if gpus is not None else None,
                )
            )

    def _agreed_dtype(self):
        """The dtype the weights are sent in: the workers' generators' (float32 where they differ; a CPU
        worker's generator may run in another dtype than the trainer's)."""
        import torch

        names = set(self._wait([worker.dtype.remote() for worker in self.workers], "dtype lookup"))
        return getattr(torch, names.pop()) if len(names) == 1 else torch.float32

    def _check_gpus(self) -> None:
        """On a cluster Ray chooses the GPUs: a worker given one of the learner's (on the driver's node) is
        refused in one line."""
        if self.placement.worker_device != "cuda" or self.placement.ray_gpus is not None:
            return
        indices = learner_gpus(self.placement.learner)
        if not indices:
            return
        assigned = self._wait([worker.gpus.remote() for worker in self.workers], "GPU lookup")
        clashes = colliding_workers(assigned, self._ray.get_runtime_context().get_node_id(), physical_gpu_ids(indices))
        if clashes:
            listed = ", ".join(f"worker {index} on GPU {gpu}" for index, gpu in clashes)
            raise UserError(
                f"Ray put rollout workers on the learner's GPUs ({listed}); start Ray on the driver's machine "
                "with `ray start --head --num-gpus=0` (or CUDA_VISIBLE_DEVICES naming the other GPUs)"
            )

    def _reserve(self):
        """One placement-group bundle per worker, placed by `distributed.placement`; waits until it fits."""
        from ray.util.placement_group import placement_group

        bundle = {
            "CPU": self.settings.worker_cpus,
            **({"GPU": self.settings.worker_gpus} if self.settings.worker_gpus else {}),
        }
        workers, total = self.settings.rollout_workers, self._ray.cluster_resources()
        short = [
            f"{amount * workers:g} {name} (the cluster has {total.get(name, 0):g})"
            for name, amount in bundle.items()
            if amount * workers > total.get(name, 0)
        ]
        if self.settings.placement == "strict_spread" and workers > len([n for n in self._ray.nodes() if n["Alive"]]):
            short.append(f"{workers} nodes for placement=strict_spread")
        if short:
            raise UserError(
                f"{workers} rollout workers need {', '.join(short)}; lower distributed.rollout_workers, "
                "worker_cpus or worker_gpus, or start more Ray nodes"
            )
        group = placement_group([bundle] * workers, strategy=self.settings.placement.upper())
        try:
            self._ray.get(group.ready(), timeout=self.settings.worker_timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            raise RunStopped(
                f"the Ray cluster cannot place {self.settings.rollout_workers} rollout workers of "
                f"{bundle} ({self.settings.placement}) within distributed.worker_timeout_s; "
                "free resources, lower distributed.worker_cpus/worker_gpus, or use placement=pack"
            ) from None
        return group

    def _start_worker(self, index: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        threads = max(1, int(self.settings.worker_cpus))
        strategy = PlacementGroupSchedulingStrategy(self._placement, placement_group_bundle_index=index)
        return self._actor.options(
            num_cpus=self.settings.worker_cpus,
            num_gpus=self.settings.worker_gpus,
            scheduling_strategy=strategy,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads), **worker_env(self.placement)}},
        ).remote(self._config, threads)

    def nodes(self) -> list[str]:
        """The Ray node of each worker, in order."""
        return self._wait([worker.node.remote() for worker in self.workers], "node lookup")

    def _wait(self, futures: list, what: str) -> list:
        try:
            return self._ray.get(futures, timeout=self.settings.worker_timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            raise RunStopped(
                f"rollout workers did not finish their {what} within distributed.worker_timeout_s="
                f"{self.settings.worker_timeout_s:g} s"
            ) from None
        except self._ray.exceptions.RayError as error:
            raise RunStopped(f"a rollout worker failed during its {what}: {_first_line(error)}") from None

    def sync_weights(self, state_dict) -> None:
        """Send these weights, as the generators' dtype, to every worker: through Ray's object store (once per
        node) or the weight stream (`distributed.weight_sync`)."""
        self.version += 1
        what = f"weight sync (version {self.version})"
        if self.settings.weight_sync == "object_store":
            self._weights = self._ray.put(
                {name: tensor.detach().to("cpu", self._dtype) for name, tensor in state_dict.items()}
            )
            futures = [worker.sync_weights.remote(self._weights, self.version) for worker in self.workers]
            if self.settings.on_worker_failure != "retry":
                self._wait(futures, what)
                return
            for index, future in enumerate(futures):  # a worker that died (e.g. exploring a batch ahead) is replaced
                try:
                    self._ray.get(future, timeout=self.settings.worker_timeout_s)
                except (self._ray.exceptions.RayError, self._ray.exceptions.GetTimeoutError) as error:
                    console.print(
                        f"[yellow]rollout worker {index} failed during its {what}: {_first_line(error)}; "
                        "replacing it[/]"
                    )
                    self._replace(index)  # the replacement gets these weights
            return
        stream = self.stream if self.stream is not None else self._open_stream(state_dict)
        received = [worker.receive_weights.remote() for worker in self.workers]
        try:
            stream.send(self.version, state_dict)
        except RuntimeError as error:
            raise RunStopped(f"a rollout worker failed during its {what}: {_first_line(error)}") from None
        self._wait(received, what)

    def _open_stream(self, state_dict) -> WeightStream:
        from ray.util import get_node_ip_address

        from r3l.distributed.learner_group import free_port
        from r3l.distributed.weight_stream import WeightStream, manifest, stream_device

        entries, host, port = manifest(state_dict, self._dtype), get_node_ip_address(), free_port()
        world, timeout = len(self.workers) + 1, self.settings.worker_timeout_s
        trainer_device = str(next(iter(state_dict.values())).device)
        on_gpus, shared = self.placement.worker_device == "cuda", self.placement.workers_may_share_a_gpu
        device = stream_device(trainer_device, on_gpus, shared)
        if trainer_device.startswith("cuda") and on_gpus and shared:
            console.print(
                f"[yellow]weight stream over gloo (CPU), not NCCL: {self.settings.worker_gpus:g} GPU per worker lets "
                "two workers share a GPU, which NCCL refuses; give each worker a whole GPU (worker_gpus=1) for NCCL[/]",
                soft_wrap=True,
            )
        opened = [
            worker.open_stream.remote(host, port, rank, world, entries, timeout, device)
            for rank, worker in enumerate(self.workers, start=1)
        ]
        # waits for every worker to connect
        here = trainer_device if device != "cpu" else "cpu"
        self.stream = stream = WeightStream(host, port, 0, world, entries, timeout, device=here)
        self._wait(opened, "weight stream start")
        return stream

    def explore(self, tasks: Sequence, step: int) -> tuple[list, dict[str, float]]:
        """The strategy's explore, one shard of `tasks` per worker (`twin_shards`); experiences in batch order but
        for a task moved beside its twin (counted in `rollout_moved_twins`)."""
        experiences, metrics, _ = self.collect(self.submit(tasks, step))
        return experiences, metrics

    def submit(self, tasks: Sequence, step: int) -> Exploration:
        """Start exploring `tasks` with the current weights; `collect` waits for the result."""
        shards = twin_shards([task.prompt for task in tasks], len(self.workers))
        futures = [
            self.workers[index].explore.remote([tasks[i] for i in shard], step, self.version)
            for index, shard in enumerate(shards)
        ]
        return Exploration(
            [[tasks[i] for i in shard] for shard in shards],
            step,
            self.version,
            futures,
            list(self.workers[: len(shards)]),
            moved_twins(shards, len(self.workers)),
        )

    def collect(self, exploration: Exploration) -> tuple[list, dict[str, float], int]:
        """(experiences in batch order, merged metrics, the oldest weights version any shard used)."""
        results = [
            self._shard_result(index, tasks, exploration, future)
            for index, (tasks, future) in enumerate(zip(exploration.shards, exploration.futures))
        ]
        experiences = [experience for shard_experiences, _, _ in results for experience in shard_experiences]
        metrics = merge_shard_metrics(
            [(shard_metrics, len(tasks)) for (_, shard_metrics, _), tasks in zip(results, exploration.shards)]
        )
        metrics.update(
            {
                "rollout_workers": float(len(results)),
                "rollout_worker_restarts": float(self.restarts),
                "rollout_moved_twins": float(exploration.moved_twins),
            }
        )
        return experiences, metrics, min((version for *_, version in results), default=exploration.version)

    def _shard_result(self, index: int, tasks: list, exploration: Exploration, future):
        step = exploration.step
        try:
            experiences, metrics, _ = self._ray.get(future, timeout=self.settings.worker_timeout_s)
            return experiences, metrics, exploration.version
        except (self._ray.exceptions.RayError, self._ray.exceptions.GetTimeoutError) as error:
            reason = (
                "no answer within distributed.worker_timeout_s"
                if isinstance(error, self._ray.exceptions.GetTimeoutError)
                else _first_line(error)
            )
            where = f"rollout worker {index} failed at step {step + 1} on tasks {', '.join(t.id for t in tasks)}"
            if self.settings.on_worker_failure != "retry":
                raise RunStopped(
                    f"{where}: {reason}; set distributed.on_worker_failure=retry to replace it and rerun its shard"
                ) from None
        console.print(f"[yellow]{where}: {reason}; replacing it and rerunning its shard[/]")
        if self.workers[index] is exploration.workers[index]:
            self._replace(index)  # the replacement has the newest weights, so the rerun explores with those
        experiences, metrics, _ = self._wait(
            [self.workers[index].explore.remote(tasks, step, self.version)],
            f"rerun of tasks {', '.join(t.id for t in tasks)}",
        )[0]
        return experiences, metrics, self.version

    def _replace(self, index: int) -> None:
        self._ray.kill(self.workers[index], no_restart=True)
        self.workers[index] = self._start_worker(index)
        self.restarts += 1
        self._wait([self.workers[index].ready.remote()], "start of a replacement")
        if self._weights is not None:
            self._wait([self.workers[index].sync_weights.remote(self._weights, self.version)], "weight sync")

    def close(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self._ray.is_initialized():  # another pool of this process may have shut the local Ray down already
            for worker in self.workers:
                self._ray.kill(worker, no_restart=True)
            if self._placement is not None:
                remove_placement_group(self._placement)
        self.workers, self._placement = [], None
        self.stream = None
        if self._started_ray:
            self._ray.shutdown()


def ray_init_options(address: str | None, num_cpus: int | None, num_gpus: int | None) -> dict[str, Any]:
    """`ray.init`'s settings for a run's Ray: a local one (address None) of `num_cpus` and `num_gpus`, or a
    connection to `address`; no dashboard, Ray's logging left alone, the workers' output not forwarded."""
    return {
        "address": address,
        "include_dashboard": False,
        "configure_logging": False,
        "log_to_driver": False,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "runtime_env": {
            "env_vars": {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false"}
        },
    }


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else type(error).__name__)
