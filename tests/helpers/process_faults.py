"""Environment factories for tests of `agent.env_processes`: a real TextWorldExpress coin game whose process dies,
hangs or raises at a chosen step. They are module-level (a spawned process imports them by name); `marker` is a
file path claimed by the first process to reach the step, so that exactly one fault happens in a whole batch."""

from __future__ import annotations

import os
import time

from r3l.envs import make


def coin():
    return make("textworld_express", games=["coin"], max_steps=6)


def _claim(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


class FaultyCoin:
    """The coin game; its `at`-th step in this process does `fault` ('die', 'hang' or 'raise') once per marker."""

    def __init__(self, marker: str, fault: str, at: int):
        self.env, self.marker, self.fault, self.at, self.steps = coin(), marker, fault, at, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.steps += 1
        if self.steps == self.at and _claim(self.marker):
            if self.fault == "die":
                os._exit(3)
            if self.fault == "hang":
                time.sleep(120)
            raise ValueError("the board caught fire")
        return self.env.step(action)
