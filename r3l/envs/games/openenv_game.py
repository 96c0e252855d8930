"""Bring your own OpenEnv environment: `env=openenv:package.module:Class` (or `file.py:Class`) plays an OpenEnv
`Environment` subclass (openenv-core 0.3.0, its server-side class) in this process, through the same game loop as
`env=gym` (tasks are seeds, replay under a seed, the environment's reward, `max_steps`).

OpenEnv's own client talks over HTTP or WebSocket to a server started from Docker or with `uv` from the Hugging Face
hub; here the class that server would host is built directly (`env.args.make_args` are its keyword arguments), so
no server, container or download is needed. The model's reply fills the one text field of the environment's Action
model (the type `step` is annotated with); an observation is its one text field, or else its own fields (not
`done`, `reward`, `metadata`) as `name: value` lines. An action the Action model rejects never reaches the
environment and costs a move. An episode succeeds when the environment says `done` on a step paying at least
`success_reward`, or where its observation's metadata carries a `success` flag, by that flag.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from r3l.envs import register
from r3l.envs.games.game_source import MISSING, Frame, said
from r3l.envs.games.gym_games import GAME_SOURCES, GymGameEnv
from r3l.envs.reward_functions import load_reward_function
from r3l.errors import UserError

BASE_FIELDS = ("done", "reward", "metadata")


def _text_fields(model: type, skip: Sequence[str] = ()) -> list[str]:
    return [
        name
        for name, field in model.model_fields.items()  # type: ignore[attr-defined]
        if name not in skip and field.annotation is str
    ]


class OpenEnvGame:
    """One OpenEnv `Environment` instance, its observations as text and its actions from the model's text."""

    text_actions = True

    def __init__(self, game_id: str, make_args: Mapping[str, Any], names: Sequence[str] | None):
        try:
            from openenv.core.env_server.interfaces import Environment
            from openenv.core.env_server.types import Action, Observation
        except ImportError:
            raise UserError(MISSING.format(what="openenv", package="openenv-core")) from None
        cls: Any = load_reward_function(game_id, "env.args.id")
        if not (inspect.isclass(cls) and issubclass(cls, Environment)):
            raise UserError(f"env.args.id '{game_id}' is not an OpenEnv Environment subclass")
        environment_class: Any = cls  # what follows reads its step's annotations and builds it
        self.id, self.names = game_id, tuple(str(n) for n in names) if names else None
        self.action_type: Any = typing.get_type_hints(environment_class.step).get("action")
        if not (inspect.isclass(self.action_type) and issubclass(self.action_type, Action)):
            raise UserError(
                f"'{game_id}'.step does not name its Action type (annotate `action: MyAction`); the openenv env "
                "needs it to turn a reply into an action"
            )
        fields = _text_fields(self.action_type)
        if len(fields) != 1:
            raise UserError(
                f"the openenv env fills one text field of the action, but {self.action_type.__name__} has "
                f"{len(fields)} ({', '.join(fields) or 'none'})"
            )
        self.action_field = fields[0]
        self.observation_base = Observation
        try:
            self.env: Any = environment_class(**dict(make_args))
        except Exception as error:  # noqa: BLE001 - the user's class may fail in any way: one line naming it
            raise UserError(
                f"could not make '{game_id}' with env.args.make_args={dict(make_args)}: {said(error)}"
            ) from None
        self.seeded = "seed" in inspect.signature(self.env.reset).parameters

    def _frame(self, observation: Any, accepted: bool = True) -> Frame:
        metadata = getattr(observation, "metadata", None) or {}
        flag = metadata.get("success")
        return Frame(
            self._text(observation),
            float(getattr(observation, "reward", None) or 0.0),
            over=bool(getattr(observation, "done", False)),
            accepted=accepted,
            won=None if flag is None else bool(flag),
        )

    def _text(self, observation: Any) -> str:
        fields = _text_fields(type(observation), BASE_FIELDS)
        if len(fields) == 1:
            return str(getattr(observation, fields[0]))
        own = [name for name in type(observation).model_fields if name not in BASE_FIELDS]
        return "\n".join(f"{name}: {getattr(observation, name)}" for name in own)

    def start(self, seed: int) -> Frame:
        return self._frame(self.env.reset(seed=seed) if self.seeded else self.env.reset())

    def admits(self, action: str) -> bool:
        try:
            self.action_type(**{self.action_field: action})
        except Exception:  # noqa: BLE001 - pydantic's ValidationError: the Action model refuses the text
            return False
        return True

    def play(self, action: str) -> Frame:
        return self._frame(self.env.step(self.action_type(**{self.action_field: action})))

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


GAME_SOURCES["openenv"] = OpenEnvGame


@register("openenv")
class OpenEnvEnv(GymGameEnv):
    name = "openenv"
    description = (
        "An OpenEnv Environment class run in this process (env=openenv:package.module:Class): the reply fills its "
        "Action's text field, its reward, multi-turn, replay under a seed."
    )
    light = False  # an OpenEnv environment may hold a simulator: at most agent.env_workers at once
    argument_help = {
        **{key: text for key, text in GymGameEnv.argument_help.items() if key not in ("source", "game_reason")},
        "id": "the Environment class, as package.module:Class or path/to/file.py:Class; env=openenv:ID sets it",
        "make_args": "keyword arguments of the class, e.g. {high: 50}",
    }

    fixed_arguments = {"source": "openenv", "game_reason": False}
