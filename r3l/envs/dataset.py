"""The user's own prompts and answers (.jsonl, .json, .parquet, or a Hugging Face dataset), graded by a
named verifier or by a reward function with TRL's signature `fn(prompts, completions, **columns)`."""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l.envs import register
from r3l.envs.base import SingleTurnEnv, Task, Verdict
from r3l.envs.reward_functions import RewardFn, call_reward_function, load_reward_function, one_line
from r3l.errors import UserError
from r3l.grading.answer import ANSWER_FORMATS
from r3l.grading.verifiers import VERIFIERS, Verifier
from r3l.logging.progress import console

FILE_TYPES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Row:
    """One example and where it came from, for error messages ('data.jsonl line 7')."""

    where: str
    columns: dict[str, Any]


@register("dataset")
class DatasetEnv(SingleTurnEnv):
    name = "dataset"
    description = "Your own data: prompts and answers from a .jsonl/.json/.parquet file or a Hugging Face dataset."
    argument_help = {
        "path": "a .jsonl/.json/.parquet file, a dataset folder, or a Hugging Face dataset name",
        "prompt_column": "the column holding each prompt: a string, or a chat message list whose last user message "
        "is the prompt (DAPO-Math-17k's layout)",
        "answer_column": "the column holding each reference answer (needed unless reward_fn is set); a dotted "
        "path reads a nested field, e.g. reward_model.ground_truth",
        "verifier": "how an answer is graded: " + ", ".join(VERIFIERS.names()) + " (default math)",
        "answer_format": "where the verifier reads the answer: tags, boxed, either (tags, else \\boxed{}) or any "
        "(either, else the last number; null: the verifier's own, any for math and numeric, tags for exact)",
        "reward_fn": "instead of a verifier: 'package.module:function' or 'file.py:function' with TRL's signature",
        "success_threshold": "with reward_fn: the reward that counts as a success",
        "test_fraction": "share of the rows held out for evaluation when the data has no test split",
        "test_path": "a file (or dataset) whose rows, all of them, are the test split; `path` is then trained on "
        "whole (a paper's test sets, each evaluated on its own: `r3l eval --each env.args.test_path=A,B`)",
        "seed": "the seed of that split",
        "reveal_answer_in_feedback": "say the reference answer in the feedback after a wrong answer (off by default: "
        "strategies that show the feedback to the model would hand it the answer)",
    }

    def __init__(
        self,
        *,
        path: str,
        prompt_column: str = "prompt",
        answer_column: str = "answer",
        verifier: str | None = None,
        answer_format: str | None = None,
        reward_fn: str | None = None,
        success_threshold: float = 1.0,
        test_fraction: float = 0.1,
        test_path: str | None = None,
        seed: int = 0,
        reveal_answer_in_feedback: bool = False,
    ):
        super().__init__()
        if verifier is not None and reward_fn is not None:
            raise UserError("set either env.args.verifier or env.args.reward_fn, not both")
        if not 0 <= test_fraction < 1:
            raise UserError(f"env.args.test_fraction must be in [0, 1), got {test_fraction}")
        if answer_format is not None and answer_format not in ANSWER_FORMATS:
            raise UserError(f"env.args.answer_format must be one of {', '.join(ANSWER_FORMATS)}, got {answer_format!r}")
        if answer_format is not None and reward_fn is not None:
            raise UserError("env.args.answer_format applies to a verifier; a reward_fn reads replies itself")
        self.answer_format = answer_format
        self.prompt_column = prompt_column
        self.answer_column = answer_column
        self.success_threshold = success_threshold
        self.reveal_answer_in_feedback = reveal_answer_in_feedback
        self.reward_fn_path = reward_fn
        self._reward_fn = load_reward_function(reward_fn, "env.args.reward_fn") if reward_fn else None
        self._verifier: Verifier | None = None if reward_fn else VERIFIERS.get(verifier or "math")
        self._tasks = load_tasks(
            str(path),
            file_stamp(str(path)),
            prompt_column,
            answer_column,
            answer_required=self._reward_fn is None,
            test_fraction=test_fraction,
            seed=seed,
            test_source=None if test_path is None else (str(test_path), file_stamp(str(test_path))),
        )

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._tasks:
            raise UserError(f"unknown split '{split}' for environment 'dataset'; use 'train' or 'test'")
        return self._tasks[split]

    def verify(self, task: Task, completion: str) -> Verdict:
        if self._reward_fn is not None:
            return self._verify_with_reward_fn(self._reward_fn, task, completion)
        assert self._verifier is not None
        return self._verifier(
            completion, str(task.answer), reveal_answer=self.reveal_answer_in_feedback, answer_format=self.answer_format
        )

    def _verify_with_reward_fn(self, reward_fn: RewardFn, task: Task, completion: str) -> Verdict:
        reward = call_reward_function(reward_fn, str(self.reward_fn_path), task, completion, "env.args.reward_fn")
        success = reward >= self.success_threshold
        relation = "reaches" if success else "is below"
        return Verdict(
            reward=reward,
            success=success,
            feedback=f"reward {reward:g} {relation} the success threshold {self.success_threshold:g}",
        )


