"""Pass and read a KV cache across transformers versions (`cache` in 5.x, `past_key_values` before)."""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any


@cache
def _cache_argument(forward_owner: Any) -> str:
    parameters = inspect.signature(forward_owner.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def with_cache(module, cache) -> dict:
    """Keyword arguments that hand `cache` to `module`'s forward."""
    return {_cache_argument(type(module)): cache}  # type: ignore[arg-type]  # mypy: a class is not Hashable


def cache_of(output):
    """The KV cache a forward returned."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
