"""ALFWorld (Shridhar et al., 2021), text-only: household tasks such as "put a clean mug in the coffee machine".

Data setup: `pip install alfworld` (the text-only install; it brings TextWorld), then `alfworld-download`,
which puts the games under ~/.cache/alfworld. Point `env.args.data_dir` or the ALFWORLD_DATA environment
variable elsewhere if they live there: the folder must hold json_2.1.1/{train,valid_seen,valid_unseen}/
<task type>-<objects>-<scene>/<trial>/game.tw-pddl. Games whose game.tw-pddl says they are not solvable,
and the 'movable' and 'Sliced' ones ALFWorld itself skips, are left out.

A task is one game file. The train split draws from json_2.1.1/train and the test split from
`test_split` (valid_seen, as in R3L's setup, or valid_unseen for unseen rooms); tasks alternate between
task types, each type's games shuffled by `seed`. Each game is played through TextWorld
(`textworld.gym.register_game` with ALFWorld's `AlfredDemangler`, asking for `admissible_commands` and
`won`). The reward is 1 on the step that wins the game (R3L's setting: reward = won), so success means
reward 1; the episode ends at the win or after `max_steps` turns (25, as in R3L). An action that is not
one of the game's admissible commands costs a turn, is not sent to the game and earns 0 (R3L's code
ended the episode instead).

The environment talks to an `ALFWorldBackend`; the TextWorld one is made unless a backend is given
(tests pass a small fake game).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from r3l.envs import register
from r3l.envs.base import Task
from r3l.envs.games.text_game import TextGameEnv, View, check_count, round_robin
from r3l.errors import UserError

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
TEST_FOLDERS = ("valid_seen", "valid_unseen")
GAME_FILE = "game.tw-pddl"
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
MISSING = (
    "the alfworld env needs ALFWorld: pip install alfworld, then alfworld-download for the games "
    "(env.args.data_dir or ALFWORLD_DATA names their folder)"
)

SYSTEM_PROMPT = (
    "You are a household robot in a text world. The first user message gives your task, e.g. 'put a clean "
    "mug in coffeemachine'; each later one describes what your last action did. Reply with exactly one "
    "action: first think briefly inside <think> </think> tags, then write the action inside <action> "
    "</action> tags, for example: <think>Mugs are often on the countertop.</think><action>go to countertop 1"
    "</action>. Action forms (objects and places with their numbers, as the game writes them): go to PLACE, "
    "open PLACE, close PLACE, take OBJECT from PLACE, move OBJECT to PLACE, clean OBJECT with PLACE, heat "
    "OBJECT with PLACE, cool OBJECT with PLACE, use OBJECT, examine THING, look, inventory. An action the "
    "game does not accept wastes a turn. You have at most {max_steps} turns."
)


class ALFWorldBackend(ABC):
    """Plays ALFWorld games. A game id is its path under json_2.1.1 without the file name,
    e.g. 'valid_seen/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-10/trial_T2019...'."""

    @abstractmethod
    def games(self, folder: str) -> Sequence[str]:
        """The playable games in json_2.1.1/`folder` (train, valid_seen or valid_unseen), sorted."""

    @abstractmethod
    def reset(self, game: str) -> View:
        """Start `game`; the view's actions are its admissible commands, score 0."""

    @abstractmethod
    def step(self, command: str) -> View:
        """Play an admissible command; score 1 and over once the game is won."""

    def close(self) -> None:
        """Release the game engine."""


def task_type(game: str) -> str:
    """The task type a game id names: 'valid_seen/pick_clean_then_place_in_recep-Mug-...' ->
    'pick_clean_then_place_in_recep'."""
    parts = game.split("/")
    return parts[1].split("-", 1)[0] if len(parts) > 1 else ""


def strip_banner(observation: str) -> str:
    """The first observation without TextWorld's welcome line."""
    return observation.replace(BANNER, "", 1).strip()


