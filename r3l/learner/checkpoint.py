"""Checkpoints in a run directory: model (loadable by `r3l eval`), optimizer, scheduler, step, data and RNG state."""
from __future__ import annotations

import copy
import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from r3l.errors import UserError


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: Path) -> Path | None:
    link = checkpoint_root(run_dir) / "latest"
    return link.resolve() if link.exists() else None


def rng_state() -> dict[str, Any]:
    return {"torch": torch.random.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def restore_rng(state: dict[str, Any]) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


OPTIMIZER_FILE = "optimizer.pt"  # the largest part (two moments per weight); only the newest checkpoint keeps it
SHARDED_DIR = "sharded"  # or, from learner ranks with sharded checkpoints, each rank's part of model and optimizer


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict[str, Any], keep: int = 1,
                    write_sharded: Callable[[Path], None] | None = None) -> Path:
    """Write checkpoints/step_N atomically, point `latest` at it and keep the newest `keep` checkpoints;
    older ones keep their weights (for `r3l eval`) but lose the optimizer state only resume needs.
    `write_sharded(folder)`, when given, writes the sharded state (and `trainer_state` has no optimizer)."""
    root = checkpoint_root(run_dir)
    final = root / f"step_{step:06d}"
    partial = root / f".step_{step:06d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    if is_lora(model):
        model.save_pretrained(partial / "adapter")
        copy.deepcopy(model).merge_and_unload().save_pretrained(partial / "model")
    else:
        model.save_pretrained(partial / "model")
    tokenizer.save_pretrained(partial / "model")
    state = dict(trainer_state)
    if "optimizer" in state:
        torch.save(state.pop("optimizer"), partial / OPTIMIZER_FILE)
    if write_sharded is not None:
        write_sharded(partial / SHARDED_DIR)
    torch.save({**state, "step": step, "rng": rng_state()}, partial / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    link = root / "latest"
    temporary = root / ".latest.tmp"
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(final.name)
    os.replace(temporary, link)
    kept = sorted(root.glob("step_*"))
    for old in kept[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for older in kept[-keep:-1]:
        (older / OPTIMIZER_FILE).unlink(missing_ok=True)
        shutil.rmtree(older / SHARDED_DIR, ignore_errors=True)
    return final


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint written by `save_checkpoint`: the optimizer state, or the folder of
    the ranks' sharded state under "sharded"."""
    optimizer, sharded = checkpoint / OPTIMIZER_FILE, checkpoint / SHARDED_DIR
    if not optimizer.exists() and not sharded.is_dir():
        raise UserError(f"{checkpoint} has no {OPTIMIZER_FILE} (only the newest checkpoint keeps it); "
                        "resume from the run's latest checkpoint")
    state = torch.load(checkpoint / "state.pt", weights_only=False)
    if optimizer.exists():
        return {**state, "optimizer": torch.load(optimizer, weights_only=False)}
    return {**state, "sharded": sharded}
