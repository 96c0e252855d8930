"""Procedural question-answer environments from reasoning-gym: 'arithmetic' and 'gsm'.

`ReasoningGymEnv` also holds the split logic the countdown environment shares: items are drawn in
index order from one seeded source, repeats skipped; the test split takes the first `test_size`
distinct items and the train split the next `train_size`, so the splits never share a task and
the test split does not change with `train_size`. Tasks are generated on first access and shared by
every instance made with the same settings, so making an environment per batch stays cheap.
"""

from __future__ import annotations

import functools
import random
import re
import threading
from abc import abstractmethod
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

from r3l.envs import register, task_store
from r3l.envs.base import SingleTurnEnv, Task, Verdict
from r3l.envs.reply_grammar import NUMBER, answer_constraint, boxed_constraint
from r3l.errors import UserError
from r3l.grading.answer import extract_answer, where_answers_go
from r3l.grading.safe_math import ExpressionError, evaluate
from r3l.grading.verifiers import verify_math
from r3l.models.gguf import cache_root
from r3l.provenance import package_version

SPLITS = ("train", "test")
ANSWER_FORMATS = ("tags", "boxed", "either")  # r3l/grading/answer.py; 'any' (a last number counts) is not offered here


def answer_instruction(answer_format: str) -> str:
    """The default text after each question: where the final answer goes in `answer_format`."""
    return f"Reason step by step, then put only the final answer (a number) {where_answers_go(answer_format)}."


Item = dict[str, Any]  # reasoning-gym's record: question, answer, metadata


class TaskDraws:
    """Distinct items drawn in index order from `draw`, made on demand; thread-safe."""

    def __init__(
        self,
        env_name: str,
        draw: Callable[[int], Item | None],
        key: Callable[[Item], Hashable],
        max_draws: int,
        store: Path | None = None,
    ):
        """`store`: a file keeping the items between processes (r3l/envs/task_store.py); None: drawn each time."""
        self._env_name = env_name
        self._draw = draw
        self._key = key
        self._max_draws = max_draws
        self._store = store
        self._lock = threading.Lock()
        self.items: list[Item] = []
        self._next_index = 0
        if store is not None:
            self.items, self._next_index = task_store.load(store)
        self._seen: set[Hashable] = {key(item) for item in self.items}

    def ensure(self, count: int) -> None:
        with self._lock:
            found = len(self.items)
            while len(self.items) < count:
                if self._next_index >= self._max_draws:
                    raise UserError(
                        f"environment '{self._env_name}' found only {len(self.items)} distinct tasks in "
                        f"{self._max_draws} draws; lower train_size/test_size or widen the difficulty settings"
                    )
                item = self._draw(self._next_index)
                self._next_index += 1
                if item is None:
                    continue
                if self._store is not None:
                    item = task_store.as_json(item)
                if self._key(item) in self._seen:
                    continue
                self._seen.add(self._key(item))
                self.items.append(item)
            if self._store is not None and len(self.items) > found:
                task_store.save(self._store, self.items, self._next_index)


DRAW_BLOCK = 64  # items a walk over a split draws (and stores) at once


class SplitView(Sequence[Task]):
    """The tasks at positions [start, start + size) of a TaskDraws, as Task objects."""

    def __init__(self, draws: TaskDraws, start: int, size: int, to_task: Callable[[Item, int], Task]):
        self._draws = draws
        self._start = start
        self._size = size
        self._to_task = to_task
        self._tasks: dict[int, Task] = {}

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> Task: ...
    @overload
    def __getitem__(self, index: slice) -> list[Task]: ...

    def __getitem__(self, index: int | slice) -> Task | list[Task]:
        if isinstance(index, slice):
            positions = range(*index.indices(self._size))
            if positions:  # drawn (and stored) in one go, not one item and one store write at a time
                self._draws.ensure(self._start + max(positions) + 1)
            return [self[position] for position in positions]
        position = index + self._size if index < 0 else index
        if not 0 <= position < self._size:
            raise IndexError(f"task {index} out of range for a split of {self._size}")
        if position not in self._tasks:
            self._draws.ensure(self._start + position + 1)
            self._tasks[position] = self._to_task(self._draws.items[self._start + position], position)
        return self._tasks[position]

    def __iter__(self) -> Iterator[Task]:
        for first in range(0, self._size, DRAW_BLOCK):  # drawn and stored a block at a time, lazily
            yield from self[first : first + DRAW_BLOCK]


