"""Held-out evaluation: success rate with a Wilson confidence interval."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from r3l.agent.context import RolloutContext
from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart
from r3l.envs import Env, Task, require_single_turn
from r3l.faults import failpoint
from r3l.reflection.prompts import ReflectionPrompts
from r3l.reflection.retry import first_attempts, reflect_and_retry
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Generator, SamplingParams


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (well-behaved at 0 and 1)."""
    if total == 0:
        return 0.0, 1.0
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class EvalResult:
    success: float
    ci_low: float
    ci_high: float
    successes: int
    total: int
    mean_reward: float
    samples: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        top, share = most_common_completion([s["completion"] for s in self.samples])
        return {
            "success": self.success,
            "ci95": [self.ci_low, self.ci_high],
            "successes": self.successes,
            "total": self.total,
            "mean_reward": self.mean_reward,
            "most_common_completion": top,
            "most_common_completion_share": share,
            "rewarded_prompt_copies": rewarded_prompt_copies(self.samples),
        }


def rewarded_prompt_copies(
    samples: Sequence[dict[str, Any]], success_key: str = "success", copied_key: str = "copied_prompt"
) -> int:
    """Samples rewarded for an answer that copies an expression of their prompt (the reward-hacking watch)."""
    return sum(1 for sample in samples if sample.get(success_key) and sample.get(copied_key))


def most_common_completion(completions: Sequence[str]) -> tuple[str | None, float]:
    """The most frequent completion (whitespace-trimmed) and its share: near 1 means the policy has collapsed
    onto one answer whatever the task."""
    if not completions:
        return None, 0.0
    top, count = Counter(c.strip() for c in completions).most_common(1)[0]
    return top, count / len(completions)


def evaluate(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    prompt_format: PromptFormat = PromptFormat(),
    limits: AgentLimits = AgentLimits(),
) -> EvalResult:
    """One episode per task (single- or multi-turn)."""
    runner = EpisodeRunner(make_env, generator, tokenizer, prompt_format, limits)
    try:
        episodes = runner.run([EpisodeStart(task) for task in tasks], params)
    finally:
        runner.close()
    successes = sum(e.success for e in episodes)
    total = len(episodes)
    low, high = wilson_interval(successes, total)
    samples = [
        {
            "task_id": e.task.id,
            "prompt": e.task.prompt,
            "completion": e.text,
            "actions": e.actions,
            "steps": e.num_steps,
            "termination": e.termination,
            "success": e.success,
            "reward": e.reward,
            "feedback": e.feedback,
            "copied_prompt": e.copied_prompt,
        }
        for e in episodes
    ]
    return EvalResult(
        successes / max(1, total), low, high, successes, total, sum(e.reward for e in episodes) / max(1, total), samples
    )


def evaluate_two_attempts(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    prompt_format: PromptFormat,
    prompts: ReflectionPrompts,
    reflection_max_new_tokens: int = 128,
    limits: AgentLimits = AgentLimits(),
) -> dict[str, Any]:
    """R3's table row: first-try accuracy, and second-try accuracy over all tasks, where each first-try
    failure gets one reflection and one more attempt."""
    attempts = [
        row[0] for row in first_attempts(tasks, make_env, generator, tokenizer, params, prompt_format, limits=limits)
    ]
    failures = [a for a in attempts if not a.verdict.success]
    reflect_params = replace(params, max_new_tokens=reflection_max_new_tokens)
    retries = reflect_and_retry(
        failures, make_env, generator, prompts, reflect_params, params, n_reflections=1, limits=limits
    )
    first = sum(a.verdict.success for a in attempts)
    second = first + sum(group[0].verdict.success for group in retries)
    total = len(attempts)
    samples = [
        {
            "task_id": a.task.id,
            "first_attempt": a.completion.text,
            "first_success": a.verdict.success,
            "first_copied_prompt": a.copied_prompt,
            "feedback": a.verdict.feedback,
        }
        for a in attempts
    ]
    by_id = {s["task_id"]: s for s in samples}
    for group in retries:
        retry = group[0]
        by_id[retry.failure.task.id].update(
            {
                "reflection": retry.reflection.text,
                "second_attempt": retry.second.text,
                "second_success": retry.verdict.success,
                "second_copied_prompt": retry.copied_prompt,
            }
        )
    return {
        "first_try": {
            "success": first / max(1, total),
            "ci95": list(wilson_interval(first, total)),
            "successes": first,
        },
        "second_try": {
            "success": second / max(1, total),
            "ci95": list(wilson_interval(second, total)),
            "successes": second,
        },
        "total": total,
        "rewarded_prompt_copies": (
            rewarded_prompt_copies(samples, "first_success", "first_copied_prompt")
            + rewarded_prompt_copies(samples, "second_success", "second_copied_prompt")
        ),
        "samples": samples,
    }


def r3_table(untrained: dict[str, Any], trained: dict[str, Any]) -> tuple[str, str]:
    """The paper's four columns as (Markdown, CSV)."""
    cells = [untrained["first_try"], untrained["second_try"], trained["first_try"], trained["second_try"]]
    shown = [f"{c['success']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]" for c in cells]
    header = ["untrained 1st try", "untrained 2nd try", "trained 1st try", "trained 2nd try"]
    markdown = "| " + " | ".join(header) + " |\n|" + "---|" * 4 + "\n| " + " | ".join(shown) + " |\n"
    csv = ",".join(header) + "\n" + ",".join(f"{c['success']:.4f}" for c in cells) + "\n"
    return markdown, csv


def held_out_evaluation(
    tasks: Sequence[Task],
    context: RolloutContext,
    params: SamplingParams,
    attempts: int,
    prompts: ReflectionPrompts,
    reflection_max_new_tokens: int = 128,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """(full record with samples, summary, metrics to log) for one or two attempts per task, played in the same
    rollout context as exploration (environments, generator, tokenizer, prompt format, agent limits)."""
    started = time.perf_counter()
    failpoint("evaluation")
    c = context
    record, summary, metrics = _held_out(
        tasks,
        c.make_env,
        c.generator,
        c.tokenizer,
        params,
        c.prompt_format,
        attempts,
        prompts,
        c.limits,
        reflection_max_new_tokens,
    )
    seconds = time.perf_counter() - started
    return {**record, "seconds": seconds}, {**summary, "seconds": seconds}, {**metrics, "eval/seconds": seconds}


def _held_out(
    tasks, make_env, generator, tokenizer, params, prompt_format, attempts, prompts, limits, reflection_max_new_tokens
):
    if attempts == 2:
        require_single_turn(make_env, "eval.attempts=2 (R3's reflect-and-retry evaluation)")
        record = evaluate_two_attempts(
            tasks, make_env, generator, tokenizer, params, prompt_format, prompts, reflection_max_new_tokens, limits
        )
        summary = {k: v for k, v in record.items() if k != "samples"}
        return (
            record,
            summary,
            {
                "eval/success": record["first_try"]["success"],
                "eval/second_try_success": record["second_try"]["success"],
                "eval/hack/prompt_copies": record["rewarded_prompt_copies"] / max(1, record["total"]),
            },
        )
    result = evaluate(tasks, make_env, generator, tokenizer, params, prompt_format, limits)
    summary = result.summary()
    return (
        {**summary, "samples": result.samples},
        summary,
        {
            "eval/success": result.success,
            "eval/reward": result.mean_reward,
            "eval/hack/prompt_copies": summary["rewarded_prompt_copies"] / max(1, result.total),
        },
    )
