"""Checkpoints in a run directory: model (loadable by `r3l eval`), optimizer, scheduler, step, data and RNG state."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from r3l.errors import RunStopped, UserError
from r3l.faults import failpoint


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def is_complete(checkpoint: Path) -> bool:
    """A checkpoint whose last file (state.pt, written last) is there; half-written ones live in .partial folders."""
    return (checkpoint / STATE_FILE).is_file() and (checkpoint / "model").is_dir()


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint: where `latest` points, unless the run was killed after a newer one was
    in place and before the link moved. Folders being written (.partial) are never taken."""
    complete = [folder for folder in sorted(checkpoint_root(run_dir).glob("step_*")) if is_complete(folder)]
    return complete[-1] if complete else None


def rng_state() -> dict[str, Any]:
    return {"torch": torch.random.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def restore_rng(state: dict[str, Any]) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


@torch.no_grad()
def merged_on_host(model) -> dict[str, torch.Tensor]:
    """The weights `merge_and_unload` would give a LoRA policy, on the host: each adapted layer's base weight plus
    its adapters' delta, out of place (MergedLora), so neither a second model on the device nor a write into the
    policy's own frozen weights."""
    from r3l.learner.lora_merge import MergedLora

    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in MergedLora(model).items()}


STATE_FILE = "state.pt"  # written last: a checkpoint folder with it is complete
OPTIMIZER_FILE = "optimizer.pt"  # the largest part (two moments per weight); only the newest checkpoint keeps it
SHARDED_DIR = "sharded"  # or, from learner ranks with sharded checkpoints, each rank's part of model and optimizer


def publish(root: Path, partial: Path, final: Path) -> None:
    """Rename the written checkpoint into place and point `latest` at it, each step atomic; a checkpoint of the
    same step is only dropped once the new one is in."""
    replaced = root / f".{final.name}.replaced"
    shutil.rmtree(replaced, ignore_errors=True)
    if final.exists():
        final.rename(replaced)
    partial.rename(final)
    failpoint("checkpoint_renamed")
    link = root / "latest"
    temporary = root / ".latest.tmp"
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(final.name)
    os.replace(temporary, link)
    shutil.rmtree(replaced, ignore_errors=True)
    failpoint("checkpoint_linked")


def save_checkpoint(
    run_dir: Path,
    step: int,
    model,
    tokenizer,
    trainer_state: dict[str, Any],
    keep: int = 1,
    write_sharded: Callable[[Path], None] | None = None,
) -> Path:
    """Write checkpoints/step_N atomically, point `latest` at it and keep the newest `keep` checkpoints;
    older ones keep their weights (for `r3l eval`) but lose the optimizer state only resume needs.
    `write_sharded(folder)`, when given, writes the sharded state (and `trainer_state` has no optimizer)."""
    root = checkpoint_root(run_dir)
    final = root / f"step_{step:06d}"
    partial = root / f".step_{step:06d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        if is_lora(model):
            model.save_pretrained(partial / "adapter")
            model.get_base_model().save_pretrained(partial / "model", state_dict=merged_on_host(model))
        else:
            model.save_pretrained(partial / "model")
        failpoint("checkpoint_model_written")
        tokenizer.save_pretrained(partial / "model")
        state = dict(trainer_state)
        if "optimizer" in state:
            torch.save(state.pop("optimizer"), partial / OPTIMIZER_FILE)
        if write_sharded is not None:
            write_sharded(partial / SHARDED_DIR)
        torch.save({**state, "step": step, "rng": rng_state()}, partial / STATE_FILE)
    except Exception as error:  # noqa: BLE001 - a full disk, a vanished directory: safetensors and torch raise their own types
        shutil.rmtree(partial, ignore_errors=True)
        kept = latest_checkpoint(run_dir)
        raise RunStopped(
            f"could not write the checkpoint of step {step} ({type(error).__name__}: "
            f"{str(error)[:160]}); the last complete checkpoint is {kept or 'none'}: free space or "
            f"fix the run directory, then r3l train --resume {run_dir}"
        ) from None
    failpoint("checkpoint_written")
    publish(root, partial, final)
    steps = sorted(root.glob("step_*"))
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for older in steps[-keep:-1]:
        drop_optimizer_state(older)
    return final


def drop_optimizer_state(checkpoint: Path) -> None:
    """What only resuming needs goes: the optimizer state, whole or sharded; the weights and the trainer state stay."""
    (checkpoint / OPTIMIZER_FILE).unlink(missing_ok=True)
    shutil.rmtree(checkpoint / SHARDED_DIR, ignore_errors=True)


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint written by `save_checkpoint`: the optimizer state, or the folder of
    the ranks' sharded state under "sharded"."""
    optimizer, sharded = checkpoint / OPTIMIZER_FILE, checkpoint / SHARDED_DIR
    if not optimizer.exists() and not sharded.is_dir():
        raise UserError(
            f"{checkpoint} has no {OPTIMIZER_FILE}: only the newest checkpoint of an unfinished run keeps it "
            "(a finished run drops it unless train.keep_optimizer=true); resume from the run's latest checkpoint"
        )
    state = read_checkpoint_file(checkpoint / STATE_FILE)
    if not isinstance(state, dict) or "step" not in state or "rng" not in state:
        raise UserError(f"{checkpoint / STATE_FILE} is not a trainer state written by r3l; " + DAMAGED_FIX)
    if optimizer.exists():
        return {**state, "optimizer": read_checkpoint_file(optimizer)}
    return {**state, "sharded": sharded}


DAMAGED_FIX = "delete that checkpoint folder to resume from an earlier one, or start a new run"


def unreadable(path: Path, error: Exception) -> UserError:
    """The one-line error for a checkpoint file that is missing, truncated or damaged."""
    return UserError(f"{path} cannot be read ({type(error).__name__}: {str(error)[:120]}); {DAMAGED_FIX}")


def read_checkpoint_file(path: Path) -> Any:
    """torch.load of a checkpoint file onto the host (a GPU run's checkpoint loads on a CPU machine, and on a GPU
    no state lands on cuda:0 first: `Optimizer.load_state_dict` moves each state to its parameter's device); a
    damaged or truncated file is one clear UserError naming it."""
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as error:  # noqa: BLE001 - a damaged file raises whatever the unpickler trips on
        raise unreadable(path, error) from None