class ReasoningGymEnv(SingleTurnEnv):
    """A single-turn env over a reasoning-gym dataset; subclasses set `dataset_name` and `prompt`."""

    dataset_name: ClassVar[str] = ""
    stores_draws: ClassVar[bool] = False  # keep drawn items on disk between processes (for slow sources)
    argument_help: ClassVar[dict[str, str]] = {
        "seed": "which tasks are drawn (the same seed, the same tasks in the same order)",
        "train_size": "tasks in the train split",
        "test_size": "tasks in the test split (drawn first, so it does not change with train_size)",
    }

    def __init__(self, *, seed: int, train_size: int, test_size: int, config: dict[str, Any]):
        super().__init__()
        check_split_sizes(self.name, train_size, test_size)
        self.seed = seed
        self.train_size = train_size
        self.test_size = test_size
        key = (
            type(self).__name__,
            self.source_name(),
            seed,
            train_size,
            test_size,
            tuple(sorted(config.items())),
            self.prompt_settings(),
        )
        self._splits = _shared_splits(key, lambda: self._build_splits(config))

    def _build_splits(self, config: dict[str, Any]) -> dict[str, SplitView]:
        max_draws = 2 * (self.train_size + self.test_size) + 100
        store = None
        if self.stores_draws and self.source_name() != "builtin":
            source = (type(self).__module__, type(self).__qualname__, self.dataset_name, self.seed, max_draws)
            key = (*source, sorted(config.items()), reasoning_gym_version())
            store = task_store.store_path(cache_root(), key)
        draws = TaskDraws(self.name, self._make_draw(config, max_draws), self.task_key, max_draws, store)
        draws.ensure(min(1, self.test_size + self.train_size))  # fail early on settings that cannot make tasks
        return {
            "test": SplitView(draws, 0, self.test_size, lambda item, i: self.to_task(item, "test", i)),
            "train": SplitView(draws, self.test_size, self.train_size, lambda item, i: self.to_task(item, "train", i)),
        }

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._splits:
            raise UserError(f"unknown split '{split}' for environment '{self.name}'; use 'train' or 'test'")
        return self._splits[split]

    @abstractmethod
    def prompt(self, item: Item) -> str:
        """The user message for a drawn item."""

    def prompt_settings(self) -> Hashable:
        """The settings a task's prompt depends on besides its item (tasks are shared only where they agree)."""
        return ()

    def keep(self, item: Item) -> bool:
        """Whether a drawn item is a sound task; rejected items are skipped."""
        return True

    def task_key(self, item: Item) -> Hashable:
        """Items with equal keys are the same task (kept once, in one split only)."""
        return item["question"]

    near_duplicate_rule = "the same numbers, operators and answer"

    def near_duplicate_key(self, task: Task) -> Hashable:
        """The numbers and operator signs of the question, each sorted, and the answer: '12 + 7 * 3' and
        '7 * 3 + 12' are one problem to a model that has seen either."""
        question = str(task.data.get("question", task.prompt))
        return (
            tuple(sorted(re.findall(r"\d+(?:\.\d+)?", question))),
            tuple(sorted(re.findall(r"[-+*/×÷−]", question))),
            str(task.answer),
        )

    def to_task(self, item: Item, split: str, position: int) -> Task:
        return Task(
            id=f"{self.name}-{split}-{position}",
            prompt=self.prompt(item),
            answer=item["answer"],
            data={"question": item["question"], **item.get("metadata", {})},
        )

    def source_name(self) -> str:
        """Where tasks come from; part of the cache key, since one source's tasks differ from another's."""
        return "reasoning_gym"

    def _make_draw(self, config: dict[str, Any], max_draws: int) -> Callable[[int], Item | None]:
        dataset = self._dataset_on_first_draw(config, max_draws)

        def draw(index: int) -> Item | None:
            item = dataset()[index]
            return item if self.keep(item) else None

        return draw

    def _dataset_on_first_draw(self, config: dict[str, Any], max_draws: int) -> Callable[[], Any]:
        """The reasoning-gym dataset, made (and reasoning-gym imported, ~1 s) at the first draw only: a split kept
        on disk is loaded without either. Draws run under their TaskDraws' lock, so it is made once."""
        return functools.cache(
            lambda: create_reasoning_gym_dataset(self.name, self.dataset_name, self.seed, max_draws, config)
        )


