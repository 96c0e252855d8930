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
from r3l.agent.records import rewarded_rejected_ending
from r3l.envs import Env, Task, require_single_turn
from r3l.faults import failpoint
from r3l.reflection.prompts import ReflectionPrompts
from r3l.reflection.retry import first_attempts, reflect_and_retry, retry_after_verdict
from r3l.rollout.chat import PromptFormat
from r3l.rollout.generator import Generator, SamplingParams


def task_mean_interval(task_means: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """95% interval of the mean of per-task means (each the share of a task's draws that succeeded): the draws of
    one task are not independent problems, so the spread is the tasks'; clipped to [0, 1]."""
    count = len(task_means)
    if count < 2:
        return 0.0, 1.0
    mean = sum(task_means) / count
    variance = sum((m - mean) ** 2 for m in task_means) / (count - 1)
    half = z * (variance / count) ** 0.5
    return max(0.0, mean - half), min(1.0, mean + half)


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
            "rewarded_rejected_endings": sum(1 for s in self.samples if s.get("rewarded_rejected_ending")),
            "format_missing": true_share([s.get("format_missing") for s in self.samples]),
            "cut_off": true_share([s.get("cut_off") for s in self.samples]),
            "draws": 1 + max((s.get("draw", 0) for s in self.samples), default=0),
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
    draws: int = 1,
) -> EvalResult:
    """`draws` episodes per task (single- or multi-turn; each draw its own seeded stream), every one a sample; the
    interval is over the tasks' mean outcomes where there are several draws, Wilson's over the tasks otherwise."""
    runner = EpisodeRunner(make_env, generator, tokenizer, prompt_format, limits)
    try:
        episodes = runner.run([EpisodeStart(task) for task in tasks for _ in range(draws)], params)
        single_turn = runner.action_format == "whole_reply"
    finally:
        runner.close()
    successes = sum(e.success for e in episodes)
    total = len(episodes)
    if draws > 1:
        per_task = [sum(e.success for e in episodes[i : i + draws]) / draws for i in range(0, total, draws)]
        low, high = task_mean_interval(per_task)
    else:
        low, high = wilson_interval(successes, total)
    missing = format_rule(make_env) if single_turn else None
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
            "rewarded_rejected_ending": rewarded_rejected_ending(e),
            "format_missing": missing(e.text) if missing else e.termination == "format_error",
            "cut_off": bool(e.steps) and e.steps[-1].completion.cut_off,
            **({"draw": index % draws} if draws > 1 else {}),
        }
        for index, e in enumerate(episodes)
    ]
    return EvalResult(
        successes / max(1, total), low, high, successes, total, sum(e.reward for e in episodes) / max(1, total), samples
    )


def format_rule(make_env: Callable[[], Env]) -> Callable[[str], bool | None]:
    """Whether a reply lacks the answer format of a single-turn environment (`Env.answer_format_missing`)."""
    return make_env().answer_format_missing


def true_share(flags: Sequence[bool | None]) -> float | None:
    """The share of True among the known flags; None when none is known."""
    known = [flag for flag in flags if flag is not None]
    return sum(known) / len(known) if known else None


def format_hint(summary: dict[str, Any], structured_replies: bool) -> str | None:
    """One line for an evaluation where most first replies lack the answer format the environment reads: where at
    least half of those were cut off at the token limit (a long solution before its \\boxed{} answer), the limit;
    else (a model that writes a right call in a ```json fence, not in `<tool_call>` tags, scores 0) the grammar
    that decodes every reply in that format, where it is off."""
    first = summary.get("first_try", summary)
    share, cut_off = first.get("format_missing"), first.get("cut_off")
    if share is None or share < 0.5:
        return None
    if cut_off is not None and cut_off >= share / 2:
        return (
            f"{share:.0%} of the first replies lack the answer format this environment reads and {cut_off:.0%} were"
            " cut off at the token limit (eval.json holds every reply); raise eval.max_new_tokens"
        )
    if structured_replies:
        return None
    return (
        f"{share:.0%} of the first replies lack the answer format this environment reads (eval.json holds every"
        " reply); structured.replies=true decodes every reply in that format"
    )


