"""Function calling (R3, arXiv 2505.24726): answer a request with JSON tool calls, checked against references.

Two sources:
- 'bfcl': the Berkeley Function Calling Leaderboard files shipped in the `bfcl-eval` package
  (`pip install --no-deps bfcl-eval`), or a folder holding the same files (`path`). Categories
  'simple' (BFCL_v*_simple_python.json, BFCL_v3_simple.json in older releases), 'multiple', 'parallel',
  'parallel_multiple' and their 'live_' versions. Graded by `checker` (env.args.checker):
  'official' (default) is BFCL's own AST checker from bfcl-eval (`r3l.grading.bfcl_checker`), the verdict
  the leaderboard gives; 'strict' and 'lenient' are r3l's `verify_bfcl` (exact stripped strings; BFCL's
  string normalisation), which differ from the official verdict in the ways `verify_bfcl` lists.
- 'xlam': an APIGen / xlam-function-calling-60k file (`path`, .jsonl or a .json list) whose rows have
  `query`, `tools` and `answers` (JSON strings or values; answers are [{name, arguments}]); graded with
  `verify_exact`, the rule R3 trains with, whatever `checker` says.

How the tools reach the model (`tool_format`):
- 'native' (default): the model's own format. The tools go to the chat template's `tools=` (each function document
  as written, BFCL's or xLAM's, in OpenAI's {"type": "function", "function": ...} form), which lists them
  in its system message and teaches `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` replies; the user
  message is the request alone, and the environment adds no system prompt (BFCL's own system messages, where a
  task has them, stand before the request as "Context:"). A template without a tool format gets the same tool
  block written into its system message by r3l (`r3l.rollout.chat`), so the reply format is the same either way.
- 'prompt': r3l's own instruction as the system prompt and the functions listed as JSON in the user message
  (before issue 36 the only format), with any reply `tag`.
Either way a reply's calls are read from its `<tag>` blocks and graded by the same checker.

Splits are fixed by `seed`: each BFCL category (or the xLAM file) is shuffled and its first
`test_fraction` becomes the test split, so the splits never share a task; `train_size`/`test_size` then
cap each split without changing which tasks belong to it.

BFCL tasks that no sensible reply can pass are left out (`_unsolvable`; none in the four default
categories, 5 of the 1,351 live ones in bfcl-eval 2026.3.23):
- an argument has no acceptable value at all ([]): live_simple_106-63-0, live_simple_112-68-0;
- the ground truth requires an argument the function's schema does not list, which BFCL's checker rejects
  as unexpected when given and as missing when left out: live_multiple_862-181-3 ('journey_start_time'
  for Trains_1_FindTrains), live_multiple_964-207-0 ('question' for transfer_to_human_agent);
- the schema requires an argument the ground truth does not list, rejected the same two ways
  (live_multiple_964-207-0 again: 'statement');
- the schema requires an argument whose only acceptable value is "" (left out): live_multiple_507-149-4
  ('origin_airport'; the request says "from LA"). BFCL then accepts only the empty string, a reply that
  contradicts the request, so no reply worth rewarding passes.
Every other task's reference solution (`bfcl_reference_calls`) passes the official checker.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import random
import re
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from r3l.envs import register
from r3l.envs.base import SingleTurnEnv, Task, Verdict, check_split_size
from r3l.envs.dataset import file_stamp
from r3l.envs.reply_grammar import tool_call_constraint
from r3l.errors import UserError
from r3l.grading.bfcl_checker import load_ast_checker, official_verdict
from r3l.grading.tool_calls import (
    Call,
    ToolCallFormatError,
    bfcl_reference_calls,
    format_tool_calls,
    has_tool_call_block,
    parse_tool_calls,
    verify_bfcl,
    verify_exact,
)

SOURCES = ("bfcl", "xlam")
CHECKERS = ("official", "strict", "lenient")
BFCL_CATEGORIES = (
    "simple",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
_BFCL_STEMS = {"simple": ("simple_python", "simple")}  # BFCL v4 renamed 'simple' to 'simple_python'
MISSING_BFCL = "the function_calling env needs BFCL data: pip install --no-deps bfcl-eval"

SYSTEM_PROMPT = (
    "You can call functions. The user message lists the available functions as JSON schemas, then a request. "
    "Answer with the function calls that fulfil the request, each written as a JSON object "
    '{{"name": "<function name>", "arguments": {{"<argument>": <value>}}}} inside <{tag}></{tag}> tags: '
    "one tag per call, or one tag holding a JSON list of calls. Use only the listed functions and their "
    "arguments, give every required argument, leave out optional ones the request does not set, and write "
    "values with the JSON types the schema asks for. Make every call the request needs and no other."
)
USER_PROMPT = "Available functions:\n{functions}\n\n{context}Request: {question}"
NATIVE_USER_PROMPT = "{context}{question}"
TOOL_FORMATS = ("native", "prompt")


@register("function_calling")
class FunctionCallingEnv(SingleTurnEnv):
    name = "function_calling"
    description = "Function calling: answer with JSON tool calls in <tool_call> tags (BFCL or xLAM data)."
    system_prompt: str | None = None  # native: the chat template's own tool instructions
    watch_prompt_copies = False  # arguments quote the request ('2024-01-05', '555-1234') by design
    argument_help = {
        "source": "where tasks come from: bfcl (the BFCL files of bfcl-eval, or `path`) or xlam (a file at `path`)",
        "categories": "the BFCL categories: " + ", ".join(BFCL_CATEGORIES),
        "path": "bfcl: a folder of BFCL files instead of bfcl-eval's; xlam: the .jsonl/.json file (required)",
        "seed": "the seed of the split (each category shuffled, its first test_fraction held out)",
        "test_fraction": "share of each category (or of the xLAM file) held out as the test split",
        "tool_format": "native: the tools go to the chat template (the model's own <tool_call> format); prompt: "
        "r3l's instruction and the functions listed in the user message",
        "tag": "the tag a reply writes its calls in: <tag>{...}</tag> (tool_format=prompt only; native: tool_call)",
        "train_size": "at most this many train tasks (null: all)",
        "test_size": "at most this many test tasks (null: all)",
        "checker": "BFCL grading: official (bfcl-eval's AST checker), strict or lenient (r3l's)",
    }

    def __init__(
        self,
        *,
        source: str = "bfcl",
        categories: Sequence[str] | str = BFCL_CATEGORIES[:4],
        path: str | None = None,
        seed: int = 0,
        test_fraction: float = 0.2,
        tool_format: str = "native",
        tag: str = "tool_call",
        train_size: int | None = None,
        test_size: int | None = None,
        checker: str = "official",
    ):
        super().__init__()
        if source not in SOURCES:
            raise UserError(f"env.args.source must be one of {', '.join(SOURCES)}, got '{source}'")
        if checker not in CHECKERS:
            raise UserError(f"env.args.checker must be one of {', '.join(CHECKERS)}, got {checker!r}")
        if not 0 <= test_fraction < 1:
            raise UserError(f"env.args.test_fraction must be in [0, 1), got {test_fraction}")
        for setting, size in (("train_size", train_size), ("test_size", test_size)):
            if size is not None and (not isinstance(size, int) or size < 0):
                raise UserError(f"env.args.{setting} must be a whole number >= 0 or null, got {size!r}")
        if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z_][\w\-]*", tag):
            raise UserError(f"env.args.tag must be a tag name like 'tool_call', got {tag!r}")
        if tool_format not in TOOL_FORMATS:
            raise UserError(f"env.args.tool_format must be one of {', '.join(TOOL_FORMATS)}, got {tool_format!r}")
        if tool_format == "native" and tag != "tool_call":
            raise UserError(
                f"env.args.tag={tag!r} needs env.args.tool_format=prompt: the native format's tag is the chat "
                "template's <tool_call>"
            )
        self.source = source
        self.tag = tag
        self.checker = checker
        self.tool_format = tool_format
        if tool_format == "prompt":
            self.system_prompt = SYSTEM_PROMPT.format(tag=tag)
        if source == "bfcl":
            categories = (categories,) if isinstance(categories, str) else tuple(categories)
            self.categories = _check_categories(categories)
            folder = str(Path(path).resolve()) if path is not None else bfcl_data_dir()
            if checker == "official":
                load_ast_checker()  # a missing bfcl-eval is a one-line UserError now, not at the first reply
            splits = load_bfcl(folder, self.categories, seed, test_fraction)
        else:
            if path is None:
                raise UserError(
                    "env.args.path is needed for source='xlam': a .jsonl or .json file of query/tools/answers rows"
                )
            self.categories = ()
            splits = load_xlam(str(path), file_stamp(str(path)), seed, test_fraction)
        check_split_size("train_size", train_size, len(splits["train"]), "tasks")
        check_split_size("test_size", test_size, len(splits["test"]), "tasks")
        self._tasks = {
            "train": _numbered(splits["train"][:train_size], "train", tool_format),
            "test": _numbered(splits["test"][:test_size], "test", tool_format),
        }

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._tasks:
            raise UserError(f"unknown split '{split}' for environment 'function_calling'; use 'train' or 'test'")
        return self._tasks[split]

    def verify(self, task: Task, completion: str) -> Verdict:
        try:
            calls = parse_tool_calls(completion, self.tag)
        except ToolCallFormatError as error:
            return Verdict(reward=0.0, success=False, feedback=str(error))
        if "ground_truth" in task.answer:
            if self.checker == "official":
                return official_verdict(
                    calls, task.answer["ground_truth"], task.answer["functions"], task.answer["category"]
                )
            return verify_bfcl(
                calls, task.answer["ground_truth"], task.answer["functions"], lenient_strings=self.checker == "lenient"
            )
        return verify_exact(calls, task.answer["calls"], task.answer["functions"])

    near_duplicate_rule = "the same request (case and spacing ignored) to the same functions"

    def near_duplicate_key(self, task: Task) -> Hashable:
        """The request, lower-cased with its spacing collapsed, and the names of the functions offered: one problem
        whichever order its functions were listed in, in whichever prompt format."""
        question = str(task.data.get("question", task.prompt))
        names = sorted(str(doc.get("name")) for doc in (task.answer or {}).get("functions", []))
        return " ".join(question.lower().split()), tuple(names)

    def answer_format_missing(self, reply: str) -> bool | None:
        return not has_tool_call_block(reply, self.tag)

    def reply_constraint(self, reply):
        """Under structured decoding: `<tag>` blocks of JSON calls to the task's functions (called after reset)."""
        functions = self._task.answer["functions"] if self._task is not None else []
        names = [doc["name"] for doc in functions if isinstance(doc, dict) and isinstance(doc.get("name"), str)]
        return tool_call_constraint(names, self.tag) if names else None

    def solution(self, task: Task) -> str:
        """A reply that passes `verify`, written with this env's tag."""
        return format_tool_calls(task.data["reference_calls"], self.tag)


