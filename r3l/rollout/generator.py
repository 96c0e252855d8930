"""The generator protocol: token ids in, sampled token ids and their log-probabilities out."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

from r3l.registry import Registry


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class Completion:
    """One sampled continuation. `logprobs[i]` is log p(tokens[i]) under the sampling temperature
    (no top-p renormalisation), the same quantity the learner recomputes."""

    tokens: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"
    meta: dict[str, Any] = field(default_factory=dict)


class Generator(ABC):
    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1) -> list[list[Completion]]:
        """`n` completions for each prompt, as one list per prompt."""

    def sync_weights(self, state_dict) -> None:
        """Make the generator sample from these weights (a name -> tensor mapping of the policy)."""

    def release_memory(self) -> None:
        """Free what the generator can while the learner trains; the next `sync_weights` restores it."""

    @property
    def stats(self) -> dict[str, float]:
        return {}


GENERATORS: Registry[type[Generator]] = Registry("generator")