def _column(successes: int, total: int, format_missing: float | None, cut_off: float | None) -> dict[str, Any]:
    return {
        "success": successes / max(1, total),
        "ci95": list(wilson_interval(successes, total)),
        "successes": successes,
        "format_missing": format_missing,
        "cut_off": cut_off,
    }


@dataclass(frozen=True)
class TwoAttempts:
    """How R3's two-attempt evaluation reflects: its templates, the reflection's token limit and temperature
    (None: the evaluation's own), and whether the verdict-alone control runs beside it."""

    prompts: ReflectionPrompts
    reflection_max_new_tokens: int = 128
    reflection_temperature: float | None = None
    verdict_control: bool = True

    def reflect_params(self, params: SamplingParams) -> SamplingParams:
        temperature = params.temperature if self.reflection_temperature is None else self.reflection_temperature
        return replace(params, max_new_tokens=self.reflection_max_new_tokens, temperature=temperature)


def evaluate_two_attempts(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    prompt_format: PromptFormat,
    settings: TwoAttempts,
    limits: AgentLimits = AgentLimits(),
) -> dict[str, Any]:
    """R3's table row: first-try accuracy, and second-try accuracy over all tasks, where each first-try failure
    gets one reflection and one more attempt; with `settings.verdict_control`, beside it the control: the same
    failures asked once more after the verdict alone, no reflection. Each column counts the replies that miss
    the answer format (the first attempts, then the second attempts of the failures), so a gain in format is
    told from a gain in value."""
    attempts = [
        row[0] for row in first_attempts(tasks, make_env, generator, tokenizer, params, prompt_format, limits=limits)
    ]
    failures = [a for a in attempts if not a.verdict.success]
    prompts, verdict_control = settings.prompts, settings.verdict_control
    retries = reflect_and_retry(
        failures, make_env, generator, prompts, settings.reflect_params(params), params, n_reflections=1, limits=limits
    )
    controls = retry_after_verdict(failures, make_env, generator, prompts, params, limits) if verdict_control else []
    missing = format_rule(make_env)
    first = sum(a.verdict.success for a in attempts)
    second = first + sum(group[0].verdict.success for group in retries)
    total = len(attempts)
    samples: list[dict[str, Any]] = [
        {
            "task_id": a.task.id,
            "first_attempt": a.completion.text,
            "first_success": a.verdict.success,
            "first_copied_prompt": a.copied_prompt,
            "first_format_missing": missing(a.completion.text),
            "first_cut_off": a.completion.cut_off,
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
                "second_format_missing": missing(retry.second.text),
                "second_cut_off": retry.second.cut_off,
            }
        )
    for control in controls:
        by_id[control.failure.task.id].update(
            {
                "verdict_only_attempt": control.second.text,
                "verdict_only_success": control.verdict.success,
                "verdict_only_copied_prompt": control.copied_prompt,
                "verdict_only_format_missing": missing(control.second.text),
                "verdict_only_cut_off": control.second.cut_off,
            }
        )

    def second_share(attempt: str, measure: str) -> float | None:
        """A second-try column's share: the failures' second attempts in place of their first."""
        return true_share(
            [s.get(f"{attempt}_{measure}", s[f"first_{measure}"]) if not s["first_success"] else None for s in samples]
        )

    def second_column(successes: int, attempt: str) -> dict[str, Any]:
        return _column(successes, total, second_share(attempt, "format_missing"), second_share(attempt, "cut_off"))

    record = {
        "first_try": _column(
            first,
            total,
            true_share([s["first_format_missing"] for s in samples]),
            true_share([s["first_cut_off"] for s in samples]),
        ),
        "second_try": second_column(second, "second"),
        "total": total,
        "rewarded_prompt_copies": (
            rewarded_prompt_copies(samples, "first_success", "first_copied_prompt")
            + rewarded_prompt_copies(samples, "second_success", "second_copied_prompt")
        ),
        "samples": samples,
    }
    if verdict_control:
        control_successes = first + sum(c.verdict.success for c in controls)
        record["second_try_verdict_only"] = second_column(control_successes, "verdict_only")
    return record