def _check_categories(categories: tuple[str, ...]) -> tuple[str, ...]:
    if not categories:
        raise UserError(f"env.args.categories is empty; choose from {', '.join(BFCL_CATEGORIES)}")
    for category in categories:
        if category not in BFCL_CATEGORIES:
            raise UserError(f"unknown BFCL category '{category}'; choose from {', '.join(BFCL_CATEGORIES)}")
    return tuple(dict.fromkeys(categories))


def _numbered(tasks: Sequence[Task], split: str, tool_format: str) -> tuple[Task, ...]:
    return tuple(
        _in_format(task, f"function_calling-{split}-{position}", tool_format) for position, task in enumerate(tasks)
    )


def _in_format(task: Task, task_id: str, tool_format: str) -> Task:
    """The loaded task (its prompt in r3l's own format) as the env gives it: under 'native' the request alone as
    the prompt and the functions as the tools the chat template is given (`Task.data["tools"]`)."""
    if tool_format == "prompt":
        return Task(id=task_id, prompt=task.prompt, answer=task.answer, data=task.data)
    context = task.data.get("context", "")
    prompt = NATIVE_USER_PROMPT.format(
        context=f"Context: {context.strip()}\n\n" if context.strip() else "", question=task.data["question"].strip()
    )
    tools = [function_tool(doc) for doc in task.answer["functions"]]
    return Task(id=task_id, prompt=prompt, answer=task.answer, data={**task.data, "tools": tools})


