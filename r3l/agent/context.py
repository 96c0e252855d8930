"""What playing episodes needs from the outside world, shared by exploration and held-out evaluation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from r3l.agent.episodes import AgentLimits
from r3l.envs import Env
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Generator


@dataclass
class RolloutContext:
    make_env: Callable[[], Env]
    generator: Generator
    tokenizer: Any
    prompt_format: PromptFormat = PromptFormat()
    limits: AgentLimits = AgentLimits()
