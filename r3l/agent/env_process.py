"""An environment that lives in a process of its own (`agent.env_processes`), driven through a pipe.

`ProcessEnv(factory)` spawns a process that builds `factory()` (a picklable callable: the `partial` that
`build.env_factory` returns) and answers calls to it. It stands in for the environment: reset, step, replay,
reply_constraint and tasks run there, its attributes (action_format, system_prompt ...) are read once. An error
raised there is raised here with its type name and message; a process that dies makes the blocked call raise
`EnvironmentProcessDied`, which the episode runner's guard turns into `env_error` like a simulator death.
`abort` kills the process and is safe from another thread (the runner's timeout).

Calls on one instance are serial (one episode at a time uses it); calls on different instances may run in
parallel threads, each blocked on its own pipe without the GIL.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from r3l.agent.env_guard import NamedError
from r3l.envs import Env, Task
from r3l.errors import UserError

ATTRIBUTES = (
    "name",
    "action_format",
    "retry_from_pivot",
    "steps_are_a_cost",
    "light",
    "watch_prompt_copies",
    "deterministic",
    "system_prompt",
)
CLOSE_SECONDS = 5.0


class EnvironmentProcessDied(NamedError):
    """The environment's process exited while a call waited for it."""


class RemoteEnvError(NamedError):
    """An exception the environment raised in its process (the message starts with its type name)."""


def serve(factory: Callable[[], Env], connection) -> None:
    """The process's loop: build the environment, send its attributes, answer calls until told to close.
    Ctrl-C is the parent's to handle (it closes or kills this process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        env = factory()
    except UserError as error:
        connection.send(("user_error", str(error)))
        return
    except Exception as error:  # noqa: BLE001 - reported to the parent, which fails the episode
        connection.send(("error", f"{type(error).__name__}: {error}"))
        return
    connection.send(("ready", {name: getattr(env, name) for name in ATTRIBUTES}))
    while True:
        try:
            method, args = connection.recv()
        except EOFError:  # the parent is gone
            break
        if method == "close":
            break
        try:
            result = getattr(env, method)(*args)
            connection.send(("ok", list(result) if method == "tasks" else result))  # a split may be a lazy view
        except UserError as error:
            connection.send(("user_error", str(error)))
        except Exception as error:  # noqa: BLE001 - whatever the environment raises ends only its episode
            connection.send(("error", f"{type(error).__name__}: {error}"))
    close = getattr(env, "close", None)
    if close is not None:
        close()


class ProcessEnv(Env):
    """The environment `factory()` run in a spawned process (see the module's doc)."""

    def __init__(self, factory: Callable[[], Env]):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads or torch state
        self._connection, child = context.Pipe()
        self._process = context.Process(target=serve, args=(factory, child), daemon=True)
        self._process.start()
        child.close()
        self._attributes: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # --- the environment's own attributes, read once it is built ------------------------------------------
    def _ready(self) -> dict[str, Any]:
        with self._lock:
            if self._attributes is None:
                self._attributes = self._receive()
            return self._attributes

    def wait_ready(self) -> None:
        """Wait until the process has built its environment (spawning and a simulator's start can take seconds)."""
        self._ready()

    def __getattribute__(self, name: str) -> Any:
        if name in ATTRIBUTES:
            return object.__getattribute__(self, "_ready")()[name]
        return object.__getattribute__(self, name)

    # --- calls --------------------------------------------------------------------------------------------
    def _receive(self) -> Any:
        try:
            kind, value = self._connection.recv()
        except (EOFError, OSError):
            self._process.join(timeout=1)
            raise self._died() from None
        if kind == "user_error":
            raise UserError(value)
        if kind == "error":
            raise RemoteEnvError(value)
        return value

    def _call(self, method: str, *args: Any) -> Any:
        self._ready()
        try:
            self._connection.send((method, args))
        except (BrokenPipeError, OSError):
            raise self._died() from None
        return self._receive()

    def _died(self) -> EnvironmentProcessDied:
        return EnvironmentProcessDied(f"the environment process exited (exit code {self._process.exitcode})")

    def tasks(self, split: str) -> Sequence[Task]:
        return self._call("tasks", split)

    def reset(self, task: Task) -> str:
        return self._call("reset", task)

    def step(self, action: str):
        return self._call("step", action)

    def replay(self, task: Task, actions: Sequence[str]) -> str:
        return self._call("replay", task, list(actions))

    def reply_constraint(self, reply):
        return self._call("reply_constraint", reply)

    # --- ending -------------------------------------------------------------------------------------------
    def abort(self) -> None:
        """Kill the process at once (a hung or broken environment); a call blocked on it then raises."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout=CLOSE_SECONDS)

    def close(self) -> None:
        """Ask the process to close its environment and exit; kill it if it does not."""
        if self._process.is_alive():
            try:
                self._connection.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=CLOSE_SECONDS)
        self.abort()
        self._connection.close()
