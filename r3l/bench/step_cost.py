"""Section `step_cost`: what one R3L training step costs against one GRPO step on the same tasks, where the time
goes (base episodes, reflections, retries, the learner) and what the learner computed.

Each arm is the bench's config with its algorithm preset, trained by the real `Trainer.train_step` from the same
seed (so the same task batches) for `warmup` unmeasured and `repeats` measured steps, one arm after the other.
The "one pass" arms set `train.micro_batch_overhead` so high that the learner cuts micro-batches only at
`train.micro_batch_size` (how it batched before padding-aware micro-batches), to show what that change bought.
Run it on the miniature's setting: `r3l bench examples/miniature_arithmetic.yaml --sections step_cost`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.bench.stats import median_ratio, spread_cell
from r3l.bench.train_steps import timed_steps, with_overrides

ONE_PASS = "train.micro_batch_overhead=1000000000"
ARMS = {
    "grpo": ["algorithm=grpo"],
    "r3l": ["algorithm=r3l"],
    "grpo, one pass per micro-batch": ["algorithm=grpo", ONE_PASS],
    "r3l, one pass per micro-batch": ["algorithm=r3l", ONE_PASS],
}
PHASES = ("base", "reflect", "retry")
FIGURES = (
    "step_seconds",
    "rollout_seconds",
    "train_seconds",
    *(f"phase_seconds/{phase}" for phase in PHASES),
    "generated_tokens",
    "trained_tokens",
    "forward_positions",
    "forward_padded_positions",
)


@section("step_cost", order=35, title="R3L against GRPO: one training step's cost and where it goes")
def step_cost(ctx: BenchContext) -> SectionResult:
    repeats = max(1, ctx.repeats)
    arms = {
        label: timed_steps(
            with_overrides(ctx.config, [*overrides, "eval.size=0", "logging.progress=false"]),
            ctx.out_dir / "step_cost" / label.replace(", ", "_"),
            ctx.warmup,
            repeats,
            FIGURES,
        )
        for label, overrides in ARMS.items()
    }
    data: dict[str, Any] = {
        "tasks_per_step": ctx.config.train.tasks_per_step,
        "group_size": ctx.config.sampling.group_size,
        "warmup": ctx.warmup,
        "repeats": repeats,
        "arms": arms,
        "r3l_over_grpo": median_ratio(arms["r3l"]["step_seconds"], arms["grpo"]["step_seconds"]),
    }
    r3l_one_pass, grpo_one_pass = (arms.get(f"{name}, one pass per micro-batch") for name in ("r3l", "grpo"))
    if r3l_one_pass and grpo_one_pass:  # ARMS narrowed to grpo and r3l (a shorter run) leaves them out
        data["r3l_over_grpo_one_pass"] = median_ratio(r3l_one_pass["step_seconds"], grpo_one_pass["step_seconds"])
    return SectionResult(data, table(data))


def table(data: dict) -> str:
    cell = partial(spread_cell, fmt=".1f")
    lines = [
        f"{data['tasks_per_step']} tasks x {data['group_size']} samples a step, the same task batches in every arm; "
        f"{data['repeats']} measured steps per arm after {data['warmup']} unmeasured; medians [min, max]; arms one "
        "after the other.",
        "",
        "| arm | step s | base s | reflect s | retry s | learner s | generated tokens | learner positions "
        "(real / padded) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, figures in data["arms"].items():
        lines.append(
            f"| {label} | {cell(figures['step_seconds'])} | {cell(figures['phase_seconds/base'])} | "
            f"{cell(figures['phase_seconds/reflect'])} | {cell(figures['phase_seconds/retry'])} | "
            f"{cell(figures['train_seconds'])} | {figures['generated_tokens']['median']:.0f} | "
            f"{figures['forward_positions']['median']:.0f} / {figures['forward_padded_positions']['median']:.0f} |"
        )
    lines += [
        "",
        f"R3L / GRPO median step: **{data['r3l_over_grpo']:.2f}x**"
        + (
            f" (one pass per micro-batch: {data['r3l_over_grpo_one_pass']:.2f}x)."
            if "r3l_over_grpo_one_pass" in data
            else "."
        ),
    ]
    return "\n".join(lines) + "\n"
