"""Prime Intellect's `verifiers` environments (the v1 stack of verifiers 0.4.0): a single-turn taskset as an r3l
environment, graded by the taskset's own weighted `@vf.reward` functions.

`env=verifiers:ID` (`env.name=verifiers`, `env.args.id=ID`) loads a taskset: ID is an installed verifiers
taskset id (an environment package from the hub, `vf.load_taskset`), or `module:Class` / `file.py:Class` naming a
`vf.Taskset` subclass. `env.args.taskset_args` are the fields of the taskset's own config (`vf.TasksetConfig`).
verifiers has no train/test split of its own: `env.args.test_args` are config fields that make the taskset load
its test tasks (e.g. `{split: test}`); without them a seeded `test_fraction` of the tasks is held out.

What r3l shows: a task's `system_prompt` becomes the environment's system prompt when every task has the same
one, else it goes before the task's prompt (as verifiers does for a harness without a system slot); a prompt given
as messages contributes its leading system messages to the system prompt and its earlier turns (few-shot) as
"User: ..." / "Assistant: ..." paragraphs before the last user message, which must end the prompt.

The verdict: the reply becomes the trace's one assistant turn (verifiers' own `prepare_turn(...).commit`), the
task scores it with `Task.score` (every `@vf.reward` and plugged reward function, async ones included, each times
its weight), the reward is `trace.reward` (their weighted sum), success is a reward of at least
`success_threshold`, and the feedback lists each function's score and weight.

Refused, in one line: tasksets that are not one prompt and one reply (tool servers, containers or other runtimes,
setup/finalize hooks, harness programs, a taskset's own multi-agent `vf.Env`, user simulators, LLM judges, reward
functions that need a runtime). Those run agents through a harness program in a runtime, with tools served over
MCP; r3l's multi-turn `Env` (observation in, text action out) has no such program to host.

Install: `pip install 'r3l[verifiers]'` (verifiers==0.4.0, Python 3.11 or later; no torch; it pins openai<3).
Where other packages' versions may not change (openai 3 stays), these were all it needed on top of r3l's test
dependencies: `pip install --no-deps verifiers==0.4.0 prime-pydantic-config renderers httpx httpcore anthropic
opentelemetry-api docstring-parser prime-sandboxes tenacity 'connectrpc<0.12' pyqwest protobuf-py==0.1.1
protobuf-py-ext==0.1.1 aiofiles aiohttp
aiohappyeyeballs aiosignal frozenlist multidict propcache yarl tomli-w`, and for taskset ids (not `module:Class`)
also `mcp==2.0.0 mcp-types pyjwt python-multipart sse-starlette starlette uvicorn`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import math
import random
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from r3l.envs import register
from r3l.envs.base import SingleTurnEnv, Task, Verdict
from r3l.envs.reward_functions import load_reward_function, one_line
from r3l.errors import UserError

MISSING = (
    "env=verifiers needs verifiers 0.4.0 (Python 3.11 or later): pip install 'r3l[verifiers]' "
    "(or pip install verifiers==0.4.0); {error}"
)
SUPPORTED = (
    "env=verifiers runs single-turn tasksets (a text prompt, one reply, @vf.reward functions that read the trace); "
    "multi-turn verifiers environments (tools, sandboxes, harness programs, user simulators, LLM judges) are not "
    "supported"
)
SPLITS = ("train", "test")


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as error:
        raise UserError(MISSING.format(error=one_line(error))) from None
    return vf


@dataclass(frozen=True)
class Prepared:
    """An environment's tasks: each split's verifiers tasks and, in the same order, the r3l tasks showing them."""

    system_prompt: str | None
    sources: dict[str, tuple[Any, ...]]
    tasks: dict[str, tuple[Task, ...]]


def _refuse(taskset_id: str, why: str) -> UserError:
    return UserError(f"verifiers taskset '{taskset_id}' {why}; {SUPPORTED}")


def _taskset_class(vf: Any, taskset_id: str) -> Any:
    """The `vf.Taskset` subclass `taskset_id` names, refusing a package whose own `vf.Env` is not single-agent."""
    if ":" in taskset_id:
        cls = load_reward_function(taskset_id, "env.args.id")
        if not (isinstance(cls, type) and issubclass(cls, vf.Taskset)):
            raise UserError(f"env.args.id '{taskset_id}' names {cls!r}, not a verifiers Taskset subclass (vf.Taskset)")
        module = sys.modules.get(cls.__module__)
        exported = [getattr(module, name, None) for name in getattr(module, "__all__", ())]
        envs = [obj for obj in exported if isinstance(obj, type) and issubclass(obj, vf.Env)]
    else:
        try:
            cls = vf.utils.loaders.taskset_class(taskset_id)
            envs = [vf.environment_class(taskset_id)]
        except Exception as error:  # noqa: BLE001 - a missing package, a bad export: one line naming the id
            raise UserError(
                f"cannot load verifiers taskset '{taskset_id}': {one_line(error)}; give an installed taskset id or "
                "'module:Class'"
            ) from None
    for env in envs:
        if not issubclass(env, vf.SingleAgentEnv):
            raise _refuse(taskset_id, f"runs its own environment {env.__name__} (not vf.SingleAgentEnv)")
    return cls


@functools.lru_cache(maxsize=8)  # an environment is made per episode in flight (light): load each taskset once
def _load(taskset_id: str, args_json: str, max_tasks: int | None) -> tuple[Any, ...]:
    vf = _vf()
    cls = _taskset_class(vf, taskset_id)
    config_type = vf.utils.generic.concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
    try:
        config = config_type.model_validate({**json.loads(args_json), "id": taskset_id})
        taskset = cls(config)
    except Exception as error:  # noqa: BLE001 - pydantic's validation errors and the taskset's own
        raise UserError(
            f"verifiers taskset '{taskset_id}' refused env.args.taskset_args {args_json}: {one_line(error)[:300]}"
        ) from None
    if cls.toolsets(config):
        raise _refuse(taskset_id, "serves tools to the model")
    if max_tasks is not None:
        taskset = taskset.take(max_tasks)
    elif not taskset.bounded:
        raise UserError(f"verifiers taskset '{taskset_id}' is infinite; bound it with env.args.max_tasks")
    try:
        tasks = tuple(taskset)
    except Exception as error:  # noqa: BLE001 - the taskset's load() may fail in any way
        raise UserError(f"verifiers taskset '{taskset_id}' failed to load: {one_line(error)[:300]}") from None
    if not tasks:
        raise UserError(f"verifiers taskset '{taskset_id}' has no tasks with env.args.taskset_args {args_json}")
    _check_single_turn(vf, taskset_id, tasks[0])
    return tasks


def _check_single_turn(vf: Any, taskset_id: str, task: Any) -> None:
    """One line for what r3l cannot host: checked on the task type (the taskset yields one type)."""
    kind = type(task)
    base = vf.Task
    if kind.toolsets(task.config):
        raise _refuse(taskset_id, "serves tools to its tasks")
    if kind.NEEDS_CONTAINER or task.data.image:
        raise _refuse(taskset_id, "needs a container")
    if kind.setup is not base.setup or kind.finalize is not base.finalize:
        raise _refuse(taskset_id, "has setup/finalize hooks, which run in a runtime")
    if task.config.judges:
        raise _refuse(taskset_id, "is graded by LLM judges, which need a model endpoint")
    rewards = task.hooks("reward")
    if not rewards:
        raise _refuse(taskset_id, "declares no @vf.reward function")
    for function in rewards:
        parameter = inspect.signature(function).parameters.get("runtime")
        if parameter is not None and parameter.default is parameter.empty:
            raise _refuse(taskset_id, f"has a reward function {function.__name__} that needs a runtime")


def _shown(vf: Any, taskset_id: str, task: Any) -> tuple[str | None, str]:
    """(system prompt, user message) r3l shows for a verifiers task."""
    data = task.data
    systems = [data.system_prompt] if data.system_prompt else []
    prompt = data.prompt
    if prompt is None:
        raise _refuse(taskset_id, "has tasks without a prompt (the user opens the conversation)")
    if isinstance(prompt, str):
        return ("\n\n".join(systems) or None), prompt
    messages = list(prompt)
    while messages and messages[0].role == "system":
        systems.append(_text(vf, taskset_id, messages.pop(0)))
    if not messages or messages[-1].role != "user":
        raise _refuse(taskset_id, "has a prompt that does not end with a user message")
    if any(message.role not in ("user", "assistant") for message in messages):
        raise _refuse(taskset_id, "has a prompt with tool messages or a system message after the first turns")
    turns = [f"{message.role.capitalize()}: {_text(vf, taskset_id, message)}" for message in messages[:-1]]
    return ("\n\n".join(systems) or None), "\n\n".join([*turns, _text(vf, taskset_id, messages[-1])])


def _text(vf: Any, taskset_id: str, message: Any) -> str:
    content = message.content
    if isinstance(content, list) and any(not isinstance(part, vf.TextContentPart) for part in content):
        raise _refuse(taskset_id, "has prompts with images (r3l's models read text)")
    return str(vf.types.content_text(content))


def _run(coroutine: Any) -> Any:
    """Run a coroutine to the end from synchronous code, also from a thread whose event loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=run, name="r3l-verifiers-score")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


