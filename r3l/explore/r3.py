"""R3 (Reflect, Retry, Reward): on a failed first attempt, sample G reflections, retry once after each,
and reward only the reflection tokens with the second attempt's binary success (GRPO over reflections)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from statistics import mean

from pydantic import Field

from r3l.agent.records import conversation_experience
from r3l.envs import Task, judge, require_single_turn
from r3l.errors import UserError
from r3l.experience import Experience
from r3l.explore import STRATEGIES, Strategy, StrategySettings
from r3l.failure_set import FailureSet, build_failure_set, stored_completion
from r3l.reflection.prompts import ReflectionPrompts
from r3l.reflection.retry import Attempt, Retry, reflect_and_retry, start_conversation


class R3Settings(StrategySettings):
    max_samples: int = Field(
        8, gt=0, description="first attempts tried per query when building the failure set (paper: 64)"
    )
    max_queries: int | None = Field(256, gt=0, description="training queries tried for the failure set (None: all)")
    refresh_every: int = Field(0, ge=0, description="rebuild the failure set every N steps (0: never)")
    train_second_attempt: bool = Field(False, description="also train the second attempt's tokens (ablation)")
    include_feedback: bool = Field(False, description="put the verifier's feedback in the reflection prompt")
    reflect_prompt: str | None = Field(None, description="text file replacing the reflection instruction")
    retry_prompt: str | None = Field(None, description="text file replacing the retry instruction")
    reflection_max_new_tokens: int = Field(128, gt=0)
    reflection_temperature: float | None = Field(
        None, ge=0, description="temperature of the reflections (unset: sampling.temperature)"
    )


def retry_experience(retry: Retry, group: str) -> Experience:
    """The reflection (and second attempt) trained, each scored at the temperature it was sampled at."""
    experience = conversation_experience(
        retry.conversation,
        group,
        "reflection",
        1.0 if retry.verdict.success else 0.0,
        retry.reflection.text,
        task_id=retry.failure.task.id,
        first_attempt=retry.failure.completion.text,
        first_attempt_feedback=retry.failure.verdict.feedback,
        second_attempt=retry.second.text,
        second_attempt_success=retry.verdict.success,
        second_attempt_feedback=retry.verdict.feedback,
        reflection_span=list(retry.reflection_span),
        second_attempt_span=list(retry.second_span),
    )
    experience.segments = retry.segments
    return experience


@STRATEGIES.register("r3")
class R3Strategy(Strategy):
    Settings = R3Settings
    settings: R3Settings

    def __init__(self, context, **settings):
        super().__init__(context, **settings)
        s = self.settings
        self.prompts = ReflectionPrompts.load(s.reflect_prompt, s.retry_prompt, s.include_feedback)
        self.failure_counts: dict[str, float] = {}  # of the latest failure-set build, logged every step

    def training_tasks(
        self, train_tasks: Sequence[Task], run_dir: Path | None, limit: int | None = None, build: int = 0
    ):
        c, s = self.context, self.settings
        require_single_turn(c.make_env, "the r3 strategy")
        path = None if run_dir is None else run_dir / f"failure_set_{build}.jsonl"
        failures: FailureSet = build_failure_set(
            train_tasks,
            c.make_env,
            c.generator,
            c.tokenizer,
            replace(c.sampling, seed=(c.sampling.seed or 0) + build),
            c.prompt_format,
            max_samples=s.max_samples,
            max_queries=s.max_queries,
            target=limit,
            path=path,
            limits=c.limits,
        )
        self.failure_counts = {**failures.counts(), "failure_set/builds": float(build + 1)}
        self.setup_generated_tokens = float(failures.generated_tokens)
        if not failures.tasks:
            raise UserError(
                f"the model solved all {failures.tried} queries tried, so R3 has no failures to learn from; "
                "raise algorithm.strategy_args.max_queries or use a harder task"
            )
        return failures.tasks

    def refresh_due(self, step: int) -> bool:
        return bool(self.settings.refresh_every) and step > 0 and step % self.settings.refresh_every == 0

    def explore(self, tasks: Sequence[Task], step: int):
        c, s = self.context, self.settings
        env = c.make_env()
        failures = []
        for task in tasks:
            conversation = start_conversation(task, env, c.tokenizer, c.prompt_format)
            completion = stored_completion(task)
            conversation.add_assistant(completion, trained=False)
            failures.append(Attempt(task, conversation, completion, judge(env, task, completion.text)))
        seed = None if c.sampling.seed is None else c.sampling.seed + step
        temperature = c.sampling.temperature if s.reflection_temperature is None else s.reflection_temperature
        reflect_params = replace(
            c.sampling, max_new_tokens=s.reflection_max_new_tokens, temperature=temperature, seed=seed
        )
        retry_params = replace(c.sampling, seed=None if seed is None else seed + 1)
        groups = reflect_and_retry(
            failures,
            c.make_env,
            c.generator,
            self.prompts,
            reflect_params,
            retry_params,
            n_reflections=c.group_size,
            train_second_attempt=s.train_second_attempt,
            limits=c.limits,
        )
        experiences = [
            retry_experience(retry, group=f"step{step}-{failure.task.id}")
            for failure, group in zip(failures, groups)
            for retry in group
        ]
        retries = [retry for group in groups for retry in group]
        metrics = {
            "reward": mean(e.reward for e in experiences),
            "second_try_success": mean(float(r.verdict.success) for r in retries),
            "hack/prompt_copies": mean(float(r.verdict.success and r.copied_prompt) for r in retries),
            "reflection_length": mean(len(r.reflection.tokens) for r in retries),
            "response_length": mean(len(r.second.tokens) for r in retries),
            "zero_variance_groups": mean(float(len({r.verdict.success for r in g}) == 1) for g in groups),
            "generated_tokens": float(sum(len(r.reflection.tokens) + len(r.second.tokens) for r in retries)),
            "tokenization_drift_rate": mean(float(r.conversation.drift() > 0) for r in retries),
            **self.failure_counts,
        }
        metrics["success"] = metrics["second_try_success"]
        return experiences, metrics
