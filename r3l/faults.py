"""Fault injection for the reliability tests: `failpoint(name)` kills this process with SIGKILL when the
environment variable R3L_FAILPOINT names that point (optionally `name@N`: on its N-th pass), so a test can stop a
run at an exact moment (mid-checkpoint, between rollout and update) as `kill -9` would. A no-op otherwise."""
from __future__ import annotations

import os
import signal
from collections import Counter

ENV_VAR = "R3L_FAILPOINT"
_passes: Counter = Counter()


def failpoint(name: str) -> None:
    wanted = os.environ.get(ENV_VAR)
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _passes[name] += 1
    if _passes[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