@functools.lru_cache(maxsize=8)  # the same settings, the same tasks: made once per process
def _prepare(
    taskset_id: str, args_json: str, test_json: str | None, test_fraction: float, seed: int, max_tasks: int | None
) -> Prepared:
    vf = _vf()
    sources = {"train": _load(taskset_id, args_json, max_tasks)}
    if test_json is not None:
        sources["test"] = _load(taskset_id, test_json, max_tasks)
    else:
        sources.update(_split(sources["train"], test_fraction, seed))
    shown = {split: [_shown(vf, taskset_id, task) for task in tasks] for split, tasks in sources.items()}
    systems = {system for pairs in shown.values() for system, _ in pairs}
    common = next(iter(systems)) if len(systems) == 1 else None  # one for all: the environment's system prompt
    tasks = {
        split: tuple(
            _r3l_task(split, position, task, text if len(systems) == 1 or not system else f"{system}\n\n{text}")
            for position, (task, (system, text)) in enumerate(zip(sources[split], shown[split]))
        )
        for split in SPLITS
    }
    return Prepared(common, sources, tasks)


def _r3l_task(split: str, position: int, task: Any, prompt: str) -> Task:
    data = task.data
    return Task(
        id=f"verifiers-{split}-{position}",
        prompt=prompt,
        answer=getattr(data, "answer", None),
        data={
            "split": split,
            "position": position,
            "key": task.key,
            "columns": data.model_dump(mode="json", exclude_none=True, exclude=_BASE_FIELDS),
        },
    )


