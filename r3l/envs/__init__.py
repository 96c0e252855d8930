"""Environment registry: `make(name, **kwargs)` builds one; each environment lives in its own module."""
from __future__ import annotations

import importlib
from typing import Any

from r3l.envs.arguments import check_arguments
from r3l.envs.base import Env, SingleTurnEnv, StepResult, Task, Verdict, judge
from r3l.errors import UserError
from r3l.registry import Registry

ENVS: Registry[type[Env]] = Registry("environment")
register = ENVS.register

_MODULES = ("countdown", "arithmetic", "dataset", "function_calling", "textworld_express", "scienceworld",
            "math_dialogue", "alfworld", "webshop")


def _load_all() -> None:
    for module in _MODULES:
        importlib.import_module(f"r3l.envs.{module}")


def make(name: str, **kwargs: Any) -> Env:
    _load_all()
    cls = ENVS.get(name)
    check_arguments(name, cls, kwargs)
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise UserError(f"bad settings for environment '{name}': {error}; see `r3l envs`") from None


def env_class(name: str) -> type[Env]:
    """The class registered as `name` (its capabilities: action_format, retry_from_pivot, light ...)."""
    _load_all()
    return ENVS.get(name)


def available() -> list[tuple[str, str]]:
    _load_all()
    return [(name, cls.description) for name, cls in ENVS]


__all__ = ["Env", "SingleTurnEnv", "StepResult", "Task", "Verdict", "judge", "ENVS", "register", "make", "available",
           "env_class"]
