"""Text games played one admissible action a turn: the episode rules and the helpers for action text.

An environment built on `TextGameEnv` (TextWorldExpress, ALFWorld, WebShop) only says how to list its tasks,
start a game, play an admitted command and, where it differs, what is admissible; this module keeps the
rest. Each turn costs a step. An admissible action is played and earns the rise in the game's score (in
[0, 1]), so an episode's rewards add up to its final score; anything else is counted, never reaches the
game and earns 0. The episode ends when the game is over (success: the game says the task is done, or
full score), or after `max_steps` turns.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from r3l.envs.base import Env, StepResult, Task, check_split_size
from r3l.envs.games.feedback import episode_feedback
from r3l.envs.reply_grammar import action_constraint
from r3l.errors import UserError

SPLITS = ("train", "test")
EXAMPLES_SHOWN = 16


@dataclass(frozen=True)
class View:
    """What the agent is shown after a reset or a played command, and the game's state."""

    observation: str
    actions: tuple[str, ...]  # admissible now, written as the agent should write them
    score: float = 0.0  # in [0, 1], the game's score so far
    over: bool = False  # the game itself has ended (won, lost, or bought)
    won: bool = False  # the game says the task is done (full score also counts as done)


def normalise_action(text: str) -> str:
    """The command an action text means: without surrounding quotes or a final full stop, spaces collapsed,
    lower case."""
    text = " ".join(str(text).split()).strip("`'\"").strip()
    return text.rstrip(".").strip().lower()


def round_robin(pools: Mapping[str, Sequence[Any]], size: int | None, setting: str, unit: str) -> list[tuple[str, Any]]:
    """A split of `size` items (None: all) taken from the pools in turn (first of each pool, then second ...); a
    size above what the pools hold is refused in one line naming `setting` (check_split_size)."""
    available = sum(map(len, pools.values()))
    check_split_size(setting, size, available, unit)
    size = available if size is None else size
    chosen: list[tuple[str, Any]] = []
    depth = 0
    while len(chosen) < size and any(depth < len(pool) for pool in pools.values()):
        for key, pool in pools.items():
            if depth < len(pool) and len(chosen) < size:
                chosen.append((key, pool[depth]))
        depth += 1
    return chosen


def action_examples(actions: Sequence[str], limit: int = EXAMPLES_SHOWN) -> list[str]:
    """A few admissible actions, the shortest of each leading verb first, so the examples show the command forms."""
    ordered = sorted(actions, key=lambda action: (len(action), action))
    by_verb: dict[str, str] = {}
    for action in ordered:
        by_verb.setdefault(action.split(" ", 1)[0], action)
    examples = list(by_verb.values())[:limit]
    examples += [action for action in ordered if action not in examples][: limit - len(examples)]
    return examples


def invalid_observation(action: str, admissible: Sequence[str]) -> str:
    shown = action if len(action) <= 80 else action[:77] + "..."
    what = f"'{shown}' is not a valid action here." if action else "No action was given."
    examples = ", ".join(action_examples(admissible))
    return f"{what} Reply with one valid action inside <action></action>, for example: {examples}."


def check_count(setting: str, value: Any, low: int, optional: bool = False) -> None:
    """A UserError unless `value` is a whole number >= `low` (or None where `optional`)."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        extra = " (or null for all)" if optional else ""
        raise UserError(f"env.args.{setting} must be a whole number >= {low}{extra}, got {value!r}")


def check_in_episode(task: Task | None, done: bool) -> None:
    """A RuntimeError (a caller's bug, not the model's) for a step outside an episode."""
    if task is None:
        raise RuntimeError("call reset(task) before step(action)")
    if done:
        raise RuntimeError("the episode is over; call reset(task) to start another")


def with_actions(observation: str, actions: Sequence[str]) -> str:
    return f"{observation}\n\nValid actions: {', '.join(actions)}"


class TextGameEnv(Env):
    """A multi-turn env over a game backend. Subclasses implement `_list_tasks`, `_start` and `_play`."""

    deterministic = True
    watch_prompt_copies = False
    # how the feedback names rejected actions, and why a game can end without full score
    invalid_word: ClassVar[str] = "not valid"
    failure_cause: ClassVar[str] = ""
    argument_help: ClassVar[dict[str, str]] = {
        "max_steps": "turns an episode may take",
        "show_actions": "end each observation with the list of admissible actions",
        "seed": "the order in which each split's games are drawn",
        "train_size": "games in the train split (null: all)",
        "test_size": "games in the test split (null: all)",
        "backend": "the game backend object (tests pass a fake one; not set in a config)",
    }

    def __init__(self, *, max_steps: int, show_actions: bool):
        check_count("max_steps", max_steps, 1)
        self.max_steps = max_steps
        self.show_actions = show_actions
        self._tasks: dict[str, tuple[Task, ...]] = {}
        self._task: Task | None = None
        self._done = True
        self._view = View("", ())
        self._moves = 0
        self._invalid = 0

    @abstractmethod
    def _list_tasks(self, split: str) -> Sequence[Task]:
        """The tasks of 'train' or 'test'."""

    @abstractmethod
    def _start(self, task: Task) -> View:
        """Load the task's game from its beginning."""

    @abstractmethod
    def _play(self, command: str) -> View:
        """Play an admitted command."""

    def admit(self, action: str) -> str | None:
        """The command to play for `action` (normalised) if it is admissible now, else None."""
        return {normalise_action(known): known for known in self._view.actions}.get(action)

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split '{split}' for environment '{self.name}'; use 'train' or 'test'")
        if split not in self._tasks:
            self._tasks[split] = tuple(self._list_tasks(split))
        return self._tasks[split]

    @property
    def admissible_actions(self) -> list[str]:
        return list(self._view.actions)

    def reply_constraint(self, reply):
        return action_constraint(self._view.actions, reply)

    def reset(self, task: Task) -> str:
        self._view = self._start(task)
        self._task, self._done, self._moves, self._invalid = task, False, 0, 0
        return self._show(self._view)

    def step(self, action: str) -> StepResult:
        check_in_episode(self._task, self._done)
        self._moves += 1
        command = normalise_action(action)
        admitted = self.admit(command)
        reward = 0.0
        if admitted is None:
            self._invalid += 1
            observation = invalid_observation(command, self._view.actions)
        else:
            command, before = admitted, self._view.score
            self._view = self._play(admitted)
            reward = self._view.score - before
            observation = self._show(self._view)
        success = self._view.won or self._view.score >= 1.0
        failure = self._view.over and not success
        done = success or failure or self._moves >= self.max_steps
        info: dict[str, Any] = {
            "admissible": admitted is not None,
            "admissible_actions": self.admissible_actions,
            "score": self._view.score,
            "moves": self._moves,
        }
        if done:
            self._done = True
            info.update(
                success=success,
                feedback=episode_feedback(
                    success=success,
                    failure=failure,
                    moves=self._moves,
                    max_steps=self.max_steps,
                    score=f"score {self._view.score:.2f}",
                    invalid=self._invalid,
                    command=command,
                    cause=self.failure_cause,
                    invalid_word=self.invalid_word,
                ),
            )
        return StepResult(observation=observation, reward=reward, done=done, info=info)

    def _show(self, view: View) -> str:
        observation = view.observation.strip()
        return with_actions(observation, view.actions) if self.show_actions and view.actions else observation
