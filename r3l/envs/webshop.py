"""WebShop (Yao et al., 2022): find and buy the product an instruction describes, on a simulated web store.

Data setup: WebShop is not on PyPI. Clone github.com/princeton-nlp/WebShop, run its `./setup.sh -d all`
(it installs the requirements, downloads the 1.18M products and human instructions, and builds the
search index; needs Java), then point `env.args.webshop_path` or the WEBSHOP_PATH environment variable at
the checkout (or install it so that `web_agent_site` imports). `./setup.sh -d small` loads 1,000 products,
which leaves too few instructions for WebShop's train split. The full store needs ~15 GB of memory.

A task is one of WebShop's goals (an instruction), played as a session of `WebAgentTextEnv`
(observation_mode 'text_rich', human-written instructions, all products: R3L's settings). The splits
are WebShop's own (`split: webshop`): goals 0-499 are the test split and goals from 1500 on the train split.
`split: paper` is R3L's data script's: goals 0-4095 for training (which include WebShop's test goals) and
4096-4195 for testing.
Actions are `search[keywords]` where the page has a search box and `click[name]` for one of the page's
buttons, products and options; anything else costs a turn, is not sent to the store and earns 0.
Buying (click[buy now]) ends the episode and pays WebShop's score in [0, 1] for how well the item matches
(R3L's reward); success means a score of 1. The episode also ends after `max_steps` turns (15, as in R3L).

The environment talks to a `WebShopBackend`; the WebShop one is made unless a backend is given (tests pass
a small fake shop).
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l.envs import register
from r3l.envs.base import Task, check_split_size
from r3l.envs.games.text_game import TextGameEnv, View, check_count
from r3l.errors import UserError

TEST_GOALS = range(500)
FIRST_TRAIN_GOAL = 1500
PAPER_SPLIT = {"train": range(4096), "test": range(4096, 4196)}  # R3L's WebShop data script
SPLITS = ("webshop", "paper")
SEARCH_FORM = "search[<keywords>]"
OBSERVATION_MODES = ("text", "text_rich")
MISSING = (
    "the webshop env needs WebShop: clone github.com/princeton-nlp/WebShop, run ./setup.sh -d all there, "
    "and set env.args.webshop_path (or WEBSHOP_PATH) to the checkout"
)
_ACTION = re.compile(r"^(search|click)\s*\[(.*)\]$", re.DOTALL)

SYSTEM_PROMPT = (
    "You are shopping on a web store for the product that the instruction describes. Each user message shows "
    "the current page. Reply with exactly one action: first think briefly inside <think> </think> tags, then "
    "write the action inside <action> </action> tags, for example: <think>I should look for cotton t-shirts."
    "</think><action>search[red cotton t-shirt]</action>. Actions: search[keywords] on a page with a search "
    "box; click[name] for one of the page's buttons, products or options, e.g. click[b07xyz1234], click[large], "
    "click[< prev], click[buy now]. Choose the options the instruction asks for before you buy: buying ends "
    "the episode and is scored by how well the item matches. An action the page does not offer wastes a turn. "
    "You have at most {max_steps} turns."
)


@dataclass(frozen=True)
class Page:
    """A WebShop page as `WebAgentTextEnv` reports it."""

    observation: str
    has_search_bar: bool
    clickables: tuple[str, ...]  # without the search button
    reward: float = 0.0
    done: bool = False


class WebShopBackend(ABC):
    """Runs WebShop sessions; goal i is the i-th instruction of the store."""

    @abstractmethod
    def goal_count(self) -> int:
        """How many goals (instructions) the store has."""

    @abstractmethod
    def reset(self, goal: int) -> Page:
        """Start a session on `goal` at the search page."""

    @abstractmethod
    def step(self, action: str) -> Page:
        """Play 'search[...]' or 'click[...]'; buying gives the reward and ends the session."""

    def close(self) -> None:
        """Release the store."""


def goal_splits(count: int, split: str = "webshop") -> dict[str, range]:
    """The goal ranges: WebShop's (test 0-499, train 1500 onwards) or the paper's (train 0-4095, test 4096-4195);
    UserError when the store is too small for them."""
    if split == "paper":
        if count < PAPER_SPLIT["test"].stop:
            raise UserError(
                f"WebShop has only {count} goals, too few for the paper's split (test goals 4096-4195); "
                "load all products (./setup.sh -d all, env.args.num_products null)"
            )
        return dict(PAPER_SPLIT)
    if count <= FIRST_TRAIN_GOAL:
        raise UserError(
            f"WebShop has only {count} goals, too few for its train split (goals {FIRST_TRAIN_GOAL} on); "
            "load all products (./setup.sh -d all, env.args.num_products null)"
        )
    return {"test": range(TEST_GOALS.start, min(TEST_GOALS.stop, count)), "train": range(FIRST_TRAIN_GOAL, count)}


def page_actions(page: Page) -> tuple[str, ...]:
    """The actions a page offers, as the agent writes them."""
    search = (SEARCH_FORM,) if page.has_search_bar else ()
    return search + tuple(f"click[{name}]" for name in page.clickables)


def admit_action(action: str, page: Page) -> str | None:
    """The WebShop action for `action` (already normalised) on `page`, or None if the page does not offer it."""
    match = _ACTION.match(action)
    if match is None:
        return None
    kind, argument = match.group(1), " ".join(match.group(2).split())
    if kind == "search":
        return f"search[{argument}]" if argument and page.has_search_bar else None
    names = {name.lower(): name for name in page.clickables}
    return f"click[{names[argument]}]" if argument in names else None


class WebAgentTextBackend(WebShopBackend):
    """princeton-nlp/WebShop's `WebAgentTextEnv`, loaded on first use."""

    def __init__(
        self,
        webshop_path: str | None = None,
        num_products: int | None = None,
        human_goals: bool = True,
        observation_mode: str = "text_rich",
    ):
        path = webshop_path or os.environ.get("WEBSHOP_PATH")
        if path and not (Path(path).expanduser() / "web_agent_site").is_dir():
            raise UserError(
                f"no web_agent_site folder in {path}; set env.args.webshop_path (or WEBSHOP_PATH) to a WebShop checkout"
            )
        if not path and importlib.util.find_spec("web_agent_site") is None:
            raise UserError(MISSING)
        self.path = str(Path(path).expanduser()) if path else None
        self.settings = dict(observation_mode=observation_mode, num_products=num_products, human_goals=human_goals)
        self._store: Any = None

    def _env(self) -> Any:
        if self._store is None:
            if self.path and self.path not in sys.path:
                sys.path.insert(0, self.path)
            from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv

            try:
                self._store = WebAgentTextEnv(**self.settings)
            except FileNotFoundError as error:
                raise UserError(
                    f"WebShop's data is missing ({error.filename}); run ./setup.sh -d all in the WebShop checkout"
                ) from None
        return self._store

    def goal_count(self) -> int:
        return len(self._env().server.goals)

    def reset(self, goal: int) -> Page:
        observation, _ = self._env().reset(session=goal)
        return self._page(observation, 0.0, False)

    def step(self, action: str) -> Page:
        observation, reward, done, _ = self._store.step(action)
        return self._page(observation, reward, done)

    def _page(self, observation: str, reward: float, done: bool) -> Page:
        available = self._store.get_available_actions()
        clickables = tuple(name for name in available["clickables"] if name != "search")
        return Page(observation, bool(available["has_search_bar"]), clickables, float(reward), bool(done))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


