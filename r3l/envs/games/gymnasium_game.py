"""A Gymnasium game as a game source: `gymnasium.make(ID)`, its observations as text (a `spaces.Text` space, or the
`ansi` render with colours as square brackets) and its actions by name."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from r3l.envs.games.game_rules import family
from r3l.envs.games.game_source import MISSING, Frame, said, unknown_game
from r3l.errors import UserError

ANSI_SPAN = re.compile(r"\x1b\[[0-9;]*m(.*?)\x1b\[0m", re.S)
ANSI_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Gymnasium's toy-text games whose Discrete actions have known names
TOY_TEXT = {"FrozenLake": ("left", "down", "right", "up")}


def ansi_text(text: str) -> str:
    """An `ansi` render as plain text: coloured spans in square brackets, other escape codes removed."""
    return ANSI_CODE.sub("", ANSI_SPAN.sub(r"[\1]", text))


def toy_text(game_id: str) -> tuple[str, ...]:
    """The built-in action names of a Gymnasium toy-text game ('FrozenLake8x8-v1' -> FrozenLake's)."""
    return TOY_TEXT.get(family(game_id), ())


class GymnasiumGame:
    """One `gymnasium.make(ID)` instance, its observations as text and its actions by name."""

    def __init__(
        self,
        game_id: str,
        make_args: Mapping[str, Any],
        names: Sequence[str] | None,
        seeded_args: Callable[[int], dict[str, Any]] | None = None,
    ):
        """`seeded_args(seed)`: settings of the game that depend on the task's seed (a FrozenLake map); the game is
        made again with them at each start."""
        try:
            import gymnasium
        except ImportError:
            raise UserError(MISSING.format(what="gym", package="gymnasium")) from None
        if ":" not in game_id and game_id not in gymnasium.registry:
            raise unknown_game("Gymnasium", game_id, list(gymnasium.registry))
        self.id, self._gymnasium, self.make_args, self.seeded_args = game_id, gymnasium, dict(make_args), seeded_args
        self.env = self._make(gymnasium, dict(make_args))
        spaces = gymnasium.spaces
        observation_space, action_space = self.env.observation_space, self.env.action_space
        self.render = not isinstance(observation_space, spaces.Text) and self.env.render_mode == "ansi"
        self.text_actions = isinstance(action_space, spaces.Text)
        if isinstance(action_space, spaces.Discrete):
            known = toy_text(game_id)
            names = [str(name) for name in (names or known or range(int(action_space.n)))]
            if len(names) != int(action_space.n):
                raise UserError(
                    f"env.args.actions names {len(names)} actions, but '{game_id}' has "
                    f"{int(action_space.n)} (Discrete({int(action_space.n)}))"
                )
            self.names: tuple[str, ...] | None = tuple(names)
        elif self.text_actions:
            self.names = tuple(str(name) for name in names) if names else None
        else:
            raise UserError(
                f"'{game_id}' acts in {str(action_space)[:80]}; the gym env plays text actions "
                "(spaces.Text) or named Discrete(n) actions"
            )
        self.seeded = "seed" in inspect.signature(self.env.unwrapped.reset).parameters

    def _make(self, gymnasium: Any, kwargs: dict[str, Any]) -> Any:
        try:
            env = gymnasium.make(self.id, **kwargs)
            if (
                "render_mode" not in kwargs
                and not isinstance(env.observation_space, gymnasium.spaces.Text)
                and "ansi" in (env.metadata.get("render_modes") or ())
            ):
                env.close()
                env = gymnasium.make(self.id, render_mode="ansi", **kwargs)
        except UserError:
            raise
        except Exception as error:  # noqa: BLE001 - whatever the package raises, one line that names the game
            raise UserError(
                f"Gymnasium could not make '{self.id}' with env.args.make_args={kwargs}: {said(error)}"
            ) from None
        return env

    def _text(self, observation: Any) -> str:
        if self.render:
            rendered = self.env.render()
            return ansi_text(rendered if isinstance(rendered, str) else "".join(map(str, rendered))).strip("\n")
        if isinstance(observation, str):
            return observation
        raise UserError(
            f"'{self.id}' observes {str(self.env.observation_space)[:80]}, not text, and has no 'ansi' "
            "render; the gym env plays games that observe text"
        )

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    def start(self, seed: int) -> Frame:
        if self.seeded_args is not None:
            self.env.close()
            self.env = self._make(self._gymnasium, {**self.make_args, **self.seeded_args(seed)})
        observation, _ = self.env.reset(seed=seed) if self.seeded else self.env.reset()
        return Frame(self._text(observation))

    def admits(self, action: str) -> bool:
        return not self.text_actions or bool(self.env.action_space.contains(action))

    def play(self, action: str) -> Frame:
        move: Any = action
        if not self.text_actions:
            move = self.env.action_space.start + self.names.index(action)  # type: ignore[union-attr]
        observation, reward, terminated, truncated, info = self.env.step(move)
        flag = next((info[key] for key in ("success", "is_success") if key in info), None)
        return Frame(
            self._text(observation),
            float(reward),
            bool(terminated),
            bool(truncated),
            won=None if flag is None else bool(flag),
        )

    def close(self) -> None:
        self.env.close()