class _TaggedAnswerEnv(ReasoningGymEnv):
    """Question plus an instruction to answer in <answer></answer> tags (or \\boxed{}: `answer_format`); graded with
    the numeric reading of `verify_math`."""

    argument_help: ClassVar[dict[str, str]] = {
        "reveal_answer_in_feedback": "say the correct answer in the feedback after a wrong answer (off by default: "
        "R3L's reflection, R3 with include_feedback and the math dialogue show the feedback to the model)",
        "answer_format": "where the final answer is read: tags (the last <answer></answer> block), boxed (the last "
        "\\boxed{}) or either (the last <answer> block, else the last \\boxed{})",
        "instruction": "the text after each question (null: the answer format's own; empty: the question alone)",
    }

    def __init__(
        self,
        *,
        seed: int,
        train_size: int,
        test_size: int,
        reveal_answer_in_feedback: bool,
        config: dict[str, Any],
        answer_format: str = "tags",
        instruction: str | None = None,
    ):
        if answer_format not in ANSWER_FORMATS:
            raise UserError(f"env.args.answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}")
        self.reveal_answer_in_feedback = reveal_answer_in_feedback
        self.answer_format = answer_format
        self.instruction = answer_instruction(answer_format) if instruction is None else instruction
        super().__init__(seed=seed, train_size=train_size, test_size=test_size, config=config)

    def prompt(self, item: Item) -> str:
        return f"{item['question']}\n\n{self.instruction}" if self.instruction else item["question"]

    def prompt_settings(self) -> Hashable:
        return self.instruction

    def verify(self, task: Task, completion: str) -> Verdict:
        return verify_math(
            completion, task.answer, reveal_answer=self.reveal_answer_in_feedback, answer_format=self.answer_format
        )

    def reply_constraint(self, reply):
        if self.answer_format == "boxed":
            return boxed_constraint(NUMBER, reply)
        return answer_constraint("answer", NUMBER, reply)

    def answer_format_missing(self, reply: str) -> bool | None:
        return extract_answer(reply, self.answer_format) is None


