"""Environment registry: `make(name, **kwargs)` builds one; each environment lives in its own module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from r3l.envs.arguments import check_arguments
from r3l.envs.base import Env, SingleTurnEnv, StepResult, Task, Verdict, judge
from r3l.errors import UserError
from r3l.registry import Registry, import_submodules

ENVS: Registry[type[Env]] = Registry("environment")
register = ENVS.register


def _load_all() -> None:
    import_submodules(__name__, f"{__name__}.games")


def make(name: str, **kwargs: Any) -> Env:
    _load_all()
    cls = ENVS.get(name)
    check_arguments(name, cls, kwargs)
    try:
        return cls(**kwargs, **cls.fixed_arguments)
    except TypeError as error:
        raise UserError(f"bad settings for environment '{name}': {error}; see `r3l envs`") from None


def env_class(name: str) -> type[Env]:
    """The class registered as `name` (its capabilities: action_format, retry_from_pivot, light ...)."""
    _load_all()
    return ENVS.get(name)


def single_turn_env(make_env: Callable[[], Env], refusal: Callable[[str], str]) -> SingleTurnEnv:
    """A new environment from `make_env`; a multi-turn one is closed and refused in one line, `refusal(its name)`."""
    env = make_env()
    if not isinstance(env, SingleTurnEnv):
        getattr(env, "close", lambda: None)()
        raise UserError(refusal(env.name))
    return env


def require_single_turn(make_env: Callable[[], Env], what: str) -> None:
    """Refuse, in one line, a multi-turn environment where only single-turn ones make sense."""
    single_turn_env(
        make_env,
        lambda name: (
            f"{what} needs a single-turn environment (one prompt, one answer), and '{name}' is "
            "multi-turn; use the r3l strategy (algorithm=r3l) or a single-turn env (see `r3l envs`)"
        ),
    )


def available() -> list[tuple[str, str]]:
    _load_all()
    return [(name, cls.description) for name, cls in ENVS]


__all__ = [
    "Env",
    "SingleTurnEnv",
    "StepResult",
    "Task",
    "Verdict",
    "judge",
    "ENVS",
    "register",
    "make",
    "available",
    "env_class",
    "require_single_turn",
    "single_turn_env",
]
