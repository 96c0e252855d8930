"""A config's real `Trainer.train_step`, timed: its figures over measured steps after unmeasured ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from r3l.bench.stats import spread
from r3l.config import Config, apply_override, parse_override


def with_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """`config` with `key=value` overrides applied, validated again."""
    tree = config.model_dump(mode="json")
    for override in overrides:
        apply_override(tree, *parse_override(override))
    return Config.model_validate(tree)


def per_workload(config: Config, workloads: Mapping[str, Sequence[str]], measure: Callable[[Config], Any]) -> dict:
    """label -> `measure` of `config` with each workload's overrides, or {"skipped": why} where the workload's
    environment cannot be made here (an optional package, such as textarena, not installed)."""
    from r3l.envs import env_class
    from r3l.errors import UserError

    results: dict[str, Any] = {}
    for label, overrides in workloads.items():
        try:
            chosen = with_overrides(config, overrides)
            env_class(chosen.env.name)
        except UserError as error:
            results[label] = {"skipped": str(error)}
            continue
        results[label] = measure(chosen)
    return results


def timed_steps(
    config: Config, run_dir: Path, warmup: int, repeats: int, figures: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Train `warmup` unmeasured and `repeats` measured steps; min/median/max of each of `figures` (a step's
    metric, 0 where absent; `step_seconds` is the wall time of the whole call)."""
    from r3l.trainer import Trainer

    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config, run_dir=run_dir)
    steps: list[dict[str, float]] = []
    try:
        for index in range(warmup + repeats):
            started = time.perf_counter()
            metrics = trainer.train_step()
            metrics["step_seconds"] = time.perf_counter() - started
            if index >= warmup:
                steps.append({name: float(metrics.get(name, 0.0)) for name in figures})
    finally:
        trainer.close()
    return {name: spread([step[name] for step in steps]) for name in figures}
