"""The episode runner: plays many multi-turn episodes at once, one generation call per turn for all of them.

Every episode is a token-exact conversation (`TokenConversation`): assistant turns are the sampled ids,
observations are tokenised once when appended. An episode may start fresh (reset) or from another
episode's pivot (replay the first `pivot` actions, optionally with guidance at the pivot: before the
observation in its user turn, or as a system message of its own, appended to the system prompt at step 0);
then a `distilled` conversation gets the same turns without the guidance (context distillation).

Episodes end when the environment says done, or early, each reason counted in `termination`:
a reply with no action (format_error), an action the environment does not accept (inadmissible), the same
action `repeat_limit` times in a row with every repeat leaving the observation as it was (repeated_action: stuck,
where a repeated move that changes the game, a step along a corridor, goes on), `max_turns` turns, or the context
limit. A retry
whose replay does not reproduce the base observation ends with `replay_mismatch` before generating.
An environment that raises, or hangs past `env_timeout` seconds, ends its episode with `env_error`: the
episode is not trained (strategies drop it), its task id is printed, and the environment is replaced.

Environments live in this process and are called one after another, or (`env_processes` > 0) each in a
process of its own (env_process.py), called at once: every episode's reset or step of a turn in parallel.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from r3l.agent.actions import parse_reply
from r3l.agent.env_guard import EnvFailure, guarded_call
from r3l.agent.env_pool import EnvPool
from r3l.agent.env_process import EnvironmentProcessDied, ProcessEnv
from r3l.agent.prompt_copy import watched_copy
from r3l.envs import Env, StepResult, Task
from r3l.envs.base import chat_tools
from r3l.envs.reply_grammar import ReplyFormat
from r3l.errors import UserError
from r3l.logging.progress import console
from r3l.rollout.chat import PromptFormat, template_default_system
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import Completion, Generator, SamplingParams

TERMINATIONS = (
    "done",
    "format_error",
    "inadmissible",
    "repeated_action",
    "max_turns",
    "context_limit",
    "replay_mismatch",
    "env_error",
)
EARLY_STOPS = ("format_error", "inadmissible", "repeated_action")
GuidanceRole = Literal["user", "system"]  # where a retry's guidance goes: see guided_turns, guided_opening


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int = 30
    max_context_tokens: int = 4096
    terminate_on: tuple[str, ...] = EARLY_STOPS
    repeat_limit: int = 3
    action_tag: str = "action"
    think_tag: str = "think"
    env_workers: int = 16  # environments alive at once, for environments that run a simulator
    structured: ReplyFormat | None = None  # replies decoded under the environment's grammar (None: free)
    env_timeout: float | None = None  # seconds one reset, replay or step may take (None: no limit)
    env_processes: int = 0  # environments each in a process of their own, stepped at once (0: in this process)


@dataclass
class Step:
    observation: str  # what the agent saw before acting
    completion: Completion
    thought: str | None
    action: str | None  # the parsed action; None when the reply had none
    played: str | None  # what went to env.step; None when the episode stopped before playing it
    reward: float = 0.0
    admissible: bool = True


@dataclass
class Trajectory:
    task: Task
    conversation: TokenConversation
    steps: list[Step] = field(default_factory=list)
    success: bool = False
    feedback: str = ""
    termination: str = ""
    prefix_steps: int = 0  # steps taken over from the base episode (a retry's shared prefix)
    copied_prompt: bool = False  # the last reply's answer copies an expression of the prompt (prompt_copy.py)
    distilled: TokenConversation | None = None  # the same turns without the guidance (context distillation)
    observation: str = ""  # the latest observation, not yet acted on

    @property
    def reward(self) -> float:
        return sum(step.reward for step in self.steps)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def actions(self) -> list[str | None]:
        return [step.played for step in self.steps]

    @property
    def text(self) -> str:
        """The replies of every step joined by newlines, for reading."""
        return "\n".join(step.completion.text for step in self.steps)

    @property
    def generated_tokens(self) -> int:
        """Tokens this episode generated itself (a retry's shared prefix not included)."""
        return sum(len(step.completion.tokens) for step in self.steps[self.prefix_steps :])


@dataclass(frozen=True)
class EpisodeStart:
    """A fresh episode (`base` None), or a retry of `base` from step `pivot` with `guidance` there (None: no
    guidance), in the role `guidance_role` (see `guided_turns`)."""

    task: Task
    base: Trajectory | None = None
    pivot: int = 0
    guidance: str | None = None
    guidance_role: GuidanceRole = "user"


def trainable(trajectory: Trajectory) -> bool:
    """False for an episode the environment broke (env_error): its ending says nothing about the policy."""
    return trajectory.termination != "env_error"


def with_guidance(guidance: str | None, observation: str) -> str:
    return f"{guidance.strip()}\n\n{observation}" if guidance else observation


def guided_turns(observation: str, guidance: str | None, role: GuidanceRole) -> list[dict[str, str]]:
    """The messages a retry adds at a pivot after step 0: the observation, with the guidance before it in the
    same user turn (`user`) or in a system message of its own before that turn (`system`, the R3L code's way)."""
    if guidance and role == "system":
        return [{"role": "system", "content": guidance.strip()}, {"role": "user", "content": observation}]
    return [{"role": "user", "content": with_guidance(guidance, observation)}]


def guided_opening(
    messages: list[dict[str, str]], guidance: str | None, role: GuidanceRole, default_system: str | None = None
) -> list[dict[str, str]]:
    """A retry from step 0: the episode's opening `messages` (system prompt, examples, the observation last) with
    the guidance before the observation (`user`) or ending the system prompt (`system`): the episode's own, else
    the one the chat template writes when none is given (`default_system`, see `template_default_system`), else a
    system message of the guidance alone."""
    if not guidance:
        return messages
    if role == "user":
        return [*messages[:-1], {"role": "user", "content": with_guidance(guidance, messages[-1]["content"])}]
    if messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{guidance.strip()}"}, *messages[1:]]
    system = f"{default_system}\n\n{guidance.strip()}" if default_system else guidance.strip()
    return [{"role": "system", "content": system}, *messages]


def _normalised(action: str) -> str:
    return " ".join(action.lower().split())


def stuck_repeating(actions: Sequence[str | None], observations: Sequence[str], limit: int) -> bool:
    """Whether the last `limit` moves played one action (case and spacing aside) and each repeat of it left the
    observation as it was: `actions[i]` was played on `observations[i]` and gave `observations[i + 1]`."""
    if len(actions) < limit or len(observations) != len(actions) + 1:
        return False
    last = actions[-limit:]
    if any(action is None for action in last) or len({_normalised(a) for a in last if a is not None}) != 1:
        return False
    return all(observations[i] == observations[i + 1] for i in range(len(actions) - limit + 1, len(actions)))


class EpisodeRunner:
    def __init__(
        self,
        make_env: Callable[[], Env],
        generator: Generator,
        tokenizer,
        prompt_format: PromptFormat = PromptFormat(),
        limits: AgentLimits = AgentLimits(),
    ):
        self.generator = generator
        self.tokenizer = tokenizer
        self.prompt_format = prompt_format
        self.limits = limits
        self.seconds = {"environment": 0.0, "generation": 0.0}  # wall time in env calls and in generation, all runs
        if limits.env_processes:
            make_env = partial(ProcessEnv, make_env)
        probe = make_env()
        try:
            self.action_format = probe.action_format
        except EnvironmentProcessDied as died:
            raise UserError(
                f"agent.env_processes: {died} before its environment was built (see its error above; a script "
                "that runs r3l with environments in processes needs `if __name__ == '__main__':`)"
            ) from None
        self.retry_from_pivot = probe.retry_from_pivot
        self.steps_are_a_cost = probe.steps_are_a_cost
        self.deterministic = probe.deterministic
        self.env_name = probe.name
        self.system_prompt = probe.system_prompt
        if limits.env_processes:
            self.pool = EnvPool(make_env, limits.env_processes, first=probe)
            self._threads: ThreadPoolExecutor | None = ThreadPoolExecutor(limits.env_processes, "r3l-env")
        else:
            self.pool = EnvPool(make_env, None if probe.light else limits.env_workers, first=probe)
            self._threads = None

    # --- starting -------------------------------------------------------------------------------
    def _open(self, start: EpisodeStart, env: Env) -> str:
        """The environment's side of a start: reset, or replay the base episode's first `pivot` actions."""
        timeout = self.limits.env_timeout
        ready = getattr(env, "wait_ready", None)
        if ready is not None:  # a process still building its environment: as making one here, not under the timeout
            guarded_call(env, None, ready)
        if start.base is None:
            return guarded_call(env, timeout, env.reset, start.task)
        actions = [step.played for step in start.base.steps[: start.pivot]]
        return guarded_call(env, timeout, env.replay, start.task, actions)

    def _begin(self, start: EpisodeStart, env: Env, opened: str | EnvFailure) -> Trajectory:
        """The episode's conversation from the observation `_open` returned (or its failure), with the tools the
        task offers (function calling) given to the chat template."""
        tools = chat_tools(start.task)
        if isinstance(opened, EnvFailure):
            messages = self.prompt_format.messages(start.task.prompt, env.system_prompt)
            trajectory = Trajectory(start.task, TokenConversation.start(self.tokenizer, messages, tools=tools))
            self._env_error(trajectory, f"while {'replaying' if start.base else 'starting'} the episode", opened)
            return trajectory
        observation = opened
        if start.base is None:
            messages = self.prompt_format.messages(observation, env.system_prompt)
            conversation = TokenConversation.start(self.tokenizer, messages, tools=tools)
            return Trajectory(start.task, conversation, observation=observation)
        base, pivot = start.base, start.pivot
        if pivot == 0:
            opening = self.prompt_format.messages(observation, env.system_prompt)
            default_system = (
                template_default_system(self.tokenizer, tools)
                if start.guidance and start.guidance_role == "system" and opening[0]["role"] != "system"
                else None
            )
            guided_messages = guided_opening(opening, start.guidance, start.guidance_role, default_system)
            guided = TokenConversation.start(self.tokenizer, guided_messages, tools=tools)
        else:
            guided = base.conversation.after_turn(pivot - 1)
            guided.add_turns(guided_turns(observation, start.guidance, start.guidance_role))
        trajectory = Trajectory(
            start.task,
            guided,
            [replace(step) for step in base.steps[:pivot]],
            prefix_steps=pivot,
            distilled=base.conversation.before_turn(pivot),
            observation=observation,
        )
        if observation != base.steps[pivot].observation:
            self._finish(
                trajectory,
                "replay_mismatch",
                f"Replaying {pivot} actions did not reproduce the observation at step {pivot}.",
            )
        return trajectory

    # --- playing --------------------------------------------------------------------------------
    def run(self, starts: Sequence[EpisodeStart], params: SamplingParams) -> list[Trajectory]:
        """Play every start to its end; results in the order of `starts`."""
        results: list[Trajectory | None] = [None] * len(starts)
        pending = deque(enumerate(starts))
        active: dict[int, tuple[Trajectory, Env]] = {}
        turn = 0
        while pending or active:
            opening = []
            while pending and self.pool.available():
                index, start = pending.popleft()
                opening.append((index, start, self.pool.take()))
            opened = self._calls([partial(self._open, start, env) for _, start, env in opening])
            for (index, start, env), outcome in zip(opening, opened):
                trajectory = self._begin(start, env, outcome)
                if not trajectory.termination and start.base is not None:  # a task's own prompt always runs
                    self._check_context(trajectory, params)
                active[index] = (trajectory, env)
            self._settle(active, results)
            if not active:
                continue
            order = list(active)
            constraints = (
                None
                if self.limits.structured is None
                else [active[i][1].reply_constraint(self.limits.structured) for i in order]
            )
            started = time.perf_counter()
            completions = self._generate([active[i][0].conversation.tokens for i in order], params, turn, constraints)
            self.seconds["generation"] += time.perf_counter() - started
            chosen = [(i, self._act(active[i][0], completion)) for i, completion in zip(order, completions)]
            moves = [(i, action) for i, action in chosen if action is not None]
            timeout = self.limits.env_timeout
            stepped = self._calls(
                [partial(guarded_call, active[i][1], timeout, active[i][1].step, action) for i, action in moves]
            )
            for (index, action), outcome in zip(moves, stepped):
                trajectory, env = active[index]
                self._conclude(trajectory, env, action, outcome, params)
            self._settle(active, results)
            turn += 1
        return [trajectory for trajectory in results if trajectory is not None]

    def _calls(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Each call's result, or the EnvFailure it raised: one after another for environments in this
        process, at once for environments in processes of their own (each thread waits on its own pipe)."""

        def attempt(call: Callable[[], Any]) -> Any:
            try:
                return call()
            except EnvFailure as failure:
                return failure

        started = time.perf_counter()
        if self._threads is None or len(calls) < 2:
            results = [attempt(call) for call in calls]
        else:
            results = list(self._threads.map(attempt, calls))
        self.seconds["environment"] += time.perf_counter() - started
        return results

    def _settle(self, active: dict[int, tuple[Trajectory, Env]], results: list[Trajectory | None]) -> None:
        """Move the episodes that ended from `active` to `results`, their environments back to the pool."""
        for index in [i for i, (trajectory, _) in active.items() if trajectory.termination]:
            trajectory, env = active.pop(index)
            results[index] = trajectory
            self._release(trajectory, env)

    def _release(self, trajectory: Trajectory, env: Env) -> None:
        if trajectory.termination == "env_error":
            self.pool.discard(env)
        else:
            self.pool.give_back(env)

    def _env_error(self, trajectory: Trajectory, when: str, failure: EnvFailure) -> None:
        self._finish(trajectory, "env_error", f"The environment failed {when}: {failure}")
        console.print(
            f"environment error on task {trajectory.task.id} {when} ({failure}); the episode is not "
            "trained and its environment is replaced",
            markup=False,
            highlight=False,
        )

    def _generate(
        self, prompts: list[list[int]], params: SamplingParams, turn: int, constraints: list | None = None
    ) -> list[Completion]:
        """One completion per prompt (under its constraint, if any); identical prompts (fresh starts of one
        task) share one prefill."""
        if params.seed is not None:
            params = replace(params, seed=params.seed + 1_000_003 * turn)
        constraints = constraints if constraints is not None and any(constraints) else None
        positions: dict[tuple, list[int]] = {}
        for index, prompt in enumerate(prompts):
            key = (tuple(prompt), None if constraints is None else constraints[index])
            positions.setdefault(key, []).append(index)
        sizes = {len(members) for members in positions.values()}
        if len(sizes) == 1 and sizes != {1}:
            out: list[Completion | None] = [None] * len(prompts)
            keys = list(positions)
            groups = self.generator.generate(
                [list(prompt) for prompt, _ in keys],
                params,
                n=sizes.pop(),
                constraints=None if constraints is None else [c for _, c in keys],
            )
            for members, group in zip(positions.values(), groups):
                for index, completion in zip(members, group):
                    out[index] = completion
            return out  # type: ignore[return-value]
        return [group[0] for group in self.generator.generate(prompts, params, n=1, constraints=constraints)]

    def _act(self, trajectory: Trajectory, completion: Completion) -> str | None:
        """Record the reply; the action to play, or None when the reply ends the episode (no action)."""
        limits = self.limits
        trajectory.conversation.add_assistant(completion, trained=True)
        if trajectory.distilled is not None:
            trajectory.distilled.add_assistant(completion, trained=True)
        parsed = parse_reply(completion.text, self.action_format, limits.action_tag, limits.think_tag)
        trajectory.steps.append(Step(trajectory.observation, completion, parsed.thought, parsed.action, None))
        number = len(trajectory.steps)
        if parsed.action is None and "format_error" in limits.terminate_on:
            tag = limits.action_tag
            self._finish(
                trajectory,
                "format_error",
                f"The episode was stopped at step {number}: the reply had no action in <{tag}></{tag}> tags.",
            )
            return None
        return parsed.action if parsed.action is not None else completion.text

    def _conclude(
        self,
        trajectory: Trajectory,
        env: Env,
        action: str,
        outcome: StepResult | EnvFailure,
        params: SamplingParams,
    ) -> None:
        """What the environment answered to the action `_act` chose: the episode ends or goes on."""
        limits, step = self.limits, trajectory.steps[-1]
        number = len(trajectory.steps)
        if isinstance(outcome, EnvFailure):
            return self._env_error(trajectory, f"at step {number}", outcome)
        step.played, step.reward = action, float(outcome.reward)
        step.admissible = bool(outcome.info.get("admissible", True))
        if outcome.done:
            trajectory.copied_prompt = watched_copy(env, trajectory.task.prompt, step.completion.text)
            return self._finish(
                trajectory, "done", str(outcome.info.get("feedback", "")), bool(outcome.info.get("success", False))
            )
        if not step.admissible and "inadmissible" in limits.terminate_on:
            return self._finish(
                trajectory,
                "inadmissible",
                f"The episode was stopped at step {number}: '{action}' is not a valid action here.",
            )
        observations = [s.observation for s in trajectory.steps] + [outcome.observation]
        if "repeated_action" in limits.terminate_on and stuck_repeating(
            trajectory.actions, observations, limits.repeat_limit
        ):
            return self._finish(
                trajectory,
                "repeated_action",
                f"The episode was stopped at step {number}: the action '{action}' was played {limits.repeat_limit} "
                "times in a row without changing anything.",
            )
        if number >= limits.max_turns:
            return self._finish(
                trajectory,
                "max_turns",
                f"The episode ran out of turns ({limits.max_turns}) before the task was completed.",
            )
        trajectory.observation = outcome.observation
        trajectory.conversation.add_user(outcome.observation)
        if trajectory.distilled is not None:
            trajectory.distilled.add_user(outcome.observation)
        self._check_context(trajectory, params)

    def _check_context(self, trajectory: Trajectory, params: SamplingParams) -> None:
        if len(trajectory.conversation.tokens) + params.max_new_tokens > self.limits.max_context_tokens:
            self._finish(
                trajectory,
                "context_limit",
                f"The episode was stopped at step {len(trajectory.steps)}: the conversation reached the "
                f"context limit of {self.limits.max_context_tokens} tokens.",
            )

    @staticmethod
    def _finish(trajectory: Trajectory, termination: str, feedback: str, success: bool = False) -> None:
        trajectory.termination, trajectory.feedback, trajectory.success = termination, feedback, success

    def close(self) -> None:
        self.pool.close()
        if self._threads is not None:
            self._threads.shutdown()


def termination_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """Fraction of episodes that ended for each reason."""
    total = max(len(trajectories), 1)
    return {
        f"{prefix}termination/{reason}": sum(t.termination == reason for t in trajectories) / total
        for reason in TERMINATIONS
    }
