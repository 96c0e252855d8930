"""Shared fixtures: the tiny-random policy (real tokenizer, random weights) and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread (also for CLI subprocesses): the test models are small, and on a shared 2-core machine
# a second OpenMP thread that must wait for a busy core makes a forward pass ~20x slower, not faster.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny():
    from r3l.build import quiet_libraries
    from r3l.models import load_policy

    quiet_libraries()
    return load_policy("tiny-random")


def one_step_config(tmp_path, *overrides: str):
    """A one-step training config on the tiny-random policy (2 tasks x 2 samples, no evaluation, no logging
    sinks) in `tmp_path`, with `overrides` on top."""
    from r3l.config import load_config

    base = [
        "model=tiny-random",
        "eval.size=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        "train.steps=1",
        "train.tasks_per_step=2",
        "sampling.group_size=2",
        f"run.dir={tmp_path}",
    ]
    return load_config(None, [*base, *overrides])


def run_cli(*args: str, cwd=None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `r3l ARGS` in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "r3l.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