R3_COLUMNS = (
    ("first_try", "1st try"),
    ("second_try", "2nd try"),
    ("second_try_verdict_only", "2nd try after the verdict alone (control)"),
)


def r3_table(untrained: dict[str, Any], trained: dict[str, Any]) -> tuple[str, str]:
    """The paper's four columns as (Markdown, CSV), with the control's two beside them where both evaluations
    ran it; each cell with its 95% Wilson interval over the problems and the share of replies missing the answer
    format."""
    cells, header = [], []
    for key, name in R3_COLUMNS:
        if key in untrained and key in trained:
            cells += [untrained[key], trained[key]]
            header += [f"untrained {name}", f"trained {name}"]
    order = [0, 2, 1, 3, *range(4, len(cells))]  # the paper's order: untrained 1st, 2nd, trained 1st, 2nd
    cells, header = [cells[i] for i in order], [header[i] for i in order]
    shown = [
        f"{c['success']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
        + (f", format missed {c['format_missing']:.0%}" if c.get("format_missing") is not None else "")
        for c in cells
    ]
    markdown = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n| " + " | ".join(shown) + " |\n"
    csv = ",".join(header) + "\n" + ",".join(f"{c['success']:.4f}" for c in cells) + "\n"
    return markdown, csv


def held_out_evaluation(
    tasks: Sequence[Task],
    context: RolloutContext,
    params: SamplingParams,
    two_attempts: TwoAttempts | None = None,
    draws: int = 1,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
    """(full record with samples, summary, metrics to log): `draws` sampled attempts per task, or with
    `two_attempts` R3's two, played in the same rollout context as exploration (environments, generator, tokenizer,
    prompt format, agent limits)."""
    started = time.perf_counter()
    failpoint("evaluation")
    c = context
    if two_attempts is not None:
        record, summary, metrics = _two_attempts(tasks, c, params, two_attempts)
    else:
        record, summary, metrics = _one_attempt(tasks, c, params, draws)
    seconds = time.perf_counter() - started
    return {**record, "seconds": seconds}, {**summary, "seconds": seconds}, {**metrics, "eval/seconds": seconds}


def _two_attempts(tasks, c: RolloutContext, params: SamplingParams, settings: TwoAttempts):
    require_single_turn(c.make_env, "eval.attempts=2 (R3's reflect-and-retry evaluation)")
    record = evaluate_two_attempts(
        tasks, c.make_env, c.generator, c.tokenizer, params, c.prompt_format, settings, c.limits
    )
    summary = {k: v for k, v in record.items() if k != "samples"}
    metrics = {
        "eval/success": record["first_try"]["success"],
        "eval/second_try_success": record["second_try"]["success"],
        "eval/hack/prompt_copies": record["rewarded_prompt_copies"] / max(1, record["total"]),
    }
    if "second_try_verdict_only" in record:
        metrics["eval/second_try_verdict_only_success"] = record["second_try_verdict_only"]["success"]
    return record, summary, metrics


def _one_attempt(tasks, c: RolloutContext, params: SamplingParams, draws: int = 1):
    result = evaluate(tasks, c.make_env, c.generator, c.tokenizer, params, c.prompt_format, c.limits, draws)
    summary = result.summary()
    metrics = {
        "eval/success": result.success,
        "eval/reward": result.mean_reward,
        "eval/hack/prompt_copies": summary["rewarded_prompt_copies"] / max(1, result.total),
        "eval/hack/rewarded_rejected_endings": summary["rewarded_rejected_endings"] / max(1, result.total),
    }
    return {**summary, "samples": result.samples}, summary, metrics
