"""Section `side_by_side`: our GRPO step timed against TRL's GRPOTrainer (`--vs trl`) at equal work.

The two sides alternate A B A B, one optimizer step each, on the same task batches; the first
`warmup` pairs are not measured. Without `--vs` only our side runs.
"""

from __future__ import annotations

import torch

from r3l.bench.flops import ModelShape
from r3l.bench.ours import OursRunner
from r3l.bench.records import StepRecord
from r3l.bench.registry import BenchContext, SectionResult, section
from r3l.bench.stats import (
    Workload,
    equal_work_problems,
    paired_ratios,
    relative_difference,
    spread,
    spread_cell,
)
from r3l.bench.trl_side import TRLRunner, bench_dtype
from r3l.errors import UserError
from r3l.logging import console

OURS, TRL = "r3l", "trl"
TOKEN_TOLERANCE = 0.15  # sampled lengths differ between the sides; more than this is not the same work
COMPETITORS = (TRL,)


@section("side_by_side", order=10, title="Side by side")
def side_by_side(ctx: BenchContext) -> SectionResult:
    if ctx.vs is not None and ctx.vs not in COMPETITORS:
        raise UserError(f"--vs {ctx.vs}: unknown trainer; choose from: {', '.join(COMPETITORS)}")
    ours = OursRunner(ctx.config, ctx.out_dir / OURS)
    steps = ctx.warmup + ctx.repeats
    batches = ours.upcoming_batches(steps)
    ours.check_sampling_is_possible(batches[0])
    records: dict[str, list[StepRecord]] = {OURS: []}
    theirs = None

    def report(index: int, side: str, record: StepRecord) -> None:
        phase = "warm-up" if index < ctx.warmup else "measured"
        console.print(
            f"[dim]bench step {index + 1}/{steps} ({phase}) {side}: {record.seconds:.2f} s, "
            f"{record.generated_tokens} generated tokens[/]"
        )

    def ours_step(index: int) -> None:
        records[OURS].append(ours.step())
        report(index, OURS, records[OURS][-1])

    if ctx.vs == TRL:
        theirs = TRLRunner(ctx.config, batches, ours.trainer.parts.make_env, ctx.out_dir / TRL, ctx.trl_generator)
        records[TRL] = []

        def after_trl_step(index: int, record: StepRecord) -> None:
            records[TRL].append(record)
            report(index, TRL, record)
            ours_step(index)

        theirs.run(after_trl_step)
    else:
        for index in range(steps):
            ours_step(index)
    measured = {side: side_records[ctx.warmup :] for side, side_records in records.items()}
    data = summarise(ctx, measured, ModelShape.from_config(ours.model.config))
    data["settings"]["generators"] = {OURS: generator_label(ctx.config)}
    if theirs is not None:
        data["settings"]["generators"][TRL] = TRL_GENERATOR_LABELS[theirs.generator]
    details = {"steps": {side: [r.to_json() for r in side_records] for side, side_records in measured.items()}}
    if theirs is not None:
        tasks = [task for batch in batches[ctx.warmup :] for task in batch]
        ours_work = workload(ctx, measured[OURS], ours.prompt_ids(tasks), our_settings(ctx))
        skip = ctx.warmup * ctx.config.train.tasks_per_step
        trl_work = workload(ctx, measured[TRL], theirs.prompt_ids[skip:], trl_settings(theirs.trainer.args))
        data["equal_work"] = equal_work_record(ours_work, trl_work)
        details["trl_settings"] = dict(theirs.settings)
    return SectionResult(data, table(data), details)


TRL_GENERATOR_LABELS = {"hf": "transformers generate", "vllm": "vLLM colocate"}


def generator_label(config) -> str:
    g = config.generator
    decode = g.settings.get("decode", "dynamic")
    return {"hf": f"HF loop, {decode} KV cache", "vllm": "vLLM in-process"}.get(g.name, g.name)


def our_settings(ctx: BenchContext) -> dict:
    c = ctx.config
    return {
        "group_size": c.sampling.group_size,
        "max_new_tokens": c.sampling.max_new_tokens,
        "temperature": c.sampling.temperature,
        "top_p": c.sampling.top_p,
        "dtype": bench_dtype(c),
        "micro_batch_size": c.train.micro_batch_size,
        "kl_coef": c.algorithm.kl_coef,
        "learning_rate": c.train.lr,
        "gradient_checkpointing": c.model.gradient_checkpointing,
    }


def trl_settings(args) -> dict:
    """The same settings read back from the GRPOConfig TRL actually ran with."""
    return {
        "group_size": args.num_generations,
        "max_new_tokens": args.max_completion_length,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "dtype": "bfloat16" if args.bf16 else "float32",
        "micro_batch_size": args.per_device_train_batch_size,
        "kl_coef": args.beta,
        "learning_rate": args.learning_rate,
        "gradient_checkpointing": args.gradient_checkpointing,
    }


def workload(ctx: BenchContext, records: list[StepRecord], prompt_ids, settings: dict) -> Workload:
    return Workload(
        settings={**settings, "optimizer_updates": len(records), "prompts": sum(r.prompts for r in records)},
        prompt_ids=tuple(tuple(ids) for ids in prompt_ids),
        completions=sum(r.completions for r in records),
        generated_tokens=sum(r.generated_tokens for r in records),
        trained_tokens=sum(r.trained_tokens for r in records),
    )


