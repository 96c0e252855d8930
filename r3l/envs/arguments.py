"""An environment's settings (`env.args`), read from its constructor: names, defaults, help, and checks."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from r3l.errors import UserError

if TYPE_CHECKING:
    from r3l.envs.base import Env

REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class EnvArgument:
    name: str
    default: Any  # REQUIRED when the setting has no default
    help: str

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def env_arguments(cls: type[Env]) -> list[EnvArgument]:
    """The keyword settings of `cls.__init__`, with the help text of `argument_help` (a class's own entries,
    over those of the classes it extends, so a setting a base class takes is explained there once), less those
    the class fixes (`fixed_arguments`: a subclass that plays one source of games fixes `source`)."""
    helps = argument_help(cls)
    fixed = cls.fixed_arguments
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [
        EnvArgument(p.name, p.default, helps.get(p.name, ""))
        for p in parameters
        if p.name != "self" and p.name not in fixed and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def argument_help(cls: type[Env]) -> dict[str, str]:
    helps: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        helps.update(vars(klass).get("argument_help", {}))
    return helps


def check_arguments(name: str, cls: type[Env], given: dict[str, Any]) -> None:
    """One line naming an unknown or a missing setting, before the constructor sees them."""
    arguments = env_arguments(cls)
    known = {argument.name for argument in arguments}
    unknown = sorted(set(given) - known)
    if unknown:
        raise UserError(
            f"environment '{name}' has no setting env.args.{unknown[0]}; its settings: "
            f"{', '.join(sorted(known)) or 'none'} (see `r3l envs {name}`)"
        )
    for argument in arguments:
        if argument.required and given.get(argument.name) is None:
            what = f" ({argument.help})" if argument.help else ""
            raise UserError(
                f"environment '{name}' needs env.args.{argument.name}{what}; set it, e.g. env.args.{argument.name}=..."
            )


def default_arguments(cls: type[Env]) -> dict[str, Any]:
    """Every setting with its default (None for a required one), as `r3l config` shows them."""
    return {a.name: None if a.required else _plain(a.default) for a in env_arguments(cls)}


def describe(name: str, cls: type[Env]) -> str:
    """`r3l envs NAME`: the description, then one line per setting."""
    lines = [f"{name}: {cls.description}", "settings (env.args.NAME):"]
    for argument in env_arguments(cls):
        default = "required" if argument.required else f"default {_plain(argument.default)!r}"
        lines.append(f"  {argument.name:<26} {default}" + (f"  {argument.help}" if argument.help else ""))
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