@functools.lru_cache(maxsize=8)  # environments are made once per batch; read each file once
def load_tasks(
    path: str,
    stamp: tuple[int, int] | None,
    prompt_column: str,
    answer_column: str,
    *,
    answer_required: bool,
    test_fraction: float,
    seed: int,
    test_source: tuple[str, tuple[int, int] | None] | None = None,
) -> dict[str, tuple[Task, ...]]:
    """Read, check and split the rows; `stamp` (the file's mtime and size) makes an edited file reload;
    `test_source` (a path and its stamp): every row of it is the test split, and `path`'s rows all train."""
    splits = load_rows(path)
    if test_source is not None:
        given = load_rows(test_source[0], "env.args.test_path")
        splits = {"train": [row for rows in splits.values() for row in rows], "test": given.get("test", given["train"])}
    needed = [prompt_column, answer_column] if answer_required else [prompt_column]
    for rows in splits.values():
        check_rows(rows, needed, prompt_column)
    train_rows, test_rows = split_rows(splits, test_fraction, seed)

    def to_task(row: Row, split: str, position: int) -> Task:
        return Task(
            id=f"dataset-{split}-{position}",
            prompt=prompt_text(column_value(row.columns, prompt_column), row.where, prompt_column),
            answer=None if (answer := column_value(row.columns, answer_column)) is MISSING else answer,
            data={"source": row.where, "columns": {k: v for k, v in row.columns.items() if k != prompt_column}},
        )

    return {
        "train": tuple(to_task(row, "train", i) for i, row in enumerate(train_rows)),
        "test": tuple(to_task(row, "test", i) for i, row in enumerate(test_rows)),
    }


def file_stamp(path: str) -> tuple[int, int] | None:
    try:
        status = Path(path).stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def load_rows(path: str, setting: str = "env.args.path") -> dict[str, list[Row]]:
    """Rows per source split: {'train': [...]} for files; a dataset's own splits for Hugging Face data."""
    file = Path(path)
    if file.suffix in FILE_TYPES:
        if not file.is_file():
            raise UserError(f"data file '{path}' not found; check {setting}")
        readers = {".jsonl": read_jsonl, ".json": read_json, ".parquet": read_parquet}
        return {"train": readers[file.suffix](file, path)}
    if file.is_file():
        raise UserError(f"'{path}' is not a .jsonl, .json or .parquet file; convert it or give a dataset folder")
    return read_hf_dataset(path)


def read_jsonl(file: Path, label: str) -> list[Row]:
    rows = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{label} line {number}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"{where}, character {error.colno}: invalid JSON: {error.msg}") from None
            rows.append(Row(where, _as_object(value, where)))
    return rows


