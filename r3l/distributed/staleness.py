"""Bounded staleness: rollouts for later steps run while the learner trains, never more than S policy
versions behind the weights they are trained into (S = distributed.max_staleness; 0 = synchronous)."""

from __future__ import annotations


def batches_in_flight(max_staleness: int, step: int, total_steps: int) -> int:
    """How many batches (this step's included) should be exploring at `step`: S + 1, none past the run's end."""
    return max(0, min(max_staleness + 1, total_steps - step))


def staleness(learner_version: int, batch_version: int) -> int:
    """Updates made since the weights a batch was explored with."""
    return learner_version - batch_version


def admissible(learner_version: int, batch_version: int, max_staleness: int) -> bool:
    """Whether a batch explored with `batch_version` may be trained into `learner_version`."""
    return 0 <= staleness(learner_version, batch_version) <= max_staleness
