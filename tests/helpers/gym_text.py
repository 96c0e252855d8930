"""TextArena's Mastermind registered with Gymnasium under Text spaces, so that the gym env's text path (spaces.Text
observations and actions, terminated, the game's reward) runs on a real game: no package that installs here
registers Gymnasium games whose observations and actions are text. Importing this module registers
`R3lTest/Mastermind-v0` (seeded) and `R3lTest/MastermindUnseeded-v0` (a reset that takes no seed, which the gym
env must refuse to replay); `env=gym:tests.helpers.gym_text:R3lTest/Mastermind-v0` makes Gymnasium import it."""

from __future__ import annotations

import string

import gymnasium
import textarena
from gymnasium import spaces

PRINTABLE = string.printable


class TextMastermind(gymnasium.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_turns: int = 20):
        self.game = textarena.make("Mastermind-v0-raw", max_turns=max_turns)
        self.observation_space = spaces.Text(max_length=100_000, min_length=0, charset=PRINTABLE)
        self.action_space = spaces.Text(max_length=64, min_length=1, charset=PRINTABLE)

    def _messages(self) -> str:
        _, messages = self.game.get_observation()
        return "\n".join(text for sender, text, kind in messages if sender != 0)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.game.reset(num_players=1, seed=seed)
        return self._messages(), {}

    def step(self, action: str):
        done, _ = self.game.step(action)
        reward = float((self.game.state.rewards or {}).get(0, 0.0)) if done else 0.0
        return self._messages(), reward, bool(done), False, {}


class UnseededTextMastermind(TextMastermind):
    def reset(self, *, options: dict | None = None):  # type: ignore[override]
        self.game.reset(num_players=1, seed=None)
        return self._messages(), {}


for _id, _entry in (
    ("R3lTest/Mastermind-v0", TextMastermind),
    ("R3lTest/MastermindUnseeded-v0", UnseededTextMastermind),
):
    if _id not in gymnasium.registry:
        gymnasium.register(_id, entry_point=_entry, disable_env_checker=True)
