"""'math': a dialogue of up to `max_attempts` answers to one single-turn task, as in R3L's math setting.

The tasks, system prompt and verifier are those of a single-turn `source` environment (default
'gsm'; also 'arithmetic', 'countdown', 'dataset' for your own data ...), built with `source_args`.
Each reply is judged whole by the source's `verify`. A correct reply ends the episode with the
verdict's reward; a wrong one earns 0 and, while attempts remain, is answered by a user turn
(`retry_message`) that says the answer is incorrect and why (the verifier's feedback sentence).
The last attempt is paid its verdict's reward even when wrong, so a source with partial credit
gives an episode the score of its final answer, and a binary source gives 0 for a failed episode.

Sources that can reveal the correct answer in their feedback ('arithmetic', 'gsm', 'dataset') are
built with `reveal_answer_in_feedback=False` unless `source_args` says otherwise: a dialogue that
told the answer would make the next attempt a copy. A retry restarts the dialogue from its first
turn (`retry_from_pivot = False`): the earlier attempts are exactly what a retry should not see.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Mapping, Sequence
from typing import Any

from r3l.envs import ENVS, _load_all, make, register
from r3l.envs.base import Env, SingleTurnEnv, StepResult, Task
from r3l.errors import UserError

RETRY_MESSAGE = (
    "Your answer is incorrect: {feedback}. Think again and give your corrected final answer in the "
    "same format ({attempts_left} attempt(s) left)."
)
PLACEHOLDERS = ("feedback", "attempt", "attempts_left", "max_attempts")
HIDE_ANSWER = "reveal_answer_in_feedback"


def retry_text(template: str, feedback: str, attempt: int, max_attempts: int) -> str:
    """The user turn after wrong attempt number `attempt` (1-based)."""
    return template.format(
        feedback=feedback.rstrip(". "), attempt=attempt, attempts_left=max_attempts - attempt, max_attempts=max_attempts
    )


def check_template(template: Any) -> str:
    """The template if it is text whose {placeholders} are all known; else a UserError naming the fix."""
    if not isinstance(template, str) or not template.strip():
        raise UserError(f"env.args.retry_message must be non-empty text, got {template!r}")
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise UserError(
            f"env.args.retry_message is not a valid template ({error}); write literal braces as {{{{ }}}}"
        ) from None
    unknown = sorted({name for name in fields if name not in PLACEHOLDERS})
    if unknown:
        raise UserError(
            f"env.args.retry_message uses unknown placeholder(s) {', '.join(unknown)}; "
            f"use {', '.join('{' + name + '}' for name in PLACEHOLDERS)}"
        )
    return template


def source_settings(source_class: type, source_args: Mapping[str, Any]) -> dict[str, Any]:
    """`source_args`, plus reveal_answer_in_feedback=False where the source takes it and it is not set."""
    settings = dict(source_args)
    if HIDE_ANSWER not in settings and HIDE_ANSWER in inspect.signature(source_class).parameters:
        settings[HIDE_ANSWER] = False
    return settings


@register("math")
class MathDialogueEnv(Env):
    name = "math"
    description = "Up to max_attempts answers to a single-turn task (default gsm), told after each wrong one why."
    action_format = "whole_reply"
    shortest_reply = None
    retry_from_pivot = False
    steps_are_a_cost = False
    light = True
    argument_help = {
        "source": "the single-turn environment whose tasks and verifier the dialogue uses (see `r3l envs`)",
        "source_args": "that environment's settings (its reveal_answer_in_feedback defaults to false here)",
        "max_attempts": "answers allowed per task; each wrong one but the last is answered with retry_message",
        "retry_message": "the user turn after a wrong answer; placeholders: "
        + ", ".join("{" + name + "}" for name in PLACEHOLDERS),
    }

    def __init__(
        self,
        *,
        source: str = "gsm",
        source_args: Mapping[str, Any] | None = None,
        max_attempts: int = 3,
        retry_message: str = RETRY_MESSAGE,
    ):
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise UserError(f"env.args.max_attempts must be a whole number >= 1, got {max_attempts!r}")
        if source_args is None:
            source_args = {}
        if not isinstance(source_args, Mapping):
            raise UserError(f"env.args.source_args must be a mapping of the source's settings, got {source_args!r}")
        self.retry_message = check_template(retry_message)
        _load_all()
        source_class = ENVS.get(source)
        if not (isinstance(source_class, type) and issubclass(source_class, SingleTurnEnv)):
            single = [name for name, cls in ENVS if issubclass(cls, SingleTurnEnv)]
            raise UserError(f"env.args.source must be a single-turn environment ({', '.join(single)}), got '{source}'")
        self.source: SingleTurnEnv = make(source, **source_settings(source_class, source_args))  # type: ignore[assignment]
        self.source_name = source
        self.max_attempts = max_attempts
        self.deterministic = self.source.deterministic
        self.system_prompt = self.source.system_prompt
        self._task: Task | None = None
        self._attempt = 0

    def tasks(self, split: str) -> Sequence[Task]:
        return self.source.tasks(split)

    def reset(self, task: Task) -> str:
        self._task, self._attempt = task, 0
        return task.prompt

    def step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task) before step(action), and again after the episode ends")
        self._attempt += 1
        verdict = self.source.verify(self._task, action)
        info: dict[str, Any] = {"attempt": self._attempt, "score": verdict.reward}
        last = self._attempt >= self.max_attempts
        if not verdict.success and not last:
            observation = retry_text(self.retry_message, verdict.feedback, self._attempt, self.max_attempts)
            return StepResult(observation=observation, reward=0.0, done=False, info=info)
        self._task = None
        if verdict.success:
            feedback = f"Correct on attempt {self._attempt} of {self.max_attempts}: {verdict.feedback}"
        else:
            feedback = (
                f"All {self.max_attempts} attempts were wrong; the last one: {verdict.feedback}"
                if self.max_attempts > 1
                else f"The answer was wrong: {verdict.feedback}"
            )
        info.update(success=verdict.success, feedback=feedback)
        return StepResult(observation=feedback, reward=verdict.reward, done=True, info=info)