def read_json(file: Path, label: str) -> list[Row]:
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UserError(f"{label} line {error.lineno}, character {error.colno}: invalid JSON: {error.msg}") from None
    if not isinstance(value, list):
        raise UserError(f"{label}: expected a JSON list of objects; for one object per line use .jsonl")
    return [
        Row(f"{label} item {index}", _as_object(item, f"{label} item {index}"))
        for index, item in enumerate(value, start=1)
    ]


def read_parquet(file: Path, label: str) -> list[Row]:
    import pyarrow.parquet

    try:
        records = pyarrow.parquet.read_table(file).to_pylist()
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for unreadable files
        raise UserError(f"{label}: cannot read parquet: {one_line(error)}") from None
    return [Row(f"{label} row {index}", record) for index, record in enumerate(records, start=1)]


def read_hf_dataset(name: str) -> dict[str, list[Row]]:
    """A folder written by `save_to_disk`, a folder of data files, or a dataset on the Hugging Face hub."""
    import datasets

    folder = Path(name)
    saved = (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
    try:
        loaded = datasets.load_from_disk(name) if saved else datasets.load_dataset(name)
    except Exception as error:  # noqa: BLE001 - network, missing repo, bad folder: all reported the same way
        raise UserError(
            f"cannot load dataset '{name}': {one_line(error)}; give a .jsonl/.json/.parquet "
            "file, a dataset folder or a Hugging Face dataset name"
        ) from None
    if isinstance(loaded, datasets.Dataset):
        loaded = {"train": loaded}
    splits = {split: loaded[split] for split in ("train", "test") if split in loaded}
    if "train" not in splits:  # no 'train' split: train on the first one
        splits["train"] = loaded[next(iter(loaded))]
    return {
        split: [Row(f"{name} [{split}] row {index}", dict(record)) for index, record in enumerate(data, start=1)]
        for split, data in splits.items()
    }


MISSING = object()


def column_value(columns: dict[str, Any], column: str) -> Any:
    """A column's value, or a nested field's by a dotted path (`reward_model.ground_truth`); a column whose own name
    holds the dots wins. MISSING where there is none."""
    if column in columns:
        return columns[column]
    value: Any = columns
    for key in column.split("."):
        if not isinstance(value, dict) or key not in value:
            return MISSING
        value = value[key]
    return value


def prompt_text(value: Any, where: str, column: str) -> str:
    """The prompt: a string as it is, or the last user message of a chat message list ({role, content} each)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        users = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
        raise UserError(f"{where}: column '{column}' is a message list without a user message with text content")
    raise UserError(f"{where}: column '{column}' must be a string or a message list, got {type(value).__name__}")


def check_rows(rows: list[Row], needed: list[str], prompt_column: str) -> None:
    if not rows:
        raise UserError("the dataset has no rows; check env.args.path")
    for row in rows:
        for column in needed:
            setting = "env.args.prompt_column" if column == prompt_column else "env.args.answer_column"
            others_have_it = any(column_value(other.columns, column) is not MISSING for other in rows)
            value = column_value(row.columns, column)
            if value is MISSING:
                fix = "add it to this row (other rows have it)" if others_have_it else f"set {setting}"
                raise UserError(f"{row.where}: no column '{column}'; {fix}")
            if value is None:
                raise UserError(f"{row.where}: column '{column}' is empty; fill it or remove the row")
        prompt_text(column_value(row.columns, prompt_column), row.where, prompt_column)


def split_rows(splits: dict[str, list[Row]], test_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """The source's own test split when it has one; otherwise a seeded `test_fraction` of the rows."""
    if "test" in splits:
        return splits["train"], splits["test"]
    rows = list(splits["train"])
    random.Random(seed).shuffle(rows)
    test_count = math.ceil(len(rows) * test_fraction) if len(rows) > 1 else 0
    console.print(
        f"dataset: {len(rows) - test_count} training rows, {test_count} held out for evaluation "
        f"(env.args.test_fraction={test_fraction:g}; 0 trains on every row)"
    )
    return rows[test_count:], rows[:test_count]


def _as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value
