"""Held-out evaluation: success rate with a Wilson confidence interval."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from r3l.envs import Env, Task
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Generator, SamplingParams
from r3l.rollout.single_turn import run_single_turn


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (well-behaved at 0 and 1)."""
    if total == 0:
        return 0.0, 1.0
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class EvalResult:
    success: float
    ci_low: float
    ci_high: float
    successes: int
    total: int
    mean_reward: float
    samples: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"success": self.success, "ci95": [self.ci_low, self.ci_high], "successes": self.successes,
                "total": self.total, "mean_reward": self.mean_reward}


def evaluate(tasks: Sequence[Task], make_env: Callable[[], Env], generator: Generator, tokenizer,
             params: SamplingParams, prompt_format: PromptFormat = PromptFormat()) -> EvalResult:
    groups = run_single_turn(tasks, make_env, generator, tokenizer, params, group_size=1,
                             prompt_format=prompt_format)
    episodes = [group[0] for group in groups]
    successes = sum(e.success for e in episodes)
    total = len(episodes)
    low, high = wilson_interval(successes, total)
    samples = [{"task_id": e.task.id, "prompt": e.task.prompt, "completion": e.completion.text,
                "success": e.success, "reward": e.reward, "feedback": e.feedback} for e in episodes]
    return EvalResult(successes / max(1, total), low, high, successes, total,
                      sum(e.reward for e in episodes) / max(1, total), samples)
