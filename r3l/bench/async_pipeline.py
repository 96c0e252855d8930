"""Section `async_pipeline`: training steps with rollout workers exploring in lock-step with the learner (S = 0)
against exploring the next batch while the learner trains (`distributed.max_staleness=1`), on a simulator-bound
environment.

Each arm is the bench's config on the workload with one or two Ray rollout workers (one CPU each), trained by the
real `Trainer.train_step` from the same seed for `warmup` unmeasured and `repeats` measured steps, one arm after the
other. A step's `rollout_seconds` is how long the learner waited for its batch. The most overlap can give is
(explore + train) / max(explore, train), from the S = 0 arm's medians; what the machine's cores allow is less when
the workers and the learner share them.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.bench.stats import median_ratio, spread_cell
from r3l.bench.train_steps import timed_steps, with_overrides

WORKLOAD = ["env=scienceworld", "agent.max_turns=6"]
WORKER_COUNTS = (1, 2)
STALENESS = (0, 1)
FIGURES = ("step_seconds", "rollout_seconds", "train_seconds", "staleness")


def arm_label(workers: int, staleness: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}, S = {staleness}"


def arm_overrides(workers: int, staleness: int) -> list[str]:
    return [
        *WORKLOAD,
        f"distributed.rollout_workers={workers}",
        f"distributed.max_staleness={staleness}",
        "eval.size=0",
        "logging.progress=false",
    ]


def overlap_bound(lockstep: dict[str, Any]) -> float:
    """(explore + train) / max(explore, train) from the lock-step arm's medians: the speed-up of a perfect overlap."""
    explore, train = lockstep["rollout_seconds"]["median"], lockstep["train_seconds"]["median"]
    return (explore + train) / max(explore, train, 1e-9)


@section("async_pipeline", order=45, title="Asynchronous exploration: S = 0 against S = 1 with rollout workers")
def async_pipeline(ctx: BenchContext) -> SectionResult:
    repeats = max(1, ctx.repeats)
    arms = {
        arm_label(workers, staleness): timed_steps(
            with_overrides(ctx.config, arm_overrides(workers, staleness)),
            ctx.out_dir / "async_pipeline" / f"workers{workers}_S{staleness}",
            ctx.warmup,
            repeats,
            FIGURES,
        )
        for workers in WORKER_COUNTS
        for staleness in STALENESS
    }
    speedups = {}
    for workers in WORKER_COUNTS:
        lockstep, overlapped = arms[arm_label(workers, 0)], arms[arm_label(workers, 1)]
        speedups[str(workers)] = {
            "speedup": median_ratio(lockstep["step_seconds"], overlapped["step_seconds"]),
            "overlap_bound": overlap_bound(lockstep),
        }
    data = {
        "workload": WORKLOAD,
        "cpus": os.cpu_count(),
        "warmup": ctx.warmup,
        "repeats": repeats,
        "arms": arms,
        "speedups": speedups,
    }
    return SectionResult(data, table(data))


def table(data: dict) -> str:
    cell = partial(spread_cell, fmt=".1f")
    lines = [
        f"`{' '.join(data['workload'])}`, {data['cpus']} CPUs; {data['repeats']} "
        f"measured steps per arm after {data['warmup']} unmeasured; medians [min, max].",
        "",
        "| arm | step s | learner waits for its batch s | learner trains s | staleness |",
        "|---|---|---|---|---|",
    ]
    for label, figures in data["arms"].items():
        lines.append(
            f"| {label} | {cell(figures['step_seconds'])} | {cell(figures['rollout_seconds'])} | "
            f"{cell(figures['train_seconds'])} | {figures['staleness']['median']:.0f} |"
        )
    lines.append("")
    for workers, figures in data["speedups"].items():
        lines.append(
            f"- {workers} worker(s): S = 0 / S = 1 median step **{figures['speedup']:.2f}x**; a perfect overlap of "
            f"the S = 0 phases would give {figures['overlap_bound']:.2f}x."
        )
    return "\n".join(lines) + "\n"
