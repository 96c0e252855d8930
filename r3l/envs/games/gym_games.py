"""Bring your own game: any Gymnasium-registered environment that talks text, or any single-player TextArena game.

`env=gym:ID` (`env.name=gym`, `env.args.id=ID`) builds `gymnasium.make(ID)`: observations that are text (a
`spaces.Text` space, or plain strings) are shown as they are, others through the game's `ansi` render (ANSI
colours removed, coloured text put in square brackets, so the position a toy-text game highlights stays
visible); actions are text (`spaces.Text`) or the names of a `Discrete(n)` space's actions (`env.args.actions`,
default: FrozenLake's left/down/right/up, else "0".."n-1"). `env=textarena:ID` (or `env=gym
env.args.source=textarena`) builds TextArena's own registry entry (TextArena games are not Gymnasium-registered)
without its observation wrappers, which resend the whole history each turn: each observation is the game's new
messages since the last move; its action wrappers (brackets around a bare move) still apply.

A task is (game, seed): the train split draws even seeds and the test split odd ones, and the test split holds
distinct games: seeds are drawn until `test_size` games differ in what makes a game (r3l/envs/games/game_rules.py: a
FrozenLake map, a Mastermind code, a Sokoban room ...), and the train split skips the games held out (it may repeat
a game), so a game with few distinct games (GuessTheNumber-v0: 20 numbers) says so in one line. Each task keeps its
game's name in `data["game"]`. Gymnasium's FrozenLake gets a random map per task seed (Gymnasium's own
`generate_random_map`: `map_size`, `hole_probability`), unless `fixed_map` (or make_args' desc/map_name) asks for
the one map; its intro says whether the ice is slippery, as made. The reward is the game's
own: Gymnasium's per-step reward, TextArena's final reward on the last move. An episode succeeds when the game
ends by itself (terminated, not truncated) on a move paying at least `success_reward` (a `success` or
`is_success` flag in Gymnasium's info decides where a game gives one), and ends when the game does or after
`max_steps` moves. An action outside `env.args.actions` (or outside a Text space) never reaches the game, costs
a move and earns 0; a move the game itself rejects (TextArena's invalid moves) is reported as not admissible too.

Under structured replies a move is `<think>` free then `<action>` one of the listed actions, or, for text moves, a move
of the game's own form (a bracketed number for GuessTheNumber, `[1 2 3 4]` for Mastermind ...; any text without '<'
for a game r3l does not know).

Retries from a pivot replay the base's actions on a new game made with the task's seed. Each game keeps its own
Python and NumPy global random streams (swapped in around every call and seeded from the task's seed), so games
that draw from the global generators (TextArena seeds `random` globally) replay exactly even when many run
interleaved. A game is probed once per process: a reset that takes no seed, or two starts under one seed that
differ, mark it not replayable, and R3L's retry from a pivot is then refused in one line.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from r3l.envs import register
from r3l.envs.base import Env, StepResult, Task
from r3l.envs.games.game_rules import INTROS, family, frozen_lake_map, game_key, identity, move_form
from r3l.envs.games.game_source import Frame
from r3l.envs.games.gymnasium_game import GymnasiumGame
from r3l.envs.games.text_game import (
    SPLITS,
    check_count,
    check_in_episode,
    invalid_observation,
    normalise_action,
    with_actions,
)
from r3l.envs.games.textarena_game import TextArenaGame
from r3l.envs.reply_grammar import action_constraint, move_constraint
from r3l.errors import UserError

PROBE_SEED = 12_345
MAP_SETTINGS = ("map_size", "hole_probability", "fixed_map")  # FrozenLake's random maps

SYSTEM_PROMPT = (
    "You are playing a game. Each turn the user message shows what the game tells you; you reply with exactly one "
    "move. First think briefly inside <think> </think> tags, then write the move inside <action> </action> tags, "
    "for example: <think>{thought}</think><action>{example}</action>. Write the move exactly as the game asks for "
    "it{listed}. A move the game does not accept wastes a turn. You have at most {max_steps} turns."
)


class OwnRandom:
    """A game's own copies of Python's and NumPy's global random states, swapped in around each call into it."""

    def __init__(self) -> None:
        self._states: tuple[Any, Any] | None = None

    @contextmanager
    def active(self, seed: int | None = None) -> Iterator[None]:
        import numpy

        saved = random.getstate(), numpy.random.get_state()
        try:
            if seed is not None:
                random.seed(seed)
                numpy.random.seed(seed % 2**32)
            elif self._states is not None:
                random.setstate(self._states[0])
                numpy.random.set_state(self._states[1])
            yield
        finally:
            self._states = random.getstate(), numpy.random.get_state()
            random.setstate(saved[0])
            numpy.random.set_state(saved[1])


