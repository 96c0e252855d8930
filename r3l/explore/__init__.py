"""Exploration strategies: each turns a batch of tasks into experiences (one module per strategy)."""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from r3l.envs import Env, Task
from r3l.experience import Experience
from r3l.registry import Registry
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Generator, SamplingParams


@dataclass
class ExploreContext:
    """What a strategy needs from the outside world."""

    make_env: Callable[[], Env]
    generator: Generator
    tokenizer: Any
    sampling: SamplingParams
    group_size: int
    prompt_format: PromptFormat = PromptFormat()


class Strategy(ABC):
    def __init__(self, context: ExploreContext, **settings: Any):
        self.context = context
        self.settings = settings

    @abstractmethod
    def explore(self, tasks: Sequence[Task], step: int) -> tuple[list[Experience], dict[str, float]]:
        """Experiences (rewards set, advantages not yet) and rollout metrics for one training step."""


STRATEGIES: Registry[type[Strategy]] = Registry("exploration strategy")
_MODULES = ("plain",)


def make_strategy(name: str, context: ExploreContext, **settings: Any) -> Strategy:
    for module in _MODULES:
        importlib.import_module(f"r3l.explore.{module}")
    return STRATEGIES.get(name)(context, **settings)
