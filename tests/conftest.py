"""Shared fixtures: the tiny-random policy (real tokenizer, random weights) and a CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    from r3l.build import quiet_libraries
    from r3l.models import load_policy

    quiet_libraries()
    return load_policy("tiny-random")


def run_cli(*args: str, cwd=None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `r3l ARGS` in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "r3l.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