def data_root(data_dir: str | None) -> Path:
    """Where the games are: `data_dir`, else $ALFWORLD_DATA, else ALFWorld's default ~/.cache/alfworld."""
    return Path(os.path.expanduser(data_dir or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld"))


@functools.lru_cache(maxsize=8)
def list_games(root: str, folder: str) -> tuple[str, ...]:
    """Solvable game ids under root/json_2.1.1/folder, sorted; UserError when there are none."""
    base = Path(root) / "json_2.1.1"
    found = []
    for path in sorted((base / folder).glob(f"*/*/{GAME_FILE}")):
        game = path.parent.relative_to(base).as_posix()
        if "movable" in game or "Sliced" in game or not _solvable(path):
            continue
        found.append(game)
    if not found:
        raise UserError(
            f"no ALFWorld games under {base / folder}; run alfworld-download, or point env.args.data_dir "
            "(or ALFWORLD_DATA) at the folder that holds json_2.1.1"
        )
    return tuple(found)


def _solvable(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("solvable", False))
    except (OSError, ValueError):
        return False


class TextWorldBackend(ALFWorldBackend):
    """ALFWorld's games on TextWorld, one game engine at a time."""

    def __init__(self, data_dir: str | None = None):
        if importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("textworld") is None:
            raise UserError(MISSING)
        self.root = data_root(data_dir)
        self._game: Any = None

    def games(self, folder: str) -> Sequence[str]:
        return list_games(str(self.root), folder)

    def reset(self, game: str) -> View:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        self.close()
        infos = textworld.EnvInfos(admissible_commands=True, won=True)
        game_file = self.root / "json_2.1.1" / game / GAME_FILE
        env_id = textworld.gym.register_game(
            str(game_file),
            infos,
            max_episode_steps=10**6,  # max_steps ends episodes
            wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
        )
        self._game = textworld.gym.make(env_id)
        observation, state = self._game.reset()
        return View(observation, tuple(state["admissible_commands"]))

    def step(self, command: str) -> View:
        observation, _, done, state = self._game.step(command)
        won = bool(state["won"])
        return View(observation, tuple(state["admissible_commands"]), 1.0 if won else 0.0, bool(done) or won)

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None


@register("alfworld")
class ALFWorldEnv(TextGameEnv):
    name = "alfworld"
    description = "ALFWorld household tasks in text (on TextWorld); reward 1 once the task is done (needs alfworld)."
    failure_cause = "the game ended before the task was done"
    system_prompt = SYSTEM_PROMPT.format(max_steps=25)
    argument_help = {
        "data_dir": "the folder alfworld-download filled (null: $ALFWORLD_DATA, else ~/.cache/alfworld)",
        "test_split": "the test games: valid_seen (R3L's) or valid_unseen (rooms not seen in training)",
        "task_types": "ALFWorld task types to use, tasks alternating between them (null: all): "
        + ", ".join(TASK_TYPES),
    }

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        test_split: str = "valid_seen",
        task_types: Sequence[str] | str | None = None,
        train_size: int | None = None,
        test_size: int | None = None,
        max_steps: int = 25,
        seed: int = 0,
        show_actions: bool = True,
        backend: ALFWorldBackend | None = None,
    ):
        super().__init__(max_steps=max_steps, show_actions=show_actions)
        if test_split not in TEST_FOLDERS:
            raise UserError(f"env.args.test_split must be one of {', '.join(TEST_FOLDERS)}, got '{test_split}'")
        types = (
            TASK_TYPES if task_types is None else ((task_types,) if isinstance(task_types, str) else tuple(task_types))
        )
        unknown = [name for name in types if name not in TASK_TYPES]
        if unknown or not types:
            raise UserError(
                f"env.args.task_types must name ALFWorld task types ({', '.join(TASK_TYPES)}); got {list(types)}"
            )
        check_count("train_size", train_size, 0, optional=True)
        check_count("test_size", test_size, 0, optional=True)
        self.backend = backend if backend is not None else TextWorldBackend(data_dir)
        self.folders = {"train": "train", "test": test_split}
        self.task_types = types
        self.sizes = {"train": train_size, "test": test_size}
        self.seed = seed
        self.system_prompt = SYSTEM_PROMPT.format(max_steps=max_steps)

    def _list_tasks(self, split: str) -> Sequence[Task]:
        pools: dict[str, list[str]] = {name: [] for name in self.task_types}
        for game in self.backend.games(self.folders[split]):
            if task_type(game) in pools:
                pools[task_type(game)].append(game)
        for name, games in pools.items():
            random.Random(f"{self.seed}-{split}-{name}").shuffle(games)
        chosen = round_robin(pools, self.sizes[split], f"{split}_size", "games")
        return [
            Task(
                id=f"{self.name}-{game}", prompt=f"ALFWorld {kind} game {game}", data={"game": game, "task_type": kind}
            )
            for kind, game in chosen
        ]

    def _start(self, task: Task) -> View:
        view = self.backend.reset(task.data["game"])
        return replace(view, observation=strip_banner(view.observation))

    def _play(self, command: str) -> View:
        return self.backend.step(command)

    def close(self) -> None:
        self.backend.close()
