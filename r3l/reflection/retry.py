"""First attempts and the reflect-then-retry step, as token-exact conversations (used by R3 and by eval)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart, Trajectory
from r3l.agent.prompt_copy import watched_copy
from r3l.envs import Env, Task, Verdict, judge
from r3l.envs.base import chat_tools
from r3l.experience import Segment
from r3l.reflection.prompts import ReflectionPrompts
from r3l.rollout.chat import PromptFormat
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import Completion, Generator, SamplingParams


@dataclass
class Attempt:
    task: Task
    conversation: TokenConversation  # ends with the attempt's assistant turn
    completion: Completion
    verdict: Verdict
    copied_prompt: bool = False  # the attempt's answer copies an expression of the prompt


@dataclass
class Retry:
    """One reflection on a failed attempt and the second attempt written after it."""

    failure: Attempt
    conversation: TokenConversation  # prompt, first attempt, reflection, second attempt
    reflection: Completion
    reflection_span: tuple[int, int]
    second: Completion
    second_span: tuple[int, int]
    verdict: Verdict
    copied_prompt: bool = False  # the second attempt's answer copies an expression of the prompt
    reflection_temperature: float = 1.0  # what each was sampled at (the learner scores them there)
    second_temperature: float = 1.0

    @property
    def segments(self) -> list[Segment]:
        """The reflection and the second attempt as what they were sampled as, at their temperatures."""
        return [
            Segment(*self.reflection_span, "reflection", self.reflection_temperature),
            Segment(*self.second_span, "retry", self.second_temperature),
        ]


def start_conversation(task: Task, env: Env, tokenizer, prompt_format: PromptFormat) -> TokenConversation:
    """The task's first turn as its episodes ask it, the task's tools (function calling) in the template."""
    messages = prompt_format.messages(env.reset(task), env.system_prompt)
    return TokenConversation.start(tokenizer, messages, tools=chat_tools(task))


def as_attempt(trajectory: Trajectory) -> Attempt:
    """A played single-turn episode as a first attempt (its reply untrained)."""
    conversation = trajectory.conversation
    conversation.mask_turns(range(len(conversation.turn_spans)), trained=False)
    verdict = Verdict(trajectory.reward, trajectory.success, trajectory.feedback)
    return Attempt(trajectory.task, conversation, trajectory.steps[0].completion, verdict, trajectory.copied_prompt)


def first_attempts(
    tasks: Sequence[Task],
    make_env: Callable[[], Env],
    generator: Generator,
    tokenizer,
    params: SamplingParams,
    prompt_format: PromptFormat,
    n: int = 1,
    limits: AgentLimits = AgentLimits(),
) -> list[list[Attempt]]:
    """`n` attempts at each task (one prefill per task), as lists in task order."""
    runner = EpisodeRunner(make_env, generator, tokenizer, prompt_format, limits)
    try:
        played = runner.run([EpisodeStart(task) for task in tasks for _ in range(n)], params)
    finally:
        runner.close()
    return [[as_attempt(trajectory) for trajectory in played[i * n : (i + 1) * n]] for i in range(len(tasks))]


def question_of(attempt: Attempt) -> tuple[str, str | None]:
    """(the task's message, the system message or None) of a single-turn attempt, as its conversation asked them."""
    messages = attempt.conversation.messages
    task = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return task, messages[0]["content"] if messages[0]["role"] == "system" else None


def reflect_and_retry(
    failures: Sequence[Attempt],
    make_env: Callable[[], Env],
    generator: Generator,
    prompts: ReflectionPrompts,
    reflect_params: SamplingParams,
    retry_params: SamplingParams,
    n_reflections: int,
    train_second_attempt: bool = False,
    limits: AgentLimits = AgentLimits(),
) -> list[list[Retry]]:
    """`n_reflections` reflections per failure, each followed by one second attempt (under the environment's
    reply grammar when `limits.structured` is set; reflections are free text)."""
    asking = []
    for failure in failures:
        conversation = failure.conversation.copy()
        conversation.add_user(prompts.reflect_message(failure.verdict.feedback))
        asking.append(conversation)
    reflections = generator.generate([c.tokens for c in asking], reflect_params, n=n_reflections)
    pending = []
    for failure, conversation, group in zip(failures, asking, reflections):
        retry_message = prompts.retry_message(*question_of(failure))
        for reflection in group:
            retry = conversation.copy()
            span = retry.add_assistant(reflection, trained=True)
            retry.add_user(retry_message)
            pending.append((failure, retry, reflection, span))
    seconds = second_attempts(
        [p[0] for p in pending], [p[1] for p in pending], make_env, generator, retry_params, limits
    )
    results: list[list[Retry]] = [[] for _ in failures]
    position = {id(f): i for i, f in enumerate(failures)}
    for (failure, conversation, reflection, span), (second, verdict, copied) in zip(pending, seconds):
        second_span = conversation.add_assistant(second, trained=train_second_attempt)
        results[position[id(failure)]].append(
            Retry(
                failure,
                conversation,
                reflection,
                span,
                second,
                second_span,
                verdict,
                copied,
                reflection_temperature=reflect_params.temperature,
                second_temperature=retry_params.temperature,
            )
        )
    return results


def second_attempts(
    failures: Sequence[Attempt],
    conversations: Sequence[TokenConversation],
    make_env: Callable[[], Env],
    generator: Generator,
    params: SamplingParams,
    limits: AgentLimits,
) -> list[tuple[Completion, Verdict, bool]]:
    """One more attempt at each failure's task, asked at the end of its conversation (under the environment's
    reply grammar when `limits.structured` is set): (completion, verdict, whether it copies the prompt)."""
    env = make_env()
    constraints = None
    if limits.structured is not None:
        constraints = []
        for failure in failures:
            env.reset(failure.task)
            constraints.append(env.reply_constraint(limits.structured))
    completions = generator.generate([c.tokens for c in conversations], params, n=1, constraints=constraints)
    return [
        (second, judge(env, failure.task, second.text), watched_copy(env, failure.task.prompt, second.text))
        for failure, (second,) in zip(failures, completions)
    ]


@dataclass
class VerdictRetry:
    """The control of a reflection: a second attempt asked right after the verdict, with no reflection between."""

    failure: Attempt
    conversation: TokenConversation  # prompt, first attempt, verdict and the request to try again, second attempt
    second: Completion
    verdict: Verdict
    copied_prompt: bool = False


def retry_after_verdict(
    failures: Sequence[Attempt],
    make_env: Callable[[], Env],
    generator: Generator,
    prompts: ReflectionPrompts,
    retry_params: SamplingParams,
    limits: AgentLimits = AgentLimits(),
) -> list[VerdictRetry]:
    """The same failures, the same verdict, no reflection: one more attempt each. Beside R3's second try after a
    reflection it tells the reflection's share of a gain from what asking again alone brings."""
    conversations = []
    for failure in failures:
        conversation = failure.conversation.copy()
        conversation.add_user(prompts.verdict_retry_message(failure.verdict.feedback, *question_of(failure)))
        conversations.append(conversation)
    results = []
    for failure, conversation, (second, verdict, copied) in zip(
        failures, conversations, second_attempts(failures, conversations, make_env, generator, retry_params, limits)
    ):
        conversation.add_assistant(second, trained=False)
        results.append(VerdictRetry(failure, conversation, second, verdict, copied))
    return results