@register("arithmetic")
class ArithmeticEnv(_TaggedAnswerEnv):
    name = "arithmetic"
    description = "Evaluate an arithmetic expression (reasoning-gym basic_arithmetic); answer in <answer> tags."
    dataset_name = "basic_arithmetic"
    # ~2 ms a draw with division (reasoning-gym's divisor search), and every run starting draws the whole train
    # split to count the held-out tasks it shares by content: a split is kept on disk between runs
    stores_draws = True
    argument_help = {
        "min_terms": "fewest numbers in an expression",
        "max_terms": "most numbers in an expression",
        "min_digits": "fewest digits of each number",
        "max_digits": "most digits of each number",
        "operators": "the operators expressions use (any of + - * /; a division always comes out whole)",
        "allow_parentheses": "expressions may group terms in parentheses",
        "allow_negation": "numbers may be negative",
    }

    def __init__(
        self,
        *,
        seed: int = 0,
        train_size: int = 2000,
        test_size: int = 200,
        min_terms: int = 2,
        max_terms: int = 6,
        min_digits: int = 1,
        max_digits: int = 4,
        operators: Sequence[str] = ("+", "-", "*", "/"),
        allow_parentheses: bool = True,
        allow_negation: bool = True,
        reveal_answer_in_feedback: bool = False,
        answer_format: str = "tags",
        instruction: str | None = None,
    ):
        config = dict(
            min_terms=min_terms,
            max_terms=max_terms,
            min_digits=min_digits,
            max_digits=max_digits,
            operators=tuple(operators),
            allow_parentheses=allow_parentheses,
            allow_negation=allow_negation,
        )
        super().__init__(
            seed=seed,
            train_size=train_size,
            test_size=test_size,
            reveal_answer_in_feedback=reveal_answer_in_feedback,
            config=config,
            answer_format=answer_format,
            instruction=instruction,
        )

    def keep(self, item: Item) -> bool:
        """reasoning-gym computes some golds with floor division ('8 / 79' -> 0); keep only exact ones."""
        try:
            value = evaluate(item["metadata"]["expression"]).value
        except ExpressionError:
            return False
        return value.denominator == 1 and str(value.numerator) == item["answer"]


@register("gsm")
class GsmEnv(_TaggedAnswerEnv):
    name = "gsm"
    description = "Grade-school word problems from GSM8K templates (reasoning-gym gsm_symbolic)."
    dataset_name = "gsm_symbolic"

    def __init__(
        self,
        *,
        seed: int = 0,
        train_size: int = 2000,
        test_size: int = 200,
        reveal_answer_in_feedback: bool = False,
        answer_format: str = "tags",
        instruction: str | None = None,
    ):
        super().__init__(
            seed=seed,
            train_size=train_size,
            test_size=test_size,
            reveal_answer_in_feedback=reveal_answer_in_feedback,
            config={},
            answer_format=answer_format,
            instruction=instruction,
        )


# Environments are made once per batch; tasks made for the same settings are shared across instances.
_SPLITS_CACHE: dict[Hashable, dict[str, SplitView]] = {}
_SPLITS_CACHE_LOCK = threading.Lock()


def _shared_splits(key: Hashable, build: Callable[[], dict[str, SplitView]]) -> dict[str, SplitView]:
    with _SPLITS_CACHE_LOCK:
        if key not in _SPLITS_CACHE:
            _SPLITS_CACHE[key] = build()
        return _SPLITS_CACHE[key]


def clear_task_cache() -> None:
    """Forget tasks made so far (tests use it to check that generation is deterministic)."""
    with _SPLITS_CACHE_LOCK:
        _SPLITS_CACHE.clear()


def check_split_sizes(env_name: str, train_size: int, test_size: int) -> None:
    for setting, value in (("train_size", train_size), ("test_size", test_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UserError(f"environment '{env_name}': {setting} must be a whole number >= 0, got {value!r}")


def reasoning_gym_seed(seed: int) -> int:
    """reasoning-gym seeds item i with `seed + i`, so nearby seeds would share items; spread them apart."""
    return random.Random(seed).getrandbits(40)


def reasoning_gym_version() -> str:
    return package_version("reasoning-gym") or "none"


def create_reasoning_gym_dataset(env_name: str, dataset_name: str, seed: int, size: int, config: dict[str, Any]):
    try:
        import reasoning_gym  # imported lazily: it takes seconds and registers ~100 datasets
    except ImportError:
        raise UserError(f"environment '{env_name}' needs reasoning-gym; run `pip install reasoning-gym`") from None

    try:
        return reasoning_gym.create_dataset(dataset_name, seed=reasoning_gym_seed(seed), size=size, **config)
    except (AssertionError, TypeError, ValueError) as error:
        message = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"bad settings for environment '{env_name}': {message}") from None
