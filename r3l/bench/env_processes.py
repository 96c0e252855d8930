"""Section `env_processes`: episode throughput with environments in the training process (called one after
another) versus each in a spawned process (`agent.env_processes`, called at once), on the same tasks and seeds.

Each workload plays one batch of tasks to warm up (environments and processes made, simulators started), then
`repeats` batches per mode, the modes alternating, with the bench's model and generator. The runner's own clocks
split a batch's wall time into environment calls and generation; the rest is tokenising and bookkeeping.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.bench.stats import median_ratio, spread, spread_cell
from r3l.bench.train_steps import per_workload
from r3l.config import Config

ENVIRONMENTS = 4  # episodes in flight: environments in this process, or processes
TASKS = 16
WORKLOADS = {
    "textworld_express coin (a JVM simulator)": [
        "env=textworld_express",
        "env.args.games=[coin]",
        "env.args.max_steps=10",
    ],
    "scienceworld (a JVM simulator, ~0.1 s a step)": ["env=scienceworld", "agent.max_turns=6"],
    "textarena Sokoban (pure Python: each reset generates a room)": ["env=textarena:Sokoban-v0"],
}
MODES = ("in process", "processes")


def measure(config: Config, repeats: int) -> dict[str, Any]:
    from r3l.agent.episodes import EpisodeRunner, EpisodeStart
    from r3l.build import agent_limits, env_factory, load_model, make_generator, sampling_params
    from r3l.rollout.chat import PromptFormat

    make_env = env_factory(config)
    model, tokenizer = load_model(config)
    generator = make_generator(config, model, tokenizer)
    probe = make_env()
    tasks = list(probe.tasks("train"))[:TASKS]
    getattr(probe, "close", lambda: None)()
    limits = agent_limits(config)
    settings = {
        "in process": replace(limits, env_workers=ENVIRONMENTS, env_processes=0),
        "processes": replace(limits, env_processes=ENVIRONMENTS),
    }
    params = sampling_params(config, seed=config.run.seed)
    runners = {
        mode: EpisodeRunner(make_env, generator, tokenizer, PromptFormat.from_config(config.env), limit)
        for mode, limit in settings.items()
    }
    batches: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    try:
        for runner in runners.values():  # warm-up: environments made, processes spawned, simulators started
            runner.run([EpisodeStart(task) for task in tasks], params)
        for _ in range(repeats):
            for mode, runner in runners.items():
                before = dict(runner.seconds)
                started = time.perf_counter()
                episodes = runner.run([EpisodeStart(task) for task in tasks], params)
                wall = time.perf_counter() - started
                batches[mode].append(
                    {
                        "wall_seconds": wall,
                        "environment_seconds": runner.seconds["environment"] - before["environment"],
                        "generation_seconds": runner.seconds["generation"] - before["generation"],
                        "steps": float(sum(episode.num_steps for episode in episodes)),
                        "episodes_per_second": len(episodes) / wall,
                    }
                )
    finally:
        for runner in runners.values():
            runner.close()
    summary: dict[str, Any] = {
        mode: {key: spread([batch[key] for batch in rows]) for key in rows[0]} for mode, rows in batches.items()
    }
    here, apart = summary["in process"], summary["processes"]
    summary["environment_speedup"] = median_ratio(here["environment_seconds"], apart["environment_seconds"])
    summary["wall_speedup"] = median_ratio(here["wall_seconds"], apart["wall_seconds"])
    return summary


@section("env_processes", order=40, title="Environments in processes: episode throughput")
def env_processes(ctx: BenchContext) -> SectionResult:
    repeats = max(1, ctx.repeats)
    workloads = per_workload(ctx.config, WORKLOADS, lambda config: measure(config, repeats))
    data = {"environments": ENVIRONMENTS, "tasks": TASKS, "repeats": repeats, "workloads": workloads}
    return SectionResult(data, table(data))


def table(data: dict) -> str:
    cell = partial(spread_cell, fmt=".2f")
    lines = [
        f"{data['tasks']} episodes a batch, {data['environments']} in flight, {data['repeats']} batches per mode after "
        "one warm-up batch; medians [min, max].",
        "",
        "| workload | environments | batch wall s | in environment calls s | in generation s | env steps | "
        "episodes/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, figures in data["workloads"].items():
        if "skipped" in figures:
            lines.append(f"| {label} | skipped: {figures['skipped']} | | | | | |")
            continue
        for mode in MODES:
            row = figures[mode]
            lines.append(
                f"| {label} | {mode} | {cell(row['wall_seconds'])} | {cell(row['environment_seconds'])} | "
                f"{cell(row['generation_seconds'])} | {row['steps']['median']:.0f} | "
                f"{cell(row['episodes_per_second'])} |"
            )
        lines.append(
            f"| {label} | in process / processes | **{figures['wall_speedup']:.2f}x** wall | "
            f"**{figures['environment_speedup']:.2f}x** | | | |"
        )
    return "\n".join(lines) + "\n"