def equal_work_record(ours: Workload, theirs: Workload) -> dict:
    problems = equal_work_problems(ours, theirs, TOKEN_TOLERANCE)
    return {
        "ok": not problems,
        "problems": problems,
        "prompt_tokens_identical": ours.prompt_ids == theirs.prompt_ids,
        "settings": ours.settings,
        "generated_tokens_difference": relative_difference(ours.generated_tokens, theirs.generated_tokens),
        "token_tolerance": TOKEN_TOLERANCE,
    }


def side_summary(records: list[StepRecord]) -> dict:
    return {
        "step_seconds": spread([r.seconds for r in records]),
        "rollout_seconds": spread([r.rollout_seconds for r in records]),
        "train_seconds": spread([r.train_seconds for r in records]),
        "rollout_tokens_per_s": spread([r.rollout_tokens_per_s for r in records]),
        "train_tokens_per_s": spread([r.train_tokens_per_s for r in records]),
        "prompts": sum(r.prompts for r in records),
        "completions": sum(r.completions for r in records),
        "generated_tokens": sum(r.generated_tokens for r in records),
        "trained_tokens": sum(r.trained_tokens for r in records),
        "optimizer_updates": len(records),
    }


def summarise(ctx: BenchContext, measured: dict[str, list[StepRecord]], shape: ModelShape) -> dict:
    c = ctx.config
    data = {
        "settings": {
            "model": c.model.name,
            "env": c.env.name,
            "prompts_per_step": c.train.tasks_per_step,
            "group_size": c.sampling.group_size,
            "max_new_tokens": c.sampling.max_new_tokens,
            "temperature": c.sampling.temperature,
            "dtype": bench_dtype(c),
            "micro_batch_size": c.train.micro_batch_size,
            "warmup_steps": ctx.warmup,
            "measured_steps": ctx.repeats,
            "torch_threads": torch.get_num_threads(),
            "vs": ctx.vs,
        },
        "model_shape": shape.to_json(),
        "sides": {side: side_summary(records) for side, records in measured.items()},
    }
    if TRL in measured:
        step = paired_ratios([r.seconds for r in measured[TRL]], [r.seconds for r in measured[OURS]])
        per_token = paired_ratios(
            [r.seconds / max(r.generated_tokens, 1) for r in measured[TRL]],
            [r.seconds / max(r.generated_tokens, 1) for r in measured[OURS]],
        )
        data["step_time_ratio_trl_over_r3l"] = spread(step)
        data["per_token_time_ratio_trl_over_r3l"] = spread(per_token)
    return data


def table(data: dict) -> str:
    """Markdown: one column per side (median [min, max] over measured steps), then TRL/r3l."""
    sides = data["sides"]
    names: list[str] = [OURS] + [s for s in sides if s != OURS]
    ratio = data.get("step_time_ratio_trl_over_r3l")
    header = ["", *[{OURS: "r3l", TRL: "TRL GRPOTrainer"}.get(n, n) for n in names]] + (["TRL / r3l"] if ratio else [])
    rows = [
        ("step time (s)", "step_seconds", ".2f"),
        ("rollout time (s)", "rollout_seconds", ".2f"),
        ("training time (s)", "train_seconds", ".2f"),
        ("rollout tokens/s", "rollout_tokens_per_s", ".0f"),
        ("training tokens/s", "train_tokens_per_s", ".0f"),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, key, fmt in rows:
        cells = [spread_cell(sides[n][key], fmt) for n in names]
        extra = []
        if ratio:
            extra = [
                f"**{ratio['median']:.2f}x** [{ratio['min']:.2f}, {ratio['max']:.2f}]" if key == "step_seconds" else ""
            ]
        lines.append("| " + " | ".join([label, *cells, *extra]) + " |")
    for label, total in (
        ("generated tokens (sum)", "generated_tokens"),
        ("trained tokens (sum)", "trained_tokens"),
        ("prompts / completions / updates", None),
    ):
        if total:
            cells = [str(sides[n][total]) for n in names]
        else:
            cells = [
                f"{sides[n]['prompts']} / {sides[n]['completions']} / {sides[n]['optimizer_updates']}" for n in names
            ]
        lines.append("| " + " | ".join([label, *cells, *([""] if ratio else [])]) + " |")
    settings = data["settings"]
    lines.append("")
    lines.append(
        f"Medians [min, max] over {settings['measured_steps']} steps after {settings['warmup_steps']} "
        f"warm-up; {settings['model']}, {settings['env']}, {settings['prompts_per_step']} prompts x "
        f"{settings['group_size']} completions, at most {settings['max_new_tokens']} new tokens, temperature "
        f"{settings['temperature']}, {settings['dtype']}, micro-batch {settings['micro_batch_size']}, "
        f"{settings['torch_threads']} thread{'s' if settings['torch_threads'] != 1 else ''}."
    )
    generators = settings.get("generators", {})
    if generators:
        lines.append(
            "Generation: "
            + "; ".join(f"{'r3l' if side == OURS else 'TRL'} {label}" for side, label in generators.items())
            + "."
        )
    if ratio:
        per_token = data["per_token_time_ratio_trl_over_r3l"]
        lines.append(
            f"Per generated token the ratio is {per_token['median']:.2f}x "
            f"[{per_token['min']:.2f}, {per_token['max']:.2f}]."
        )
    equal = data.get("equal_work")
    if equal:
        verdict = "yes" if equal["ok"] else "NO: " + "; ".join(equal["problems"])
        lines.append(
            f"Equal work: {verdict} (prompts token-identical: {equal['prompt_tokens_identical']}; generated "
            f"tokens {equal['generated_tokens_difference']:.1%} apart, tolerance "
            f"{equal['token_tolerance']:.0%})."
        )
    return "\n".join(lines) + "\n"
