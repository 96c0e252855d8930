"""Draws training tasks in a seeded, epoch-wise shuffled order whose position can be saved and restored."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from r3l.envs import Task


class TaskSampler:
    def __init__(self, tasks: Sequence[Task], seed: int):
        if not tasks:
            raise ValueError("the training split has no tasks")
        self.tasks = tasks  # a lazy Sequence: tasks are only built when drawn
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self, size: int) -> list[Task]:
        batch: list[Task] = []
        while len(batch) < size:
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            batch.append(self.tasks[self._order[self.position]])
            self.position += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]
        self._order = self._shuffled(self.epoch)