@register("webshop")
class WebShopEnv(TextGameEnv):
    name = "webshop"
    description = "WebShop: search a web store and buy the item an instruction describes; reward = match score."
    failure_cause = "the item bought matches the instruction only in part"
    system_prompt = SYSTEM_PROMPT.format(max_steps=15)
    argument_help = {
        "webshop_path": "a WebShop checkout set up with ./setup.sh -d all (null: $WEBSHOP_PATH, or web_agent_site "
        "installed)",
        "num_products": "products the store loads (null: all; fewer leave too few goals for the train split)",
        "human_goals": "the human-written instructions (R3L's setting) instead of WebShop's generated ones",
        "observation_mode": "how pages are shown: " + ", ".join(OBSERVATION_MODES),
        "split": "whose goal split: webshop (test 0-499, train 1500 on) or paper (R3L's: train 0-4095, test 4096-4195)",
        "train_size": "goals drawn from the train split (null: all; more than it has is refused)",
        "test_size": "goals drawn from the test split (null: all; more than it has is refused)",
        "seed": "the order in which each split's goals are drawn",
    }

    def __init__(
        self,
        *,
        webshop_path: str | None = None,
        num_products: int | None = None,
        human_goals: bool = True,
        observation_mode: str = "text_rich",
        split: str = "webshop",
        train_size: int | None = None,
        test_size: int | None = None,
        max_steps: int = 15,
        seed: int = 0,
        show_actions: bool = True,
        backend: WebShopBackend | None = None,
    ):
        super().__init__(max_steps=max_steps, show_actions=show_actions)
        if observation_mode not in OBSERVATION_MODES:
            raise UserError(
                f"env.args.observation_mode must be one of {', '.join(OBSERVATION_MODES)}, got '{observation_mode}'"
            )
        if split not in SPLITS:
            raise UserError(f"env.args.split must be one of {', '.join(SPLITS)}, got '{split}'")
        check_count("num_products", num_products, 1, optional=True)
        check_count("train_size", train_size, 0, optional=True)
        check_count("test_size", test_size, 0, optional=True)
        self.backend = (
            backend
            if backend is not None
            else WebAgentTextBackend(webshop_path, num_products, human_goals, observation_mode)
        )
        self.sizes = {"train": train_size, "test": test_size}
        self.split = split
        self.seed = seed
        self.system_prompt = SYSTEM_PROMPT.format(max_steps=max_steps)
        self._page = Page("", False, ())

    def _list_tasks(self, split: str) -> Sequence[Task]:
        goals = list(goal_splits(self.backend.goal_count(), self.split)[split])
        random.Random(f"{self.seed}-{split}").shuffle(goals)
        size = self.sizes[split]
        check_split_size(f"{split}_size", size, len(goals), "goals")
        return [
            Task(id=f"{self.name}-{goal}", prompt=f"WebShop goal {goal}", data={"goal": goal}) for goal in goals[:size]
        ]

    def admit(self, action: str) -> str | None:
        return admit_action(action, self._page)

    def _start(self, task: Task) -> View:
        return self._view_of(self.backend.reset(int(task.data["goal"])))

    def _play(self, command: str) -> View:
        return self._view_of(self.backend.step(command))

    def _view_of(self, page: Page) -> View:
        self._page = page
        return View(page.observation, page_actions(page), page.reward, page.done)

    def close(self) -> None:
        self.backend.close()
