"""An OpenEnv environment written as OpenEnv's own template writes one (server-side `Environment`, pydantic Action and
Observation models): guess a number from 1 to 20, told "higher" or "lower" after each wrong guess. The target comes
from the reset's seed, so episodes replay; a guess must be digits (the Action model refuses anything else)."""

from __future__ import annotations

import random
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: str = Field(..., pattern=r"^\s*\d{1,3}\s*$", description="a whole number")


class GuessObservation(Observation):
    message: str = Field(default="", description="what the game says")


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, high: int = 20):
        self.high = high
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._target = 1

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs) -> GuessObservation:
        self._target = random.Random(seed).randint(1, self.high)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GuessObservation(
            message=f"I am thinking of a number from 1 to {self.high}. Guess it.", done=False, reward=0.0
        )

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        guess = int(action.guess)
        if guess == self._target:
            return GuessObservation(message=f"{guess} is right!", done=True, reward=1.0)
        hint = "higher" if guess < self._target else "lower"
        return GuessObservation(message=f"{guess} is wrong; the number is {hint}.", done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


class TwoFieldAction(Action):
    first: str
    second: str


class TwoFieldEnvironment(GuessEnvironment):
    def step(self, action: TwoFieldAction, timeout_s: float | None = None, **kwargs) -> GuessObservation:
        raise AssertionError("never reached: the adapter refuses an action with two text fields")
