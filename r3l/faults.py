"""Fault injection for the reliability tests: `failpoint(name)` kills this process with SIGKILL when the
environment variable R3L_FAILPOINT names that point (optionally `name@N`: on its N-th pass), so a test can stop a
run at an exact moment (mid-checkpoint, between rollout and update) as `kill -9` would; `name@N:INT` sends SIGINT
instead (a Ctrl-C at that moment), and several points may be given, comma-separated. A no-op otherwise."""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV_VAR = "R3L_FAILPOINT"
SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT}
_passes: Counter = Counter()


def failpoint(name: str) -> None:
    wanted = os.environ.get(ENV_VAR)
    if not wanted:
        return
    chosen = []
    for entry in wanted.split(","):
        where, _, how = entry.strip().partition(":")
        point, _, nth = where.partition("@")
        if point == name:
            chosen.append((int(nth or 1), SIGNALS[how or "KILL"]))
    if not chosen:
        return
    _passes[name] += 1
    for count, signum in chosen:
        if _passes[name] == count:
            os.kill(os.getpid(), signum)
