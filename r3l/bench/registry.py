"""Bench sections: each measures one thing and returns JSON data plus a Markdown table.

A new section is one new module in r3l/bench/ with one decorator; `discover()` imports every
module of this package, so nothing else changes:

    from r3l.bench.registry import BenchContext, SectionResult, section

    @section("r3l_exploration", order=30)
    def r3l_exploration(ctx: BenchContext) -> SectionResult:
        ...
        return SectionResult(data={...}, markdown="| ... |")

A section reads what earlier ones measured from `ctx.results[name].data` (and `.details`); `needs`
names sections that must run before it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3l.config import Config
from r3l.errors import UserError
from r3l.registry import Registry


@dataclass
class SectionResult:
    data: dict[str, Any]  # summary figures -> bench.json
    markdown: str  # tables -> bench.md
    details: dict[str, Any] = field(default_factory=dict)  # per-step records and raw settings -> bench_details.json


@dataclass
class BenchContext:
    config: Config
    out_dir: Path
    repeats: int
    warmup: int
    vs: str | None = None
    trl_generator: str = "auto"
    results: dict[str, SectionResult] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[[BenchContext], SectionResult]
    order: int
    needs: tuple[str, ...]
    title: str


SECTIONS: Registry[Section] = Registry("bench section")


def section(name: str, order: int = 50, needs: Sequence[str] = (), title: str | None = None):
    """Register `fn(ctx) -> SectionResult` as bench section `name`; lower `order` runs first."""

    def decorator(fn: Callable[[BenchContext], SectionResult]):
        SECTIONS.register(name)(Section(name, fn, order, tuple(needs), title or name.replace("_", " ")))
        return fn

    return decorator


def discover() -> None:
    """Import every module of r3l.bench so that their sections register themselves."""
    package = importlib.import_module("r3l.bench")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"r3l.bench.{module.name}")


def plan(requested: Sequence[str] | None) -> list[Section]:
    """The sections to run (all when `requested` is empty) plus what they need, in run order."""
    discover()
    names = list(requested) if requested else [name for name, _ in SECTIONS]
    chosen: dict[str, Section] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in chosen:
            continue
        if name not in SECTIONS:
            raise UserError(f"unknown bench section '{name}'; choose from: {', '.join(SECTIONS.names())}")
        chosen[name] = SECTIONS.get(name)
        pending.extend(chosen[name].needs)
    return sorted(chosen.values(), key=lambda s: (s.order, s.name))
