"""A single-player TextArena game as a game source: its registry entry without the observation wrappers (each
observation is the game's new messages), its action wrappers still applied, played by player 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from r3l.envs.games.game_source import MISSING, Frame, said, unknown_game
from r3l.errors import UserError


class TextArenaGame:
    """One TextArena game, unwrapped from its observation wrappers, played by player 0 alone."""

    seeded = True

    def __init__(self, game_id: str, make_args: Mapping[str, Any], names: Sequence[str] | None):
        try:
            import textarena
            from textarena.envs.registration import ENV_REGISTRY
        except ImportError:
            raise UserError(MISSING.format(what="textarena", package="textarena")) from None
        if game_id not in ENV_REGISTRY:
            raise unknown_game("TextArena", game_id, list(ENV_REGISTRY))
        self.id, self.names, self.text_actions = game_id, tuple(str(n) for n in names) if names else None, True
        try:
            outer = textarena.make(game_id, **dict(make_args))
        except Exception as error:  # noqa: BLE001 - a game that needs data or a service: one line naming it
            raise UserError(
                f"TextArena could not make '{game_id}' with env.args.make_args={dict(make_args)}: {said(error)}"
            ) from None
        chain = []
        while isinstance(outer, textarena.Wrapper):
            chain.append(outer)
            outer = outer.env
        self.env = outer
        self.formatters = [wrapper for wrapper in chain if isinstance(wrapper, textarena.ActionWrapper)]
        self._player_action = textarena.ObservationType.PLAYER_ACTION

    @property
    def unwrapped(self) -> Any:
        return self.env

    def _messages(self) -> str:
        _, messages = self.env.get_observation()
        return "\n".join(
            str(text).strip()
            for sender, text, kind in messages
            if not (kind == self._player_action and sender == 0) and str(text).strip()
        )

    def start(self, seed: int) -> Frame:
        try:
            self.env.reset(num_players=1, seed=seed)
        except AssertionError as error:
            raise UserError(
                f"TextArena game '{self.id}' cannot be played by one player ({error}); the textarena "
                "env plays single-player games"
            ) from None
        return Frame(self._messages())

    def admits(self, action: str) -> bool:
        return True

    def play(self, action: str) -> Frame:
        for wrapper in self.formatters:  # outermost first, as the wrapped env would apply them
            action = wrapper.action(action)
        errors = getattr(self.env.state, "error_count", 0)
        done, _ = self.env.step(action)
        state = self.env.state
        info = (getattr(state, "game_info", None) or {}).get(0, {})
        rejected = getattr(state, "error_count", 0) > errors or bool(done and info.get("invalid_move"))
        text = self._messages() or "The game took the move."
        if not done:
            return Frame(text, accepted=not rejected)
        reward = float((getattr(state, "rewards", None) or {}).get(0, 0.0))
        return Frame(text, reward, over=True, accepted=not rejected, reason=str(info.get("reason", "")))

    def close(self) -> None:
        pass
