"""TextWorldExpress (Jansen & Côté, 2022): small text games played one action a turn.

Games: 'cookingworld' (read a recipe, gather and prepare the ingredients, eat the meal), 'coin' (find
the coin and take it), 'mapreader' (use a map to fetch a coin into a box), 'twc' (put things where they
belong). A task is (game, seed, fold): the train split draws from TextWorldExpress's train-fold seeds
and the test split from its test-fold seeds, so the splits never share a game world. Each game gets
small settings by default (`DEFAULT_PARAMS`) so that a gold playthrough takes about 2-16 actions.

The simulator runs in a Java VM (`pip install textworld-express`; needs `java` on PATH). One VM per env
object, started on first use; `reset(task)` reloads the game only when the task's game changes.
The score TextWorldExpress reports is already in [0, 1]; the per-step reward is its increase, so an
episode's rewards add up to the final score. Success is the game's own `tasksuccess` (or full score).
An action is admissible when it is one of the game's valid actions (case and spacing do not matter);
anything else costs a turn, leaves the game untouched and earns 0.
Each observation ends with the list of valid actions (`show_actions`, on by default: small games have
about 10-30, and an agent that sees them wastes fewer turns).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from r3l.envs import register
from r3l.envs.base import Task
from r3l.envs.games.java_simulator import close_quietly, kill_java
from r3l.envs.games.text_game import TextGameEnv, View, check_count, round_robin
from r3l.errors import UserError

GAMES = ("cookingworld", "coin", "mapreader", "twc")
DEFAULT_PARAMS = {
    "cookingworld": "numLocations=1,numIngredients=2,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    "coin": "numLocations=3,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    "mapreader": "numLocations=3,maxDistanceApart=2,maxDistractorItemsPerLocation=0,includeDoors=0,"
    "limitInventorySize=0",
    "twc": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
}
MISSING = "the textworld_express env needs the simulator: pip install textworld-express (and Java on PATH)"

SYSTEM_PROMPT = (
    "You are playing a text adventure game. Each turn the user message describes what you observe; you "
    "reply with exactly one action. First think briefly inside <think> </think> tags, then write the action "
    "inside <action> </action> tags, for example: <think>The coin is not here; the pantry is north.</think>"
    "<action>move north</action>. Actions are short commands using the object names exactly as the game "
    "writes them, such as: look around, inventory, move east, open fridge, take coin, examine counter, "
    "read cookbook, put coin in box, chop carrot, cook carrot in stove, prepare meal, eat meal. "
    "An action the game does not accept wastes a turn. You have at most {max_steps} turns."
)


def parse_params(text: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; raises UserError on a piece without '='."""
    params = {}
    for piece in filter(None, (part.strip() for part in str(text).split(","))):
        key, sep, value = piece.partition("=")
        if not sep or not key.strip():
            raise UserError(f"env.args.game_params must look like 'numLocations=3,includeDoors=0', got piece '{piece}'")
        params[key.strip()] = value.strip()
    return params


def game_settings(games: Sequence[str], game_params: str | Mapping[str, str]) -> dict[str, str]:
    """Each game's TextWorldExpress parameter string: the defaults, overlaid by `game_params`
    (one string for every game, or a mapping game -> string)."""
    if isinstance(game_params, Mapping):
        unknown = sorted(set(game_params) - set(games))
        if unknown:
            raise UserError(f"env.args.game_params names games not in env.args.games: {', '.join(unknown)}")
        overrides = {game: parse_params(game_params.get(game, "")) for game in games}
    else:
        overrides = {game: parse_params(game_params) for game in games}
    settings = {}
    for game in games:
        params = {**parse_params(DEFAULT_PARAMS.get(game, "")), **overrides[game]}
        settings[game] = ",".join(f"{key}={value}" for key, value in params.items())
    return settings


