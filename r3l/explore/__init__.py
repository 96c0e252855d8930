"""Exploration strategies: each turns a batch of tasks into experiences (one module per strategy)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from r3l.agent.context import RolloutContext
from r3l.agent.episodes import EpisodeRunner
from r3l.config import format_validation_error
from r3l.envs import Task
from r3l.errors import UserError
from r3l.experience import Experience
from r3l.registry import Registry, import_submodules
from r3l.rollout.generator import SamplingParams


@dataclass(kw_only=True)
class ExploreContext(RolloutContext):
    """What a strategy needs: a rollout context (shared with held-out evaluation) and how to sample."""

    sampling: SamplingParams
    group_size: int
    report_field_chars: int | None = None  # reflection reports decoded under their JSON schema (None: free)


class StrategySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Strategy(ABC):
    Settings: ClassVar[type[StrategySettings]] = StrategySettings
    setup_generated_tokens: float = 0.0  # tokens the last `training_tasks` call generated (R3's failure set)

    def __init__(self, context: ExploreContext, **settings: Any):
        self.context = context
        self._runner: EpisodeRunner | None = None
        try:
            self.settings = self.Settings(**settings)
        except ValidationError as error:
            raise UserError(f"algorithm.strategy_args: {format_validation_error(error)}") from None

    @property
    def runner(self) -> EpisodeRunner:
        """The episode runner (made on first use; it keeps its environments between steps)."""
        if self._runner is None:
            c = self.context
            self._runner = EpisodeRunner(c.make_env, c.generator, c.tokenizer, c.prompt_format, c.limits)
        return self._runner

    def close(self) -> None:
        """Close the runner's environments (their simulators or processes)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def training_tasks(
        self, train_tasks: Sequence[Task], run_dir: Path | None, limit: int | None = None, build: int = 0
    ) -> Sequence[Task]:
        """The tasks a run draws its batches from (R3 draws from a failure set); `limit` bounds the work,
        `build` counts rebuilds (see `refresh_due`)."""
        return train_tasks

    def refresh_due(self, step: int) -> bool:
        """Whether `training_tasks` should be rebuilt before `step` (e.g. a periodic failure-set refresh)."""
        return False

    @abstractmethod
    def explore(self, tasks: Sequence[Task], step: int) -> tuple[list[Experience], dict[str, float]]:
        """Experiences (rewards set, advantages not yet) and rollout metrics for one training step."""


STRATEGIES: Registry[type[Strategy]] = Registry("exploration strategy")


def make_strategy(name: str, context: ExploreContext, **settings: Any) -> Strategy:
    import_submodules(__name__)
    return STRATEGIES.get(name)(context, **settings)
