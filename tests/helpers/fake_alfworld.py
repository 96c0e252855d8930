"""A deterministic ALFWorld-like backend for tests: three places, one object, "put a (clean) X in Y".

Game ids follow ALFWorld's folders ('<folder>/<task type>-<Object>-None-<Target>-<n>/trial_1'). The object
starts on countertop 1; cleaning happens at sinkbasin 1; the game is won when the object (clean, for the
'pick_clean' type) is moved to the target. Wording follows ALFWorld's grammar.
"""

from __future__ import annotations

from r3l.envs.alfworld import BANNER, ALFWorldBackend, task_type
from r3l.envs.games.text_game import View

GAMES = {
    "train": (
        "train/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1/trial_1",
        "train/pick_clean_then_place_in_recep-Plate-None-Cabinet-2/trial_1",
        "train/pick_and_place_simple-Apple-None-Fridge-3/trial_1",
    ),
    "valid_seen": ("valid_seen/pick_clean_then_place_in_recep-Cup-None-Shelf-4/trial_1",),
    "valid_unseen": ("valid_unseen/pick_and_place_simple-Book-None-Desk-5/trial_1",),
}
COUNTER, SINK = "countertop 1", "sinkbasin 1"


def parse(game: str) -> tuple[str, str, bool]:
    """(object, target, must be clean) of a game id."""
    _, obj, _, target, _ = game.split("/")[1].split("-")
    return obj.lower(), target.lower(), task_type(game) == "pick_clean_then_place_in_recep"


def solution(game: str) -> list[str]:
    obj, target, clean = parse(game)
    steps = [f"go to {COUNTER}", f"take {obj} 1 from {COUNTER}"]
    if clean:
        steps += [f"go to {SINK}", f"clean {obj} 1 with {SINK}"]
    return steps + [f"go to {target} 1", f"move {obj} 1 to {target} 1"]


class FakeALFWorld(ALFWorldBackend):
    def __init__(self):
        self.played: list[str] = []  # every command the game received
        self.closed = 0

    def games(self, folder: str) -> tuple[str, ...]:
        return GAMES[folder]

    def reset(self, game: str) -> View:
        self.obj, target, self.needs_clean = parse(game)
        self.target = f"{target} 1"
        self.places = (COUNTER, SINK, self.target)
        self.at: str | None = None
        self.where: str | None = COUNTER  # None while held
        self.clean = False
        goal = f"put a {'clean ' if self.needs_clean else ''}{self.obj} in {target}"
        look = (
            "You are in the middle of a room. Looking quickly around you, you see "
            f"a {COUNTER}, a {SINK}, and a {self.target}."
        )
        return View(f"{BANNER}\n\n{look}\n\nYour task is to: {goal}.", self._actions())

    def step(self, command: str) -> View:
        self.played.append(command)
        item = f"{self.obj} 1"
        if command not in self._actions():
            text = "Nothing happens."
        elif command.startswith("go to "):
            self.at = command[len("go to ") :]
            text = f"You arrive at {self.at}. {self._contents()}"
        elif command.startswith("take "):
            self.where = None
            text = f"You pick up the {item} from the {self.at}."
        elif command.startswith("clean "):
            self.clean = True
            text = f"You clean the {item} using the {SINK}."
        elif command.startswith("move "):
            self.where = self.at
            text = f"You move the {item} to the {self.at}."
        elif command == "inventory":
            text = f"You are carrying: a {item}." if self.where is None else "You are not carrying anything."
        else:  # look, examine
            text = f"You are facing the {self.at}. {self._contents()}" if self.at else "You are in a room."
        won = self.where == self.target and (self.clean or not self.needs_clean)
        return View(text, () if won else self._actions(), 1.0 if won else 0.0, won)

    def close(self) -> None:
        self.closed += 1

    def _contents(self) -> str:
        seen = f"a {self.obj} 1" if self.where == self.at else "nothing"
        return f"On the {self.at}, you see {seen}."

    def _actions(self) -> tuple[str, ...]:
        item = f"{self.obj} 1"
        actions = ["look", "inventory"] + [f"go to {place}" for place in self.places if place != self.at]
        if self.at is not None:
            actions.append(f"examine {self.at}")
            if self.where == self.at:
                actions.append(f"take {item} from {self.at}")
            if self.where is None:
                actions.append(f"move {item} to {self.at}")
                if self.at == SINK:
                    actions.append(f"clean {item} with {SINK}")
        return tuple(sorted(actions))