# where a game comes from -> the class that plays it (r3l/envs/games/openenv_game.py adds "openenv")
GAME_SOURCES: dict[str, Any] = {"gymnasium": GymnasiumGame, "textarena": TextArenaGame}
_REPLAY_CHECKS: dict[tuple, str | None] = {}  # (source, id, make_args, random map) -> why not replayable
_SPLITS: dict[tuple, dict[str, tuple[Task, ...]]] = {}  # the settings that make a game's splits -> its splits


def _feedback(
    *, success: bool, over: bool, truncated: bool, moves: int, max_steps: int, total: float, invalid: int, reason: str
) -> str:
    score = f"reward {total:.2f}"
    rejected = f"; {invalid} of the {moves} moves were not accepted" if invalid else ""
    says = f" The game says: {reason.strip()}" if reason.strip() else ""
    if success:
        return f"Task completed in {moves} steps ({score}).{says}"
    if over:
        return f"The game ended at step {moves} without a win ({score}{rejected}).{says}"
    if truncated:
        return f"The game's time limit ended the episode at step {moves} before a win ({score}{rejected})."
    return f"The episode ran out of steps ({max_steps}) before a win ({score}{rejected})."


def _unwrapped(game: Any) -> Any:
    """The game object itself (a source without `unwrapped`, such as openenv's: its `env`)."""
    return getattr(game, "unwrapped", None) or getattr(game, "env", game)


def _map_args(seed: int, size: int, hole_probability: float) -> dict[str, Any]:
    return {"desc": frozen_lake_map(seed, size, hole_probability)}


