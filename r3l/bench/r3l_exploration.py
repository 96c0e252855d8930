"""Section `r3l_exploration`: what a successful R3L retry costs in generated tokens when it starts from the
pivot its reflection names versus from scratch (Reflect-GRPO), on the same tasks and seeds.

Both arms play the same base episodes and reflections (same seeds); they differ only in where retries
start. A retry's cost is the tokens it generated itself (after the pivot) plus its reflection, once per
retried base episode. A single-turn environment has no pivot to retry from, so the section then uses
TextWorldExpress's coin game.
"""

from __future__ import annotations

from typing import Any

from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.config import Config, apply_override, parse_override

FALLBACK_ENV = ["env=textworld_express", "env.args.games=[coin]", "env.args.max_steps=10"]
ARMS = ("pivot", "scratch")


def exploration_config(config: Config, retry_from: str) -> Config:
    """The bench's model, generator and seed; R3L with retries from `retry_from`; a multi-turn env."""
    from r3l.envs import env_class

    tree = config.model_dump(mode="json")
    overrides = [
        "algorithm=r3l",
        f"algorithm.strategy_args.retry_from={retry_from}",
        "sampling.group_size=4",
        f"sampling.max_new_tokens={max(config.sampling.max_new_tokens, 64)}",
    ]
    if not env_class(config.env.name).retry_from_pivot:
        overrides = FALLBACK_ENV + overrides
    for override in overrides:
        apply_override(tree, *parse_override(override))
    return Config.model_validate(tree)


def cost_per_success(tokens: float, successes: float) -> float | None:
    """Generated tokens per successful retry (None when no retry succeeded)."""
    return tokens / successes if successes else None


def measure(config: Config, tasks: int, steps: int) -> dict:
    from r3l.build import build_parts
    from r3l.seeding import seed_everything

    seed_everything(config.run.seed)
    parts = build_parts(config)
    batch = list(parts.make_env().tasks("train"))[:tasks]
    totals: dict[str, Any] = {
        "retries": 0.0,
        "retry_successes": 0.0,
        "retry_tokens": 0.0,
        "reflection_tokens": 0.0,
        "base_episodes": 0.0,
        "base_successes": 0.0,
        "base_tokens": 0.0,
    }
    for step in range(steps):
        _, metrics = parts.strategy.explore(batch, step)
        totals["retries"] += metrics.get("retry_count", 0.0)
        totals["retry_successes"] += metrics.get("retry_successes", 0.0)
        totals["retry_tokens"] += metrics.get("retry_generated_tokens", 0.0)
        totals["reflection_tokens"] += metrics.get("retry_reflection_tokens", 0.0)
        totals["base_episodes"] += metrics.get("base_count", 0.0)
        totals["base_successes"] += metrics.get("base_successes", 0.0)
        totals["base_tokens"] += metrics.get("base_generated_tokens", 0.0)
    parts.strategy.runner.close()
    totals["tokens_per_successful_retry"] = cost_per_success(
        totals["retry_tokens"] + totals["reflection_tokens"], totals["retry_successes"]
    )
    totals["env"] = config.env.name
    return totals


@section("r3l_exploration", order=30, title="R3L exploration cost: retry from the pivot vs from scratch")
def r3l_exploration(ctx: BenchContext) -> SectionResult:
    steps = max(1, min(ctx.repeats, 3))
    arms = {arm: measure(exploration_config(ctx.config, arm), tasks=4, steps=steps) for arm in ARMS}
    pivot, scratch = arms["pivot"]["tokens_per_successful_retry"], arms["scratch"]["tokens_per_successful_retry"]
    data = {
        "arms": arms,
        "steps": steps,
        "tasks": 4,
        "tokens_per_success_ratio_scratch_over_pivot": scratch / pivot if pivot and scratch else None,
    }
    return SectionResult(data, table(data))


def table(data: dict) -> str:
    def shown(value):
        return "n/a (no successful retry)" if value is None else f"{value:.0f}"

    lines = [
        f"Same {data['tasks']} tasks and seeds, {data['steps']} step(s), env `{data['arms']['pivot']['env']}`.",
        "",
        "| retry from | retries | successful | generated tokens (retries + their reflections) | "
        "tokens per successful retry |",
        "|---|---|---|---|---|",
    ]
    for arm, figures in data["arms"].items():
        lines.append(
            f"| {arm} | {figures['retries']:.0f} | {figures['retry_successes']:.0f} | "
            f"{figures['retry_tokens'] + figures['reflection_tokens']:.0f} | "
            f"{shown(figures['tokens_per_successful_retry'])} |"
        )
    ratio = data["tokens_per_success_ratio_scratch_over_pivot"]
    if ratio is not None:
        lines.append(f"\nScratch / pivot tokens per successful retry: **{ratio:.2f}x**")
    return "\n".join(lines) + "\n"
