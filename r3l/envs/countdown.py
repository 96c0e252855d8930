"""Countdown (TinyZero / R3 convention): combine the given numbers with + - * / to hit a target.

Tasks come from reasoning-gym's `countdown` dataset, or from a built-in seeded generator when
reasoning-gym is not installed. The reward is strictly binary: 1.0 only for a correct equation
inside <answer></answer> tags that uses every given number exactly once. An equation may state its result
('(1 + 2) * 3 = 9'); a stated result must be the target.
"""

from __future__ import annotations

import importlib.util
import random
import re
import warnings
from collections import Counter
from collections.abc import Callable, Hashable
from fractions import Fraction
from typing import Any

from r3l.envs import register
from r3l.envs.arithmetic import Item, ReasoningGymEnv, reasoning_gym_seed
from r3l.envs.base import Task, Verdict
from r3l.errors import UserError
from r3l.grading.answer import extract_tagged
from r3l.grading.safe_math import ExpressionError, evaluate, format_number
from r3l.grading.verifiers import NO_ANSWER

TOLERANCE = 1e-5
_STATED_RESULT = re.compile(r"=\s*([-+]?\d+(?:\.\d+)?)\s*$")

PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. "
    "You can use basic arithmetic operations (+, -, *, /) and each number must be used exactly once. "
    "Show your work in <think> </think> tags and return the final equation in <answer> </answer> tags, "
    "for example <answer> (1 + 2) / 3 </answer>."
)


@register("countdown")
class CountdownEnv(ReasoningGymEnv):
    name = "countdown"
    description = "Countdown: reach the target with the given numbers, each used once, and + - * /."
    dataset_name = "countdown"
    stores_draws = True  # ~5-10 ms a draw (sympy): a split is kept on disk between runs
    argument_help = {
        "min_numbers": "fewest numbers given",
        "max_numbers": "most numbers given",
        "min_value": "smallest number given",
        "max_value": "largest number given",
        "min_target": "smallest target",
        "max_target": "largest target",
    }

    def __init__(
        self,
        *,
        seed: int = 0,
        train_size: int = 2000,
        test_size: int = 200,
        min_numbers: int = 3,
        max_numbers: int = 4,
        min_value: int = 1,
        max_value: int = 100,
        min_target: int = 10,
        max_target: int = 100,
    ):
        config = dict(
            min_numbers=min_numbers,
            max_numbers=max_numbers,
            min_value=min_value,
            max_value=max_value,
            min_target=min_target,
            max_target=max_target,
        )
        super().__init__(seed=seed, train_size=train_size, test_size=test_size, config=config)

    def prompt(self, item: Item) -> str:
        metadata = item["metadata"]
        return PROMPT.format(numbers=list(metadata["numbers"]), target=metadata["target"])

    def task_key(self, item: Item) -> Hashable:
        metadata = item["metadata"]
        return tuple(sorted(metadata["numbers"])), metadata["target"]

    near_duplicate_rule = "the same numbers and target"

    def near_duplicate_key(self, task: Task) -> Hashable:
        """The numbers, sorted, and the target: one problem whatever order the numbers are given in."""
        return tuple(sorted(task.answer["numbers"])), task.answer["target"]

    def to_task(self, item: Item, split: str, position: int) -> Task:
        metadata = item["metadata"]
        return Task(
            id=f"{self.name}-{split}-{position}",
            prompt=self.prompt(item),
            answer={"numbers": list(metadata["numbers"]), "target": metadata["target"]},
            data={"solution": metadata["expression"], "source": metadata["source_dataset"]},
        )

    def verify(self, task: Task, completion: str) -> Verdict:
        return check_equation(completion, task.answer["numbers"], task.answer["target"])

    def source_name(self) -> str:
        # looked up, not imported: reasoning-gym takes ~1.5 s to import, and tasks kept on disk need none of it
        return "reasoning_gym" if importlib.util.find_spec("reasoning_gym") is not None else "builtin"

    def _make_draw(self, config: dict[str, Any], max_draws: int) -> Callable[[int], Item | None]:
        if self.source_name() == "builtin":
            warnings.warn("reasoning-gym is not installed; countdown uses its built-in task generator", stacklevel=2)
            return _builtin_draw(self.seed, config)
        dataset = self._dataset_on_first_draw(config, max_draws)

        def draw(index: int) -> Item:
            try:
                return dataset()[index]
            except ValueError as error:  # reasoning-gym gives up after 100 tries at one task
                raise UserError(
                    f"environment 'countdown' cannot make tasks with these settings ({error}); "
                    "widen min_target..max_target or min_value..max_value"
                ) from None

        return draw