@register("textworld_express")
class TextWorldExpressEnv(TextGameEnv):
    name = "textworld_express"
    description = "TextWorldExpress text games (cooking, coin, map reader, tidy-up), one action a turn (needs Java)."
    system_prompt = SYSTEM_PROMPT.format(max_steps=20)
    argument_help = {
        "games": "the games to play, tasks alternating between them: " + ", ".join(GAMES),
        "game_params": "TextWorldExpress parameters over the small defaults, e.g. 'numLocations=5,includeDoors=1' "
        "(one string for every game, or a mapping game -> string)",
        "train_size": "games in the train split (from TextWorldExpress's train seeds)",
        "test_size": "games in the test split (from its test seeds)",
    }

    def __init__(
        self,
        *,
        games: Sequence[str] | str = GAMES,
        game_params: str | Mapping[str, str] = "",
        train_size: int = 100,
        test_size: int = 20,
        max_steps: int = 20,
        seed: int = 0,
        show_actions: bool = True,
    ):
        super().__init__(max_steps=max_steps, show_actions=show_actions)
        games = (games,) if isinstance(games, str) else tuple(games)
        if not games or len(set(games)) != len(games):
            raise UserError(f"env.args.games must list distinct games, got {list(games)}")
        check_count("train_size", train_size, 0)
        check_count("test_size", test_size, 0)
        try:
            from textworld_express import TextWorldExpressEnv as simulator_class
            from textworld_express.constants import GAME_NAMES
        except ImportError:
            raise UserError(MISSING) from None
        unknown = [game for game in games if game not in GAME_NAMES]
        if unknown:
            raise UserError(
                f"unknown TextWorldExpress game(s) {', '.join(unknown)}; choose from {', '.join(GAME_NAMES)}"
            )
        if shutil.which("java") is None:
            raise UserError(
                "the textworld_express env needs Java on PATH (e.g. apt-get install openjdk-17-jre-headless)"
            )
        self._simulator_class = simulator_class
        self.games = games
        self.params = game_settings(games, game_params)
        self.sizes = {"train": train_size, "test": test_size}
        self.seed = seed
        self.system_prompt = SYSTEM_PROMPT.format(max_steps=max_steps)
        self._sim: Any = None
        self._loaded: tuple[str, str] | None = None

    # --- simulator -------------------------------------------------------------------------------
    def _simulator(self) -> Any:
        if self._sim is None:
            self._sim = self._simulator_class(envStepLimit=10**9)  # our max_steps ends episodes
        return self._sim

    def _load(self, game: str, params: str) -> Any:
        sim = self._simulator()
        if self._loaded != (game, params):
            try:
                sim.load(game, params)
            except ValueError as error:
                raise UserError(f"TextWorldExpress rejects the parameters for '{game}': {error}".strip()) from None
            self._loaded = (game, params)
        return sim

    def abort(self) -> None:
        kill_java(self._sim)

    def close(self) -> None:
        """Stop the Java VM (a later reset starts a new one)."""
        if self._sim is not None:
            close_quietly(self._sim)
            self._sim, self._loaded = None, None

    # --- tasks -----------------------------------------------------------------------------------
    def _list_tasks(self, split: str) -> Sequence[Task]:
        pools = {}
        for game in self.games:
            sim = self._load(game, self.params[game])
            seeds = sorted(sim.getValidSeedsTrain() if split == "train" else sim.getValidSeedsTest())
            random.Random(f"{self.seed}-{split}-{game}").shuffle(seeds)
            pools[game] = seeds
        chosen = round_robin(pools, self.sizes[split], f"{split}_size", "games")
        return [self._make_task(game, seed, split) for game, seed in chosen]

    def _make_task(self, game: str, seed: int, fold: str) -> Task:
        return Task(
            id=f"{self.name}-{game}-{fold}-{seed}",
            prompt=f"TextWorldExpress {game} game ({fold} seed {seed})",
            data={"game": game, "seed": int(seed), "fold": fold, "params": self.params[game]},
        )

    # --- episode ---------------------------------------------------------------------------------
    def _launch(self, task: Task, gold: bool) -> tuple[str, dict[str, Any]]:
        data = task.data
        sim = self._load(data["game"], data.get("params", self.params.get(data["game"], "")))
        return sim.reset(seed=int(data["seed"]), gameFold=data["fold"], generateGoldPath=gold)

    def _start(self, task: Task) -> View:
        observation, infos = self._launch(task, gold=False)
        return View(
            f"{infos['taskDescription'].strip()}\n\n{observation.strip()}",
            tuple(sorted(infos["validActions"])),
            _clamp(infos["score"]),
        )

    def _play(self, command: str) -> View:
        observation, _, _, infos = self._sim.step(command)
        success, failure = bool(infos["tasksuccess"]), bool(infos["taskfailure"])
        return View(
            observation, tuple(sorted(infos["validActions"])), _clamp(infos["score"]), success or failure, won=success
        )

    def gold_actions(self, task: Task) -> list[str]:
        """A winning action sequence from the simulator (ends any episode in progress)."""
        self._launch(task, gold=True)
        self._task, self._done = None, True
        return list(self._sim.getGoldActionSequence())


def _clamp(score: float) -> float:
    return min(max(float(score), 0.0), 1.0)