@register("gym")
class GymGameEnv(Env):
    name = "gym"
    description = (
        "Any Gymnasium-registered game that talks text (env=gym:ID), or a single-player TextArena game "
        "(env.args.source=textarena); the game's reward, multi-turn, exact replay under a seed."
    )
    deterministic = True
    light = True
    watch_prompt_copies = False
    argument_help = {
        "id": "the game's registered id, e.g. FrozenLake-v1 (Gymnasium) or GuessTheNumber-v0 (TextArena); "
        "env=gym:ID sets it",
        "source": "whose registry the id is in: gymnasium, textarena or openenv (a package.module:Class)",
        "make_args": "keyword arguments of gymnasium.make / textarena.make, e.g. {is_slippery: false}",
        "actions": "the admissible actions, listed in each observation: a Discrete(n) space's action names (default: "
        "known names, else 0..n-1); for text actions, the only moves let through (null: any text)",
        "intro": "text put before the first observation (what the game is about, where its observations do not "
        "say; FrozenLake has one built in, which says whether its ice is slippery)",
        "map_size": "FrozenLake: the side of the random map drawn for each task seed (null: the game's own, 4 or 8)",
        "hole_probability": "FrozenLake: the chance that a tile of a random map is a hole (a path to G always exists)",
        "fixed_map": "FrozenLake: play Gymnasium's one fixed map (every seed the same game) instead of random maps",
        "distinct_games": "the test split holds distinct games and the train split none of them (false: seeds only)",
        "max_steps": "moves an episode may take",
        "success_reward": "an episode succeeds when the game ends by itself on a move paying at least this (null: "
        "any such end); a success flag in the game's info decides where it gives one",
        "game_reason": "append the game's own closing sentence to the feedback (TextArena; it may give away the "
        "secret, e.g. GuessTheNumber's target)",
        "show_actions": "end each observation with the admissible actions, where there is a list",
        "seed": "which game seeds each split draws",
        "train_size": "games (seeds) in the train split",
        "test_size": "games (seeds) in the test split",
    }

    def __init__(
        self,
        *,
        id: str,
        source: str = "gymnasium",
        make_args: Mapping[str, Any] | None = None,
        actions: Sequence[str] | None = None,
        intro: str = "",
        max_steps: int = 20,
        success_reward: float | None = 1.0,
        game_reason: bool = False,
        show_actions: bool = True,
        seed: int = 0,
        train_size: int = 100,
        test_size: int = 20,
        map_size: int | None = None,
        hole_probability: float = 0.2,
        fixed_map: bool = False,
        distinct_games: bool = True,
    ):
        if not isinstance(id, str) or not id.strip():
            raise UserError(f"env.args.id must name a registered game, e.g. env=gym:FrozenLake-v1, got {id!r}")
        if source not in GAME_SOURCES:
            raise UserError(f"env.args.source must be one of {', '.join(GAME_SOURCES)}, got {source!r}")
        if make_args is not None and not isinstance(make_args, Mapping):
            raise UserError(f"env.args.make_args must be a mapping of keyword arguments, got {make_args!r}")
        if actions is not None and (isinstance(actions, str) or not isinstance(actions, Sequence) or not actions):
            raise UserError(f"env.args.actions must be a non-empty list of actions (or null), got {actions!r}")
        if success_reward is not None and (
            isinstance(success_reward, bool) or not isinstance(success_reward, (int, float))
        ):
            raise UserError(f"env.args.success_reward must be a number or null, got {success_reward!r}")
        check_count("max_steps", max_steps, 1)
        check_count("train_size", train_size, 0)
        check_count("test_size", test_size, 0)
        self.id, self.source, self.make_args = id.strip(), source, dict(make_args or {})
        self.max_steps, self.success_reward, self.game_reason = max_steps, success_reward, game_reason
        self.show_actions, self.seed, self.sizes = show_actions, seed, {"train": train_size, "test": test_size}
        self.distinct_games = bool(distinct_games)
        self.random_map = self._random_map(map_size, hole_probability, fixed_map)
        self._random = OwnRandom()
        with self._random.active():
            self.game = GAME_SOURCES[source](self.id, self.make_args, actions, *self._seeded_args())
        own_intro = INTROS.get(family(self.id)) if source == "gymnasium" else None
        self.intro = intro or (own_intro(self.game.unwrapped) if own_intro is not None else "")
        names = self.game.names
        self.system_prompt = SYSTEM_PROMPT.format(
            thought="Which move brings me closer to winning?" if names else "The last guess was too high.",
            example=names[-1] if names else "[7]",
            max_steps=max_steps,
            listed=" (one of the valid actions listed after each observation)" if names else "",
        )
        self.not_replayable = self._replay_check()
        self.deterministic = self.not_replayable is None
        self._tasks: dict[str, tuple[Task, ...]] = {}
        self._task: Task | None = None
        self._done = True
        self._moves = self._invalid = 0
        self._total = 0.0

    # --- FrozenLake's maps ----------------------------------------------------------------------------
    def _random_map(self, size: int | None, hole_probability: float, fixed: bool) -> tuple[int, float] | None:
        """(size, hole probability) of the random map drawn per seed, or None where the game keeps its own map."""
        if self.source != "gymnasium" or family(self.id) != "FrozenLake":
            if size is not None or fixed:
                raise UserError(f"env.args.map_size and fixed_map are FrozenLake's settings; '{self.id}' has no map")
            return None
        if size is not None:
            check_count("map_size", size, 2)
        if isinstance(hole_probability, bool) or not isinstance(hole_probability, (int, float)):
            raise UserError(f"env.args.hole_probability must be a number in [0, 1), got {hole_probability!r}")
        if not 0 <= hole_probability < 1:
            raise UserError(f"env.args.hole_probability must be in [0, 1), got {hole_probability}")
        if fixed or "desc" in self.make_args or "map_name" in self.make_args:
            return None
        return (size if size is not None else 8 if "8x8" in self.id else 4), float(hole_probability)

    def _seeded_args(self) -> tuple[Callable[[int], dict[str, Any]], ...]:
        if self.random_map is None:
            return ()
        size, holes = self.random_map
        return (partial(_map_args, size=size, hole_probability=holes),)

    # --- replay ---------------------------------------------------------------------------------
    def _replay_check(self) -> str | None:
        key = (self.source, self.id, repr(sorted(self.make_args.items())), self.random_map)
        if key not in _REPLAY_CHECKS:
            if not self.game.seeded:
                _REPLAY_CHECKS[key] = "its reset takes no seed"
            else:
                first, second = (self._start(PROBE_SEED) for _ in range(2))
                _REPLAY_CHECKS[key] = None if first == second else "two starts under one seed differed"
        return _REPLAY_CHECKS[key]

    def replay(self, task: Task, actions: Sequence[str]) -> str:
        if self.not_replayable:
            raise RuntimeError(
                f"'{self.id}' cannot be replayed ({self.not_replayable}); "
                "set algorithm.strategy_args.retry_from=scratch"
            )
        return super().replay(task, actions)

    # --- tasks ----------------------------------------------------------------------------------
    def tasks(self, split: str) -> Sequence[Task]:
        if split not in SPLITS:
            raise UserError(f"unknown split '{split}' for environment '{self.name}'; use 'train' or 'test'")
        if not self._tasks:
            key = (
                self.name,
                self.source,
                self.id,
                repr(sorted(self.make_args.items())),
                self.random_map,
                self.seed,
                tuple(self.sizes.items()),
                self.distinct_games,
            )
            if key not in _SPLITS:
                _SPLITS[key] = self._draw_splits()
            self._tasks = _SPLITS[key]
        return self._tasks[split]

    def _draw_splits(self) -> dict[str, tuple[Task, ...]]:
        """The test split's distinct games first, then the train split's games that are not held out."""
        test = self._draw("test", self.sizes["test"], held_out=set())
        train = self._draw("train", self.sizes["train"], held_out={game for _, game in test})
        label = self.id.replace("/", "_").replace(":", "_")
        return {
            split: tuple(
                Task(
                    id=f"{self.name}-{label}-{split}-{seed}",
                    prompt=f"{self.id} (seed {seed})",
                    data={"id": self.id, "seed": seed, "game": game},
                )
                for seed, game in drawn
            )
            for split, drawn in (("train", train), ("test", test))
        }

    def _draw(self, split: str, size: int, held_out: set[str]) -> list[tuple[int, str]]:
        """(seed, game) pairs of `split`: seeds from its own stream (odd for test, even for train); a test game once
        at most, a train game any number of times but never one held out."""
        stream, budget = random.Random(f"{self.seed}-{split}"), 20 * size + 200
        drawn: list[tuple[int, str]] = []
        seen = set(held_out)
        for _ in range(budget):
            if len(drawn) == size:
                return drawn
            seed = 2 * stream.randrange(2**30) + (split == "test")
            game = self.game_of(seed) if self.distinct_games and self.game.seeded else game_key(seed)
            if game in seen:
                continue
            drawn.append((seed, game))
            if split == "test":
                seen.add(game)
        if len(drawn) < size:
            which = "distinct games" if split == "test" else "games not held out"
            raise UserError(
                f"'{self.id}' gave only {len(drawn)} {which} in {budget} draws for the {split} split of {size}; "
                f"lower env.args.{split}_size{' or test_size' if split == 'train' else ''} "
                "(or set env.args.distinct_games=false)"
            )
        return drawn

    near_duplicate_rule = (
        "the same game by what makes it one (FrozenLake's map, GuessTheNumber's number, Mastermind's code, "
        "r3l/envs/games/game_rules.py), not its seed"
    )

    def near_duplicate_key(self, task: Task) -> Hashable:
        """The game a task's seed starts, by content: two seeds that hide the same number are one game."""
        if self.game.seeded and "seed" in task.data:
            return self.game_of(task.data["seed"])
        return super().near_duplicate_key(task)

    def game_of(self, seed: int) -> str:
        """The name of the game a seed starts (seeds that start the same game share it)."""
        frame = self._start(seed)
        return game_key(identity(self.id, _unwrapped(self.game), seed, frame.observation))

    # --- episode --------------------------------------------------------------------------------
    @property
    def admissible_actions(self) -> list[str]:
        return list(self.game.names or ())

    def reply_constraint(self, reply):
        if self.game.names:
            return action_constraint(self.game.names, reply)
        return move_constraint(move_form(self.id, _unwrapped(self.game)), reply)

    def _start(self, seed: int) -> Frame:
        with self._random.active(seed):
            return self.game.start(seed)

    def _show(self, observation: str) -> str:
        observation = observation.strip()
        return with_actions(observation, self.game.names) if self.show_actions and self.game.names else observation

    def reset(self, task: Task) -> str:
        frame = self._start(int(task.data["seed"]))
        self._task, self._done, self._moves, self._invalid, self._total = task, False, 0, 0, 0.0
        text = f"{self.intro.strip()}\n\n{frame.observation}" if self.intro.strip() else frame.observation
        return self._show(text)

    def _admit(self, action: str) -> str | None:
        """The move to play for `action`, or None when it may not reach the game."""
        if self.game.names:
            return {normalise_action(name): name for name in self.game.names}.get(normalise_action(action))
        action = action.strip()
        return action if action and self.game.admits(action) else None

    def step(self, action: str) -> StepResult:
        check_in_episode(self._task, self._done)
        self._moves += 1
        move = self._admit(action)
        if move is None:
            self._invalid += 1
            frame = Frame(
                invalid_observation(normalise_action(action), self.game.names or ())
                if self.game.names
                else f"'{action.strip()[:80]}' is not a move this game accepts.",
                accepted=False,
            )
            observation = frame.observation
        else:
            with self._random.active():
                frame = self.game.play(move)
            self._invalid += not frame.accepted
            self._total += frame.reward
            observation = self._show(frame.observation)
        success = (
            frame.won
            if frame.won is not None
            else frame.over and (self.success_reward is None or frame.reward >= self.success_reward)
        )
        done = bool(success or frame.over or frame.truncated or self._moves >= self.max_steps)
        info: dict[str, Any] = {
            "admissible": frame.accepted,
            "admissible_actions": self.admissible_actions,
            "moves": self._moves,
        }
        if done:
            self._done = True
            info.update(
                success=bool(success),
                feedback=_feedback(
                    success=bool(success),
                    over=frame.over,
                    truncated=frame.truncated,
                    moves=self._moves,
                    max_steps=self.max_steps,
                    total=self._total,
                    invalid=self._invalid,
                    reason=frame.reason if self.game_reason else "",
                ),
            )
        return StepResult(observation=observation, reward=frame.reward, done=done, info=info)

    def close(self) -> None:
        self.game.close()


@register("textarena")
class TextArenaEnv(GymGameEnv):
    name = "textarena"
    description = (
        "A single-player TextArena game (env=textarena:ID, e.g. GuessTheNumber-v0, Mastermind-v0): its "
        "messages as observations, its reward, exact replay under a seed."
    )

    fixed_arguments = {"source": "textarena"}
