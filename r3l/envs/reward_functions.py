"""Reward functions the TRL way, `fn(prompts, completions, **columns) -> list[float]`, loaded from a module or a
file and summed with weights over a single-turn environment's own reward (`reward.functions`)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l.envs import single_turn_env
from r3l.envs.base import SingleTurnEnv, Task, Verdict, judge
from r3l.errors import UserError

RewardFn = Callable[..., Sequence[float]]
# what a wrapper must show as its environment's own: the capabilities runners and strategies read
CAPABILITIES = (
    "name",
    "description",
    "deterministic",
    "action_format",
    "retry_from_pivot",
    "steps_are_a_cost",
    "light",
    "watch_prompt_copies",
    "system_prompt",
)


@functools.cache
def load_reward_function(spec: str, setting: str = "reward.functions") -> RewardFn:
    """Import 'package.module:function', 'package.module.function' or 'path/to/file.py:function'."""
    module_name, separator, function_name = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    if not separator or not module_name or not function_name:
        raise UserError(f"{setting} '{spec}' must look like 'package.module:function' or 'file.py:function'")
    try:
        module = _import_file(module_name) if module_name.endswith(".py") else importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - the user's module may fail to import in any way
        raise UserError(f"cannot import {setting} '{spec}': {one_line(error)}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UserError(f"{setting} '{spec}': module '{module_name}' has no function '{function_name}'")
    return function


def _import_file(path: str):
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no file {path}")
    spec = importlib.util.spec_from_file_location(f"r3l_reward_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_columns(task: Task) -> dict[str, list[Any]]:
    """The keyword columns a reward function gets for one task, one value each as TRL passes a batch of one:
    a dataset row's own columns, or the task's `answer` for a built-in environment."""
    columns = task.data.get("columns")
    if isinstance(columns, dict):
        return {name: [value] for name, value in columns.items()}
    return {"answer": [task.answer]}


def where(task: Task) -> str:
    source = task.data.get("source")
    return f"task {task.id}" + (f" ({source})" if source else "")


def call_reward_function(function: RewardFn, spec: str, task: Task, completion: str, setting: str) -> float:
    """One completion's reward from `function`; anything wrong is one line naming the function and the row."""
    try:
        rewards = function([task.prompt], [completion], **task_columns(task))
    except Exception as error:  # noqa: BLE001 - the user's function may fail in any way
        raise UserError(
            f"{setting} '{spec}' failed on {where(task)}: {type(error).__name__}: {one_line(error)}"
        ) from None
    try:
        (reward,) = rewards
        value = 0.0 if reward is None else float(reward)  # TRL lets a reward function skip a sample with None
    except (TypeError, ValueError):
        raise UserError(
            f"{setting} '{spec}' returned {one_line(rewards)[:80]} on {where(task)}; "
            "it must return a list with one float per completion"
        ) from None
    if not math.isfinite(value):
        raise UserError(f"{setting} '{spec}' returned {value} on {where(task)}; rewards must be finite")
    return value


@dataclass(frozen=True)
class RewardFunctions:
    """`reward.functions` with their weights, the environment's own reward's weight and what counts as success
    (a threshold on the sum, or the environment's verdict when there is none)."""

    specs: tuple[str, ...]
    weights: tuple[float, ...]
    env_weight: float = 1.0
    success_threshold: float | None = None

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.specs):
            raise UserError(
                f"reward.weights has {len(self.weights)} values for {len(self.specs)} reward.functions; give one each"
            )
        if self.env_weight == 0 and self.success_threshold is None:
            raise UserError(
                "reward.env_weight=0 leaves no judge of success: set reward.success_threshold (the summed "
                "reward that counts as a success)"
            )
        for spec in self.specs:
            load_reward_function(spec)  # a bad name fails now, not at the first answer

    def verdict(self, own: Verdict, task: Task, completion: str) -> Verdict:
        parts = [
            (spec, weight, call_reward_function(load_reward_function(spec), spec, task, completion, "reward.functions"))
            for spec, weight in zip(self.specs, self.weights)
        ]
        total = self.env_weight * own.reward + sum(weight * value for _, weight, value in parts)
        success = own.success if self.success_threshold is None else total >= self.success_threshold
        scored = ", ".join(f"{spec.rpartition(':')[2] or spec} {value:g}" for spec, _, value in parts)
        feedback = (
            f"{own.feedback} (reward functions: {scored}; total {total:g})"
            if own.feedback
            else (f"reward functions: {scored}; total {total:g}")
        )
        return Verdict(reward=total, success=success, feedback=feedback)


class RewardedEnv(SingleTurnEnv):
    """A single-turn environment whose answers are also scored by reward functions; it shows its environment's
    capabilities, tasks and reply constraints as its own."""

    def __init__(self, inner: SingleTurnEnv, functions: RewardFunctions):
        super().__init__()
        self.inner = inner
        self.functions = functions
        for name in CAPABILITIES:
            setattr(self, name, getattr(inner, name))

    def tasks(self, split: str) -> Sequence[Task]:
        return self.inner.tasks(split)

    def verify(self, task: Task, completion: str) -> Verdict:
        return self.functions.verdict(judge(self.inner, task, completion), task, completion)

    def reply_constraint(self, reply):
        return self.inner.reply_constraint(reply)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def with_reward_functions(make_env: Callable[[], Any], functions: RewardFunctions) -> SingleTurnEnv:
    env = single_turn_env(
        make_env,
        lambda name: (
            f"reward.functions score single-turn answers and '{name}' is multi-turn; its reward is the "
            "environment's own (remove reward.functions)"
        ),
    )
    return RewardedEnv(env, functions)


def one_line(value: Any) -> str:
    return " ".join(str(value).split())
