"""A generator's own settings (`generator.NAME=value`), read from its constructor: each keyword the run does not
give (model, tokenizer, dtype, lora_rank, own_process) is a setting, typed and explained by its annotation
(`Annotated[int, Field(gt=0, description=...)]`), so adding a generator is one file and its settings are its own."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from r3l.errors import UserError

RUN_ARGUMENTS = frozenset({"self", "model", "tokenizer", "dtype", "lora_rank", "own_process"})  # the run gives these


@functools.cache
def settings_model(cls: Any) -> type[BaseModel]:
    """A pydantic model of `cls`'s settings: its constructor's keywords less the run's, with their annotations
    (constraints and help included) and defaults."""
    hints = typing.get_type_hints(cls.__init__, include_extras=True)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(cls.__init__).parameters.values():
        if parameter.name in RUN_ARGUMENTS or parameter.kind not in (
            parameter.POSITIONAL_OR_KEYWORD,
            parameter.KEYWORD_ONLY,
        ):
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return create_model(f"{cls.__name__}Settings", __config__=config, **fields)


def check_settings(name: str, cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings `cls` is built with, from those the config gives; one line naming the first that is unknown or
    has a bad value."""
    model = settings_model(cls)
    try:
        return dict(model(**given))
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        if first["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields) or "none"
            raise UserError(
                f"generator '{name}' has no setting generator.{key}; its settings: {known} (remove it, or choose "
                f"the generator it belongs to: `r3l generators` lists each generator's settings)"
            ) from None
        raise UserError(f"generator.{key}={first.get('input')!r}: {first['msg']} (generator '{name}')") from None


def default_settings(cls: type) -> dict[str, Any]:
    """Every setting with its default, as `r3l config` shows them."""
    return {key: field.default for key, field in settings_model(cls).model_fields.items()}


def describe(name: str, cls: type) -> str:
    """`r3l generators`: a generator's first docstring line, then one line per setting."""
    summary = next(iter((inspect.getdoc(cls) or "").splitlines()), "")
    lines = [f"{name}: {summary}", "settings (generator.NAME):"]
    for key, field in settings_model(cls).model_fields.items():
        lines.append(f"  {key:<18} default {field.default!r}" + (f"  {field.description}" if field.description else ""))
    return "\n".join(lines)
