"""ScienceWorld (Wang et al., 2022): elementary-science experiments in a text world, one action a turn.

A task is (task type, variation). With `split="paper"` (the default) the train split uses 17 task types
and the test split the 13 others, so evaluation is on held-out task types: the lists are those of the
public R3L code (github.com/shiweijiezero/R3L, examples/R3L/scienceworld/get_sciworld_data.py, taken over
from Trinity-RFT's ScienceWorld example). `split="variations"` uses the same types in both splits. Either
way the train split draws from ScienceWorld's train variations and the test split from its test
variations (R3L's script took the first half of each type's variations for both splits instead).
`task_names` narrows the types; tasks alternate between types, each type's variations shuffled by `seed`.

The simulator runs in a Java VM (`pip install scienceworld`; needs Java on PATH). One VM per env object,
started on first use. Scores go 0..100 and drop to -100 when the task fails (e.g. focusing on the wrong
object), which ends the episode. Rewards pay out max(score, 0) / 100 as it grows: an admissible step
earns the change since the last payment (the first one also the points a task starts with), a step
ScienceWorld does not understand earns 0 (the simulator may still count it as a tick of time), and the
last step settles any balance, so an episode's rewards add up to its final score / 100, and to 0 after a
failure. Success is a score of 100. An ambiguous action is resolved to
ScienceWorld's first reading, as its reference agents do, and the observation says which.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from typing import Any

from r3l.envs import register
from r3l.envs.base import Env, StepResult, Task
from r3l.envs.games.feedback import episode_feedback
from r3l.envs.games.java_simulator import close_quietly, kill_java
from r3l.envs.games.text_game import check_count, check_in_episode, invalid_observation, normalise_action, round_robin
from r3l.envs.reply_grammar import action_constraint
from r3l.errors import UserError

PAPER_TRAIN_TYPES = (
    "boil",
    "melt",
    "change-the-state-of-matter-of",
    "use-thermometer",
    "measure-melting-point-known-substance",
    "power-component",
    "test-conductivity",
    "find-living-thing",
    "find-plant",
    "grow-plant",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "lifespan-shortest-lived",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "mendelian-genetics-known-plant",
)
SPLITS = ("paper", "variations")
SIMPLIFICATIONS = (
    "easy",
    "teleportAction",
    "selfWateringFlowerPots",
    "openContainers",
    "openDoors",
    "noElectricalAction",
)
MISSING = "the scienceworld env needs the simulator: pip install scienceworld (and Java on PATH)"
MAX_ACTION_CHARS = 300
BLOCKED = ("reset task",)  # would restart the task mid-episode
_NOT_UNDERSTOOD = ("No known action matches that input", "Unknown action")
_AMBIGUOUS = "Ambiguous request"

SYSTEM_PROMPT = (
    "You are an agent in ScienceWorld, a text world of rooms and objects where you carry out elementary "
    "science experiments. Each turn the user message describes what you observe; you reply with exactly one "
    "action. First think briefly inside <think> </think> tags, then write the action inside <action> "
    "</action> tags, for example: <think>I need water; the kitchen has a sink.</think><action>teleport to "
    "kitchen</action>. Action forms (OBJ and LOC are names as the game writes them): look around, look at OBJ, "
    "look in OBJ, inventory, task, go to LOC, teleport to LOC, open OBJ, close OBJ, pick up OBJ, put down OBJ, "
    "move OBJ to OBJ, pour OBJ in OBJ, dunk OBJ in OBJ, mix OBJ, activate OBJ, deactivate OBJ, use OBJ on OBJ, "
    "connect OBJ to OBJ, disconnect OBJ, eat OBJ, flush OBJ, read OBJ, focus on OBJ, wait, wait1. "
    "'focus on' tells the game which object the task is about: focusing on a wrong object fails the task at "
    "once, so focus only when the task asks for it and you are sure. An action the game does not understand "
    "wastes a turn. You have at most {max_steps} turns."
)


@register("scienceworld")
class ScienceWorldEnv(Env):
    name = "scienceworld"
    description = "ScienceWorld science experiments in a text world; test on held-out task types (needs Java)."
    deterministic = True
    watch_prompt_copies = False
    system_prompt = SYSTEM_PROMPT.format(max_steps=30)
    argument_help = {
        "task_names": "ScienceWorld task types to use, e.g. [boil, melt] (null: all 30)",
        "split": "paper: train and test on different task types, as R3L; variations: the same types in both",
        "simplification": "ScienceWorld's simplifications, comma-separated: " + ", ".join(SIMPLIFICATIONS),
        "max_steps": "turns an episode may take",
        "train_size": "tasks in the train split (from ScienceWorld's train variations; null: every one, 2,288 for "
        "split paper's train types; more than the split has is refused)",
        "test_size": "tasks in the test split (from its test variations; null: every one, 662 for split paper's 13 "
        "held-out types; more than the split has is refused)",
        "seed": "the order of each type's variations",
    }

    def __init__(
        self,
        *,
        task_names: Sequence[str] | str | None = None,
        split: str = "paper",
        simplification: str = "easy",
        max_steps: int = 30,
        train_size: int | None = None,
        test_size: int | None = None,
        seed: int = 0,
    ):
        if split not in SPLITS:
            raise UserError(f"env.args.split must be one of {', '.join(SPLITS)}, got '{split}'")
        check_count("max_steps", max_steps, 1)
        check_count("train_size", train_size, 0, optional=True)
        check_count("test_size", test_size, 0, optional=True)
        bad = [part for part in str(simplification).split(",") if part and part not in SIMPLIFICATIONS]
        if bad:
            raise UserError(f"env.args.simplification must be a comma list of {', '.join(SIMPLIFICATIONS)}; got {bad}")
        try:
            from scienceworld import ScienceWorldEnv as simulator_class
            from scienceworld.constants import ID2TASK
            from scienceworld.utils import infer_task
        except ImportError:
            raise UserError(MISSING) from None
        if shutil.which("java") is None:
            raise UserError("the scienceworld env needs Java on PATH (e.g. apt-get install openjdk-17-jre-headless)")
        all_types = [infer_task(name) for name in ID2TASK.values()]
        if task_names is None:
            chosen = all_types
        else:
            names = [task_names] if isinstance(task_names, str) else list(task_names)
            chosen = [infer_task(str(name)) for name in names]
            unknown = [name for name in chosen if name not in all_types]
            if unknown:
                raise UserError(
                    f"unknown ScienceWorld task(s) {', '.join(unknown)}; choose from {', '.join(all_types)}"
                )
        if split == "paper":
            self.types = {
                "train": [name for name in chosen if name in PAPER_TRAIN_TYPES],
                "test": [name for name in chosen if name not in PAPER_TRAIN_TYPES],
            }
        else:
            self.types = {"train": chosen, "test": chosen}
        for part, types in self.types.items():
            if not types:
                raise UserError(
                    f"env.args.task_names leaves the {part} split of split='{split}' without task types; "
                    f"add one of the paper's {part} types or use split='variations'"
                )
        self._simulator_class = simulator_class
        self.split = split
        self.simplification = simplification
        self.sizes = {"train": train_size, "test": test_size}
        self.max_steps = max_steps
        self.seed = seed
        self.system_prompt = SYSTEM_PROMPT.format(max_steps=max_steps)
        self._sim: Any = None
        self._tasks: dict[str, tuple[Task, ...]] = {}
        self._task: Task | None = None
        self._done = True
        self._admissible: list[str] = []
        self._raw_score = 0
        self._credited = 0.0
        self._moves = 0
        self._invalid = 0

    # --- simulator -------------------------------------------------------------------------------
    def _simulator(self) -> Any:
        if self._sim is None:
            self._sim = self._simulator_class("", envStepLimit=10**9)  # our max_steps ends episodes
        return self._sim

    def abort(self) -> None:
        kill_java(self._sim)

    def close(self) -> None:
        """Stop the Java VM (a later reset starts a new one)."""
        if self._sim is not None:
            close_quietly(self._sim)
            self._sim = None

    # --- tasks -----------------------------------------------------------------------------------
    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self.sizes:
            raise UserError(f"unknown split '{split}' for environment '{self.name}'; use 'train' or 'test'")
        if split not in self._tasks:
            sim = self._simulator()
            pools = {}
            for task_name in self.types[split]:
                sim.load(task_name, 0, "")
                variations = sorted(sim.get_variations_train() if split == "train" else sim.get_variations_test())
                random.Random(f"{self.seed}-{split}-{task_name}").shuffle(variations)
                pools[task_name] = variations
            self._task = None  # loading ended any episode in progress
            chosen = round_robin(pools, self.sizes[split], f"{split}_size", "variations")
            self._tasks[split] = tuple(self._make_task(name, variation) for name, variation in chosen)
        return self._tasks[split]

    def _make_task(self, task_name: str, variation: int) -> Task:
        return Task(
            id=f"{self.name}-{task_name}-{variation}",
            prompt=f"ScienceWorld {task_name}, variation {variation}",
            data={"task_name": task_name, "variation": int(variation), "simplification": self.simplification},
        )

    # --- episode ---------------------------------------------------------------------------------
    def _load(self, task: Task, gold: bool) -> Any:
        sim = self._simulator()
        data = task.data
        sim.load(
            data["task_name"],
            int(data["variation"]),
            data.get("simplification", self.simplification),
            generateGoldPath=gold,
        )
        return sim

    def reset(self, task: Task) -> str:
        sim = self._load(task, gold=False)  # a fresh load is a full reset, and faster than sim.reset()
        observation, _, _, info = sim.step("look around")
        self._task, self._done = task, False
        self._raw_score, self._moves, self._invalid = int(info["score"]), 0, 0
        self._credited = 0.0  # score/100 paid out so far: the starting score is paid with the first valid action
        self._admissible = _admissible(info["valid"])
        return f"{sim.get_task_description().strip()}\n\n{observation.strip()}"

    def gold_actions(self, task: Task) -> list[str]:
        """A winning action sequence from the simulator (ends any episode in progress)."""
        sim = self._load(task, gold=True)
        self._task, self._done = None, True
        return list(sim.get_gold_action_sequence())

    @property
    def admissible_actions(self) -> list[str]:
        return list(self._admissible)

    def reply_constraint(self, reply):
        return action_constraint(self._admissible, reply)

    def step(self, action: str) -> StepResult:
        check_in_episode(self._task, self._done)
        self._moves += 1
        command = normalise_action(action)
        raw_score, admissible = self._raw_score, False
        if command and len(command) <= MAX_ACTION_CHARS and command not in BLOCKED:
            observation, _, _, info = self._sim.step(command)
            note = ""
            if observation.startswith(_AMBIGUOUS):
                note = f"(Ambiguous action; ScienceWorld took it as: {_first_reading(observation)})\n"
                observation, _, _, info = self._sim.step("0")
            raw_score = int(info["score"])
            self._admissible = _admissible(info["valid"])
            admissible = not observation.startswith(_NOT_UNDERSTOOD)
            observation = note + observation.strip() if admissible else observation
        self._raw_score = raw_score
        if not admissible:
            self._invalid += 1
            observation = invalid_observation(command, self._admissible)
        success, failure = raw_score >= 100, raw_score < 0
        done = success or failure or self._moves >= self.max_steps
        reward = 0.0
        if admissible or done:  # credit score changes on admissible steps; settle the rest at the end
            reward, self._credited = max(raw_score, 0) / 100 - self._credited, max(raw_score, 0) / 100
        info_out: dict[str, Any] = {
            "admissible": admissible,
            "admissible_actions": self.admissible_actions,
            "score": raw_score / 100,
            "moves": self._moves,
        }
        if done:
            info_out.update(success=success, feedback=self._feedback(success, failure, command))
            self._done = True
        return StepResult(observation=observation, reward=reward, done=done, info=info_out)

    def _feedback(self, success: bool, failure: bool, command: str) -> str:
        return episode_feedback(
            success=success,
            failure=failure,
            moves=self._moves,
            max_steps=self.max_steps,
            score=f"score {max(self._raw_score, 0)}/100",
            invalid=self._invalid,
            command=command,
            cause=f"ScienceWorld scored it {self._raw_score}, e.g. for focusing on a wrong object",
            invalid_word="not understood",
        )


def _admissible(valid: Sequence[str]) -> list[str]:
    return sorted(action for action in valid if action not in BLOCKED)


def _first_reading(prompt: str) -> str:
    """The option numbered 0 in ScienceWorld's 'Ambiguous request' prompt."""
    for line in prompt.splitlines():
        if line.startswith("0:"):
            return line[2:].strip()
    return "its first reading"
