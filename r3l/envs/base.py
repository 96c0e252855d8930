"""The environment protocol: tasks, reset/step/replay, the tools a task offers; a verdict is grading's
(`r3l.grading.verdict`), re-exported here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from r3l.errors import UserError
from r3l.grading.verdict import Verdict

if TYPE_CHECKING:
    from r3l.envs.reply_grammar import ReplyFormat
    from r3l.rollout.constraints import Constraint


@dataclass(frozen=True)
class Task:
    """One problem instance. `prompt` is the first user message; `answer` is what the verifier needs."""

    id: str
    prompt: str
    answer: Any = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Env(ABC):
    """A text environment. Single-turn tasks finish after one `step`; multi-turn ones run until `done`.

    `info` of the final step carries `success` (bool) and `feedback` (str); multi-turn environments
    also put `admissible_actions` there.
    """

    # settings a subclass fixes (TextArena's `source`): neither shown nor taken as env.args; `make` passes them
    fixed_arguments: ClassVar[dict[str, Any]] = {}
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    deterministic: bool = True  # an instance may set it from the environment it wraps (math_dialogue)
    # "tagged": a reply is <think>...</think><action>...</action> and only the action is played;
    # "whole_reply": the whole reply is the action (single-turn answers, multi-attempt dialogues).
    action_format: ClassVar[str] = "tagged"
    # False: a retry always restarts from the first step (pivot 0), e.g. multi-attempt math dialogues,
    # where the earlier attempts are what the retry should not see.
    retry_from_pivot: ClassVar[bool] = True
    # False where fewer steps are no better episode (a math dialogue's attempts): R3L's improvement rule then
    # compares rewards only, as the reference's DAPO and Countdown workflows do.
    steps_are_a_cost: ClassVar[bool] = True
    # True: an instance costs nothing (no simulator), so a runner may make one per episode in flight.
    light: ClassVar[bool] = False
    # False where an answer quotes the prompt by design (a game's listed actions, a call's arguments): the
    # reward-hacking watch (r3l/agent/prompt_copy.py) then does not count copies of the prompt.
    watch_prompt_copies: ClassVar[bool] = True
    system_prompt: str | None = None
    # what `near_duplicate_key` counts as one problem, in the words of the comparison's overlap line
    near_duplicate_rule: ClassVar[str] = "the same prompt with case and spacing ignored"
    # the shortest reply that plays or answers at all (None: any reply is one): a reply budget that cannot hold it
    # is refused before a run starts, since every reply would be a format error
    shortest_reply: ClassVar[str | None] = "<action>look</action>"

    @abstractmethod
    def tasks(self, split: str) -> Sequence[Task]:
        """The tasks of a split ('train' or 'test'), in a fixed order given the env's seed."""

    @abstractmethod
    def reset(self, task: Task) -> str:
        """Start an episode on `task`; return the first observation (the user message)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the model's `action` (its whole reply for single-turn tasks)."""

    def reply_constraint(self, reply: ReplyFormat) -> Constraint | None:
        """What the next reply may be under structured decoding (None: free), e.g. one of the admissible
        actions now; called after `reset` or `step`."""
        return None

    def near_duplicate_key(self, task: Task) -> Hashable:
        """Tasks with equal keys are the same problem written another way, as a held-out/training overlap check
        counts them; here the prompt with case and spacing ignored, finer in environments that know their tasks."""
        return " ".join(task.prompt.lower().split())

    def answer_format_missing(self, reply: str) -> bool | None:
        """Whether `reply` lacks the answer format this environment asks for (its answer tags, say), so that a
        gain in format can be told from a gain in value; None where the environment asks for no format."""
        return None

    def abort(self) -> None:
        """Stop at once, possibly from another thread while a call is blocked (a hung simulator); the instance
        is not used again. Simulators override this to kill their process; the default closes."""
        close = getattr(self, "close", None)
        if close is not None:
            close()

    def replay(self, task: Task, actions: Sequence[str]) -> str:
        """Rebuild the state after `actions`; return the last observation. Needs a deterministic env."""
        if not self.deterministic:
            raise RuntimeError(f"environment '{self.name}' is not deterministic and cannot replay a prefix")
        observation = self.reset(task)
        for action in actions:
            observation = self.step(action).observation
        return observation


class SingleTurnEnv(Env):
    """An environment whose episode is one prompt and one reply judged by `verify`."""

    action_format = "whole_reply"
    shortest_reply: ClassVar[str | None] = None
    retry_from_pivot = False
    light = True

    def __init__(self) -> None:
        self._task: Task | None = None

    @abstractmethod
    def verify(self, task: Task, completion: str) -> Verdict:
        """Judge a completion; pure, never executes model output."""

    def reset(self, task: Task) -> str:
        self._task = task
        return task.prompt

    def step(self, action: str) -> StepResult:
        if self._task is None:
            raise RuntimeError("call reset(task) before step(action)")
        verdict = self.verify(self._task, action)
        self._task = None
        return StepResult(
            observation=verdict.feedback,
            reward=verdict.reward,
            done=True,
            info={"success": verdict.success, "feedback": verdict.feedback},
        )


def judge(env: Env, task: Task, reply: str) -> Verdict:
    """Play `reply` as the whole episode of `task` and read the verdict from the final step's info."""
    env.reset(task)
    result = env.step(reply)
    return Verdict(result.reward, bool(result.info.get("success", False)), str(result.info.get("feedback", "")))


def chat_tools(task: Task) -> list[dict[str, Any]] | None:
    """The tools a task offers to the chat template (`Task.data["tools"]`, OpenAI's function form), or None: every
    conversation that starts from a task passes them on (r3l.rollout.chat)."""
    tools = task.data.get("tools")
    return list(tools) if tools else None


def check_split_size(setting: str, size: int | None, available: int, unit: str) -> None:
    """Refuse a size asked of a split larger than the split, rather than cutting it silently (None: all)."""
    if size is not None and size > available:
        raise UserError(
            f"env.args.{setting}={size} asks for more {unit} than the split has ({available}); "
            f"lower it, or set it to null for all {available}"
        )