def check_equation(completion: str, numbers: list[int], target: int) -> Verdict:
    """Binary verdict on the equation inside the reply's last <answer></answer> block."""
    answer = extract_tagged(completion)
    if answer is None:
        return _failure(NO_ANSWER)
    stated = _STATED_RESULT.search(answer)
    expression = answer[: stated.start()].strip() if stated else answer
    try:
        value, used = evaluate(expression)
    except ExpressionError as error:
        return _failure(str(error))
    problems = number_usage_problems(used, numbers)
    if stated and abs(Fraction(stated.group(1)) - target) >= TOLERANCE:
        problems.append(f"states the result {stated.group(1)}, target is {target}")
    if abs(value - target) >= TOLERANCE:
        problems.append(f"evaluates to {format_number(value)}, target is {target}")
    if problems:
        return _failure("; ".join(problems))
    return Verdict(reward=1.0, success=True, feedback=f"correct: {expression} = {target}")


def number_usage_problems(used: list[int | Fraction], given: list[int]) -> list[str]:
    """What is wrong with how `used` spends the multiset `given` ('uses 7 twice', 'does not use 3')."""
    used_counts = Counter(used)
    given_counts: Counter[int | Fraction] = Counter(given)
    problems = []
    for number in dict.fromkeys([*used, *given]):  # first-seen order, no repeats
        times_used, times_given = used_counts[number], given_counts[number]
        shown = format_number(number)
        if times_used == times_given:
            continue
        if times_given == 0:
            problems.append(f"uses {shown}, which is not among the numbers")
        elif times_used == 0:
            problems.append(f"does not use {shown}")
        elif times_given == 1:
            problems.append(f"uses {shown} {_times(times_used)}")
        else:
            problems.append(f"uses {shown} {_times(times_used)}, but it is given {_times(times_given)}")
    return problems


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _failure(feedback: str) -> Verdict:
    return Verdict(reward=0.0, success=False, feedback=feedback)


def _builtin_draw(seed: int, config: dict[str, Any]) -> Callable[[int], Item | None]:
    base_seed = reasoning_gym_seed(seed)

    def draw(index: int) -> Item | None:
        puzzle = generate_puzzle(random.Random(base_seed + index), **config)
        if puzzle is None:
            return None
        numbers, target, expression = puzzle
        return {
            "question": PROMPT.format(numbers=numbers, target=target),
            "answer": expression,
            "metadata": {"numbers": numbers, "target": target, "expression": expression, "source_dataset": "builtin"},
        }

    return draw


def generate_puzzle(
    rng: random.Random,
    *,
    min_numbers: int,
    max_numbers: int,
    min_value: int,
    max_value: int,
    min_target: int,
    max_target: int,
    attempts: int = 200,
) -> tuple[list[int], int, str] | None:
    """Random numbers and a target reachable from them with whole-number steps; None if none is found."""
    for _ in range(attempts):
        numbers = [rng.randint(min_value, max_value) for _ in range(rng.randint(min_numbers, max_numbers))]
        expression, value = _random_combination(rng, numbers)
        if value.denominator == 1 and min_target <= value <= max_target:
            return numbers, int(value), expression
    return None


def _random_combination(rng: random.Random, numbers: list[int]) -> tuple[str, Fraction]:
    """Fold the numbers pairwise with random operators, keeping every step a whole number >= 0."""
    pool = [(str(number), Fraction(number)) for number in numbers]
    while len(pool) > 1:
        (left, a), (right, b) = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
        if a < b:
            (left, a), (right, b) = (right, b), (left, a)
        choices = [("+", a + b), ("-", a - b), ("*", a * b)]
        if b != 0 and (a / b).denominator == 1:
            choices.append(("/", a / b))
        symbol, value = rng.choice(choices)
        pool.append((f"({left} {symbol} {right})", value))
    expression, value = pool[0]
    return expression[1:-1] if expression.startswith("(") else expression, value
