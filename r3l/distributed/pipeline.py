"""Keeps the next S batches exploring on the rollout workers while the learner trains this one, and stamps
each batch with the weights version it was explored with (distributed.max_staleness = S; 0: synchronous)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from r3l.distributed.staleness import admissible, batches_in_flight, staleness


@dataclass
class Drawn:
    """A batch of tasks and the sampler's position before it was drawn (where a resume must start again)."""

    tasks: list
    sampler_state: dict[str, Any]
    task_builds: int


class ExplorationPipeline:
    def __init__(self, pool, draw: Callable[[int], Drawn], max_staleness: int, total_steps: int):
        self.pool = pool
        self.draw = draw
        self.max_staleness = max_staleness
        self.total_steps = total_steps
        self.in_flight: deque = deque()

    def next(self, step: int) -> tuple[list, dict[str, float], int]:
        """Step `step`'s experiences, metrics and staleness (updates since its weights), after starting the
        batches of the next S steps."""
        while len(self.in_flight) < batches_in_flight(self.max_staleness, step, self.total_steps):
            ahead = step + len(self.in_flight)
            drawn = self.draw(ahead)
            self.in_flight.append((drawn, self.pool.submit(drawn.tasks, ahead)))
        _, exploration = self.in_flight.popleft()
        experiences, metrics, version = self.pool.collect(exploration)
        lag = staleness(self.pool.version, version)
        if not admissible(self.pool.version, version, self.max_staleness):
            raise RuntimeError(f"a batch explored with weights version {version} reached version {self.pool.version}")
        for experience in experiences:
            experience.meta["policy_version"] = version
        metrics.update({"staleness": float(lag), "policy_version": float(version)})
        return experiences, metrics, lag

    def oldest_pending(self) -> Drawn | None:
        """The earliest batch drawn but not yet trained (a checkpoint saves the sampler as it was before it)."""
        return self.in_flight[0][0] if self.in_flight else None