@register("verifiers")
class VerifiersEnv(SingleTurnEnv):
    name = "verifiers"
    description = (
        "A single-turn Prime Intellect verifiers taskset (env=verifiers:ID, verifiers 0.4.0): its prompts, its "
        "weighted @vf.reward functions as the reward."
    )
    argument_help = {
        "id": "the taskset: an installed verifiers taskset id, or 'module:Class' / 'file.py:Class' naming a "
        "vf.Taskset subclass; env=verifiers:ID sets it",
        "taskset_args": "fields of the taskset's config (its vf.TasksetConfig), e.g. {num_tasks: 100}",
        "test_args": "config fields, over taskset_args, that make the taskset load its test tasks, e.g. {split: "
        "test} (null: hold out test_fraction of the tasks)",
        "test_fraction": "share of the tasks held out for evaluation when test_args is null",
        "seed": "the seed of that split",
        "max_tasks": "load at most this many tasks per taskset (needed for an infinite taskset; null: all)",
        "success_threshold": "the weighted reward that counts as a success",
    }

    def __init__(
        self,
        *,
        id: str,
        taskset_args: Mapping[str, Any] | None = None,
        test_args: Mapping[str, Any] | None = None,
        test_fraction: float = 0.1,
        seed: int = 0,
        max_tasks: int | None = None,
        success_threshold: float = 1.0,
    ):
        super().__init__()
        if not isinstance(id, str) or not id.strip():
            raise UserError(f"env.args.id must name a verifiers taskset, e.g. env=verifiers:my_taskset, got {id!r}")
        for setting, value in (("taskset_args", taskset_args), ("test_args", test_args)):
            if value is not None and not isinstance(value, Mapping):
                raise UserError(f"env.args.{setting} must be a mapping of config fields, got {value!r}")
        if not 0 <= test_fraction < 1:
            raise UserError(f"env.args.test_fraction must be in [0, 1), got {test_fraction}")
        if max_tasks is not None and (isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1):
            raise UserError(f"env.args.max_tasks must be a positive whole number or null, got {max_tasks!r}")
        self.id, self.success_threshold = id.strip(), float(success_threshold)
        args = dict(taskset_args or {})
        test_json = None if test_args is None else _json({**args, **test_args})
        self._prepared = _prepare(self.id, _json(args), test_json, float(test_fraction), seed, max_tasks)
        self.system_prompt = self._prepared.system_prompt

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._prepared.tasks:
            raise UserError(f"unknown split '{split}' for environment 'verifiers'; use 'train' or 'test'")
        return self._prepared.tasks[split]

    def score(self, task: Task, completion: str) -> Any:
        """The verifiers trace of `completion` as the reply to `task`, scored by the task (`trace.rewards`)."""
        vf = _vf()
        split, position = str(task.data["split"]), int(task.data["position"])
        source = self._prepared.sources[split][position]
        data = source.data
        trace = vf.Trace(
            task=vf.TraceTask(type=type(source).__name__, data=data, key=source.key, hash=source.hash),
            state=vf.state.state_cls(type(source))(),
            agent=vf.AgentInfo(config=vf.AgentConfig(), name="r3l"),
        )
        prompt = [vf.UserMessage(content=data.prompt)] if isinstance(data.prompt, str) else list(data.prompt)
        system = [vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []
        reply = vf.AssistantMessage(content=completion)
        response = vf.Response(id="r3l", created=int(time.time()), model="r3l", message=reply, finish_reason="stop")
        vf.graph.prepare_turn(trace, [*system, *prompt]).commit(response)
        trace.is_completed = trace.ok = True
        try:
            _run(source.score(trace))
        except Exception as error:  # noqa: BLE001 - the taskset's reward functions may fail in any way
            raise UserError(
                f"verifiers taskset '{self.id}' failed to score task {task.id}: {one_line(error)[:300]}"
            ) from None
        return trace

    def verify(self, task: Task, completion: str) -> Verdict:
        trace = self.score(task, completion)
        parts = []
        for name, reward in trace.rewards.items():
            if reward is None or not math.isfinite(reward.score):
                raise UserError(f"verifiers taskset '{self.id}': reward {name} gave no finite score on task {task.id}")
            parts.append(f"{name} scored {reward.score:g} (weight {reward.weight:g})")
        total = float(trace.reward)
        success = total >= self.success_threshold
        relation = "reaches" if success else "is below"
        return Verdict(
            reward=total,
            success=success,
            feedback=f"{'; '.join(parts)}: reward {total:g}, which {relation} the success threshold "
            f"{self.success_threshold:g}",
        )


_BASE_FIELDS = {
    "idx",
    "description",
    "prompt",
    "system_prompt",
    "image",
    "workdir",
    "agent_user",
    "skills",
    "network_allow",
    "network_block",
    "artifacts",
    "artifact_max_bytes",
    "timeout",
    "resources",
}  # vf.TaskData's own fields that say nothing about the answer; `id` and `name` stay among the columns


def _json(args: Mapping[str, Any]) -> str:
    try:
        return json.dumps(dict(args), sort_keys=True)
    except TypeError as error:
        raise UserError(f"env.args.taskset_args must hold plain values (numbers, text, lists): {error}") from None


def _split(tasks: tuple[Any, ...], test_fraction: float, seed: int) -> dict[str, tuple[Any, ...]]:
    """A seeded `test_fraction` of the tasks held out (at least one of two or more), the rest for training."""
    order = list(tasks)
    random.Random(seed).shuffle(order)
    test_count = math.ceil(len(order) * test_fraction) if len(order) > 1 else 0
    return {"train": tuple(order[test_count:]), "test": tuple(order[:test_count])}
