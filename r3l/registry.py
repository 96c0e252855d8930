"""A small name -> object registry used for environments, algorithms, generators and strategies."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from r3l.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UserError(f"unknown {self.kind} '{name}'; choose one of: {', '.join(sorted(self._items))}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(sorted(self._items.items()))


_WALKED: set[str] = set()


def import_submodules(*packages: str) -> None:
    """Import every module of each package, so that each registers what it defines: adding an environment,
    a strategy or a generator is one new file with one decorator, and no list to keep. Each package is walked
    once per process: a module file added to the source tree while a run is going is not picked up halfway
    (beside the older versions of the modules it imports)."""
    for package in packages:
        if package in _WALKED:
            continue
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__, prefix=f"{package}."):
            importlib.import_module(info.name)
        _WALKED.add(package)  # only once every module imported: a failed walk is tried again, and fails alike
