"""The learner across `distributed.learner_ranks` processes on FSDP2 (fsdp.py).

The training process is rank 0: it starts the other ranks, and each of its learner calls is announced to
them first (a broadcast command) so that every rank runs the same collectives. Rank 0 also keeps a plain,
unsharded copy of the policy that receives the full weights after every update, so weight syncs,
checkpoints (written unsharded, as in one process) and evaluation read it exactly as in one process.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from r3l.config import Config
from r3l.distributed.fsdp import RankGroup
from r3l.errors import RunStopped


def _full_options(**extra):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **extra)


def gather_weights(model) -> dict[str, Any]:
    """The full weights on rank 0 (a collective: every rank calls it; the others get an empty dict)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options())


def gather_optimizer(learner) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(learner.model, learner.optimizer, options=_full_options())


def scatter_weights(model, weights: dict[str, Any]) -> None:
    """Every rank's shards from rank 0's full weights (a collective; the other ranks pass an empty dict)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, weights, options=_full_options(broadcast_from_rank0=True))


def scatter_training_state(learner, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    if not state.get("skip_optimizer"):
        set_optimizer_state_dict(
            learner.model,
            learner.optimizer,
            state.get("optimizer", {}),
            options=_full_options(broadcast_from_rank0=True),
        )
    learner.scheduler.load_state_dict(state["scheduler"])
    learner.nonfinite_updates = state.get("nonfinite_updates", 0)


def save_sharded(learner, folder: str) -> None:
    """Each rank writes its shards of the policy and optimizer (torch.distributed.checkpoint; a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(learner.model, learner.optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder)


def load_sharded(learner, folder: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(learner.model, learner.optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(
        learner.model, learner.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


COMMAND_WAIT = timedelta(days=7)  # ranks > 0 wait this long for rank 0's next command (rollouts, evaluation)


def join_group(rank: int, world: int, port: int, device: str, timeout_s: float):
    """Join the learner ranks' group (NCCL beside gloo on CUDA, gloo on a CPU) and return the group commands go
    over: gloo, with a wait of days, so that ranks idle through rank 0's rollouts and evaluations do not time out
    (the collectives of a command keep `timeout_s`)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    options: dict[str, Any] = {}
    backend = "gloo"
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        backend, options["device_id"] = "cpu:gloo,cuda:nccl", torch.device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s), **options)
    return dist.new_group(backend="gloo", timeout=COMMAND_WAIT)


def exit_with_parent() -> None:
    """A rank waiting days for a command must not outlive a training process killed without a word (kill -9)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(2.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def rank_config(config: Config, device: str) -> Config:
    """The run's config as a rank builds its model: on its own device."""
    if device == "cpu":
        return config
    return config.model_copy(update={"model": config.model.model_copy(update={"device": device})})


def serve_rank(rank: int, devices: list[str], config_json: dict, port: int, timeout_s: float) -> None:
    """A learner rank > 0: build the same learner as rank 0, then mirror each command it announces."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rank 0's to handle: it finishes the step, then stops us
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    exit_with_parent()
    commands = join_group(rank, len(devices), port, devices[rank], timeout_s)  # before the slow imports below

    from r3l.build import load_model, make_learner, quiet_libraries, trainable_policy
    from r3l.seeding import seed_everything

    quiet_libraries()
    config = rank_config(Config.model_validate(config_json), devices[rank])
    seed_everything(config.run.seed)
    model, tokenizer = load_model(config)
    model, ref_model = trainable_policy(config, model)
    learner = make_learner(config, model, tokenizer, ref_model, ranks=RankGroup())
    handlers = {
        "update": lambda payload: learner.update(payload[0], behaviour_logprobs=payload[1]),
        "gather_weights": lambda _: gather_weights(learner.model),
        "gather_optimizer": lambda _: gather_optimizer(learner),
        "scatter_weights": lambda _: scatter_weights(learner.model, {}),
        "scatter_training_state": lambda payload: scatter_training_state(learner, payload),
        "save_sharded": lambda folder: save_sharded(learner, folder),
        "load_sharded": lambda folder: load_sharded(learner, folder),
    }
    try:
        while True:
            box: list = [None]
            dist.broadcast_object_list(box, src=0, group=commands)
            name, payload = box[0]
            if name == "stop":
                break
            handlers[name](payload)
    finally:
        dist.destroy_process_group()


class LearnerGroup:
    """Rank 0's learner: the Learner interface the trainer uses, over all ranks."""

    def __init__(self, config: Config, model, tokenizer, ref_model, devices: Sequence[str]):
        """`devices`: each rank's, as the run's placement planned them (distributed/placement.py)."""
        settings = config.distributed
        self.world = settings.learner_ranks
        self.model = model
        devices = list(devices)
        port = free_port()
        context = mp.get_context("spawn")
        arguments = (devices, config.model_dump(mode="json"), port, settings.worker_timeout_s)
        self.processes = [
            context.Process(target=serve_rank, args=(rank, *arguments), daemon=True) for rank in range(1, self.world)
        ]
        for process in self.processes:
            process.start()
        self.closed = False
        self.busy = True  # until the group is up: a failure now cannot send "stop" to ranks not listening
        try:
            self.commands = join_group(0, self.world, port, devices[0], settings.worker_timeout_s)
            self.learner = _make(config, copy.deepcopy(model), tokenizer, ref_model)
        except BaseException:
            self.close()
            raise
        self.busy = False
        self.sharded_checkpoints = settings.sharded_checkpoints

    def _dead(self) -> list[int]:
        return [rank for rank, process in enumerate(self.processes, start=1) if not process.is_alive()]

    def _announce(self, name: str, payload: Any = None) -> None:
        if self._dead():
            raise RunStopped(f"learner rank(s) {self._dead()} exited; the run cannot go on (see their output above)")
        self.busy = True  # until the command's collectives are done (see `_command`)
        dist.broadcast_object_list([(name, payload)], src=0, group=self.commands)

    @contextmanager
    def _command(self):
        """Run the collectives of one command; a backend error (a rank died or timed out) stops the run in one
        line, and `busy` stays set so that `close` does not wait on ranks that are out of step."""
        try:
            yield
        except RuntimeError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            dead = f"rank(s) {self._dead()} exited; " if self._dead() else ""
            raise RunStopped(f"the learner ranks fell out of step: {dead}{reason}") from None
        self.busy = False

    def update(self, experiences: Sequence, behaviour_logprobs: bool = False) -> dict[str, float]:
        with self._command():
            self._announce("update", (list(experiences), behaviour_logprobs))
            metrics = self.learner.update(experiences, behaviour_logprobs=behaviour_logprobs)
            self._announce("gather_weights")
            weights = gather_weights(self.learner.model)
        with torch.no_grad():
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
        tied = {name for name in missing if name.endswith("lm_head.weight")}  # one tensor with the embedding
        if unexpected or set(missing) - tied:
            raise RuntimeError(
                f"gathered weights do not fit the policy: missing {sorted(set(missing) - tied)[:3]}, "
                f"unexpected {unexpected[:3]}"
            )
        return metrics

    def training_state(self) -> dict[str, Any]:
        """Scheduler and counters; and the optimizer state gathered on rank 0, unless checkpoints are sharded
        (then `write_sharded` saves it rank by rank)."""
        state = {"scheduler": self.learner.scheduler.state_dict(), "nonfinite_updates": self.learner.nonfinite_updates}
        if not self.sharded_checkpoints:
            with self._command():
                self._announce("gather_optimizer")
                state["optimizer"] = gather_optimizer(self.learner)
        return state

    def write_sharded(self, folder) -> None:
        with self._command():
            self._announce("save_sharded", str(folder))
            save_sharded(self.learner, str(folder))

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Resume: from the ranks' sharded state, or from the plain copy's weights (already loaded from the
        checkpoint) and the gathered optimizer state."""
        shared = {key: value for key, value in state.items() if key in ("scheduler", "nonfinite_updates")}
        with self._command():
            if "sharded" in state:
                self._announce("load_sharded", str(state["sharded"]))
                load_sharded(self.learner, str(state["sharded"]))
                self._announce("scatter_training_state", {**shared, "skip_optimizer": True})
                scatter_training_state(self.learner, {**shared, "skip_optimizer": True})
                return
            self._announce("scatter_weights")
            scatter_weights(self.learner.model, self.model.state_dict())
            self._announce("scatter_training_state", shared)
            scatter_training_state(self.learner, {**shared, "optimizer": state["optimizer"]})

    @property
    def nonfinite_streak(self) -> int:
        return self.learner.nonfinite_streak

    @property
    def nonfinite_updates(self) -> int:
        return self.learner.nonfinite_updates

    def close(self) -> None:
        """Stop the other ranks: by a "stop" command when they are waiting for one, else (a command failed
        half-way, or the group never came up) by terminating them."""
        if self.closed:
            return
        self.closed = True
        if not self.busy and not self._dead():
            try:
                self._announce("stop")
            except (RunStopped, RuntimeError):
                pass
        for process in self.processes:
            process.join(timeout=30 if not self.busy else 0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
        if dist.is_initialized():
            dist.destroy_process_group()


def _make(config: Config, model, tokenizer, ref_model):
    from r3l.build import make_learner

    return make_learner(config, model, tokenizer, ref_model, ranks=RankGroup())