def function_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A function document as a chat template's tool: OpenAI's `{"type": "function", "function": doc}` (the form
    transformers' templates take), the document unchanged (BFCL's leaderboard lists Qwen its documents unchanged
    too, without the wrapper; BFCL's types such as "dict" stay as written)."""
    return {"type": "function", "function": doc}


def _split(tasks: list[Task], test_fraction: float, seed: int, label: str) -> tuple[list[Task], list[Task]]:
    shuffled = list(tasks)
    random.Random(f"{seed}:{label}").shuffle(shuffled)
    test_count = math.ceil(len(shuffled) * test_fraction) if len(shuffled) > 1 else 0
    return shuffled[test_count:], shuffled[:test_count]


def _prompt(functions: list[Any], question: str, context: str = "") -> str:
    return USER_PROMPT.format(
        functions=json.dumps(functions, ensure_ascii=False),
        context=f"Context: {context.strip()}\n\n" if context.strip() else "",
        question=question.strip(),
    )


# ------------------------------------------------------------------------------------------------ BFCL


def bfcl_data_dir() -> str:
    """The data folder of the installed `bfcl-eval` package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(MISSING_BFCL)
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not folder.is_dir():
        raise UserError(MISSING_BFCL)
    return str(folder)


def bfcl_files(folder: str, category: str) -> tuple[Path, Path]:
    """The newest BFCL_v<N>_<category>.json in `folder` that has a possible_answer file."""
    root = Path(folder)
    for stem in _BFCL_STEMS.get(category, (category,)):
        pattern = re.compile(rf"BFCL_v(\d+)_{re.escape(stem)}\.json")
        found = sorted(
            ((int(m.group(1)), file) for file in root.glob("BFCL_v*.json") if (m := pattern.fullmatch(file.name))),
            reverse=True,
        )
        for _, file in found:
            answers = root / "possible_answer" / file.name
            if answers.is_file():
                return file, answers
    raise UserError(
        f"no BFCL data for category '{category}' in {folder} (need BFCL_v<N>_{category}.json and "
        f"possible_answer/ of the same name); {MISSING_BFCL}"
    )


@functools.lru_cache(maxsize=8)
def load_bfcl(folder: str, categories: tuple[str, ...], seed: int, test_fraction: float) -> dict[str, tuple[Task, ...]]:
    train: list[Task] = []
    test: list[Task] = []
    for category in categories:
        questions, answers = bfcl_files(folder, category)
        tasks = _bfcl_tasks(category, questions, answers)
        category_train, category_test = _split(tasks, test_fraction, seed, category)
        train += category_train
        test += category_test
    random.Random(f"{seed}:train").shuffle(train)  # interleave categories, so a train_size cap mixes them
    random.Random(f"{seed}:test").shuffle(test)
    return {"train": tuple(train), "test": tuple(test)}


def _read_json_lines(file: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{file} line {number}: invalid JSON: {error.msg}; reinstall bfcl-eval") from None
        if not isinstance(record, dict) or "id" not in record:
            raise UserError(f"{file} line {number}: expected an object with an 'id'; reinstall bfcl-eval")
        records.append(record)
    return records


def _bfcl_tasks(category: str, questions: Path, answers: Path) -> list[Task]:
    gold = {record["id"]: record.get("ground_truth") for record in _read_json_lines(answers)}
    tasks = []
    for record in _read_json_lines(questions):
        where = f"{questions} id {record['id']}"
        functions, ground_truth = record.get("function"), gold.get(record["id"])
        if not isinstance(functions, list) or not isinstance(ground_truth, list) or not ground_truth:
            raise UserError(f"{where}: missing 'function' list or ground truth; reinstall bfcl-eval")
        if _unsolvable(ground_truth, functions):
            continue
        turns = record.get("question")
        if not isinstance(turns, list) or len(turns) != 1 or not isinstance(turns[0], list):
            raise UserError(f"{where}: expected a single-turn 'question'; category '{category}' is not supported")
        messages = turns[0]
        question = "\n".join(m["content"] for m in messages if m.get("role") == "user")
        context = "\n".join(m["content"] for m in messages if m.get("role") == "system")
        try:
            reference = bfcl_reference_calls(ground_truth, functions)
        except (ValueError, StopIteration) as error:
            raise UserError(f"{where}: unreadable ground truth ({error}); reinstall bfcl-eval") from None
        tasks.append(
            Task(
                id=str(record["id"]),
                prompt=_prompt(functions, question, context),
                answer={"ground_truth": ground_truth, "functions": functions, "category": category},
                data={
                    "source": "bfcl",
                    "category": category,
                    "source_id": record["id"],
                    "question": question,
                    "context": context,
                    "reference_calls": [call.to_json() for call in reference],
                },
            )
        )
    return tasks


def _unsolvable(ground_truth: list[Any], functions: list[Any]) -> str | None:
    """Why no sensible reply passes BFCL's checker on this task (see the module docstring), or None."""
    schemas = {doc.get("name"): doc for doc in functions if isinstance(doc, dict)}
    for entry in ground_truth:
        if not isinstance(entry, dict) or not all(
            isinstance(spec, dict) and all(isinstance(choices, list) for choices in spec.values())
            for spec in entry.values()
        ):
            return "the ground truth is not [{function: {argument: [acceptable values]}}]"
        for name, spec in entry.items():
            if any(not choices for choices in spec.values()):
                return f"an argument of {name} has no acceptable value"
            if name not in schemas:
                return f"the ground truth calls {name}, which the task does not list"
            parameters = schemas[name].get("parameters") or {}
            properties, required = parameters.get("properties") or {}, parameters.get("required") or []
            for argument, choices in spec.items():
                if argument not in properties and "" not in choices:
                    return f"the ground truth requires '{argument}', which {name}'s schema does not list"
            for argument in required:
                if argument not in spec:
                    return f"{name}'s schema requires '{argument}', which the ground truth does not list"
                if all(choice == "" for choice in spec[argument]):
                    return f"{name}'s schema requires '{argument}', which the ground truth wants left out"
    return None


# ------------------------------------------------------------------------------------------------ xLAM


@functools.lru_cache(maxsize=4)
def load_xlam(path: str, stamp: tuple[int, int] | None, seed: int, test_fraction: float) -> dict[str, tuple[Task, ...]]:
    """Read and check every row; `stamp` (mtime and size) makes an edited file reload."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"xLAM data file '{path}' not found; check env.args.path")
    tasks = [_xlam_task(row, where) for row, where in _xlam_rows(file, path)]
    if not tasks:
        raise UserError(f"{path}: no rows; check env.args.path")
    train, test = _split(tasks, test_fraction, seed, "xlam")
    return {"train": tuple(train), "test": tuple(test)}


def _xlam_rows(file: Path, label: str) -> list[tuple[Any, str]]:
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".json" or text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise UserError(f"{label} line {error.lineno}: invalid JSON: {error.msg} (column {error.colno})") from None
        if not isinstance(value, list):
            raise UserError(f"{label}: expected a JSON list of rows, or one row per line in a .jsonl file")
        return [(row, f"{label} item {index}") for index, row in enumerate(value, start=1)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((json.loads(line), f"{label} line {number}"))
        except json.JSONDecodeError as error:
            raise UserError(f"{label} line {number}: invalid JSON: {error.msg} (column {error.colno})") from None
    return rows


def _xlam_field(row: dict[str, Any], key: str, where: str) -> Any:
    if key not in row:
        raise UserError(f"{where}: no '{key}' field; xLAM rows need query, tools and answers")
    value = row[key]
    if key != "query" and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise UserError(f"{where}: field '{key}' is not valid JSON: {error.msg}") from None
    return value


def _xlam_task(row: Any, where: str) -> Task:
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object with query, tools and answers")
    query, tools, answers = (_xlam_field(row, key, where) for key in ("query", "tools", "answers"))
    if not isinstance(query, str) or not query.strip():
        raise UserError(f"{where}: 'query' must be a non-empty string")
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
        raise UserError(f"{where}: 'tools' must be a list of objects with a 'name'")
    if not isinstance(answers, list) or not all(
        isinstance(a, dict) and isinstance(a.get("name"), str) and isinstance(a.get("arguments"), dict) for a in answers
    ):
        raise UserError(f'{where}: \'answers\' must be a list of {{"name": ..., "arguments": {{...}}}} objects')
    calls = [Call(a["name"], a["arguments"]).to_json() for a in answers]
    return Task(
        id=str(row.get("id", where)),
        prompt=_prompt(tools, query),
        answer={"calls": calls, "functions": tools},
        data={
            "source": "xlam",
            "source_id": row.get("id"),
            "where": where,
            "question": query,
            "reference_calls": calls,
        },
    )
