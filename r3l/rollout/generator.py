"""The generator protocol: token ids in, sampled token ids and their log-probabilities out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from r3l.registry import Registry
from r3l.rollout.constraints import Constraint, TokenMasks

Constraints = Sequence[Constraint | None] | None


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
    allowed: TokenMasks | None = None  # sampled under a constraint: the tokens each position allowed


def unconstrained(constraints: Constraints) -> bool:
    return constraints is None or all(c is None for c in constraints)


class Generator(ABC):
    @abstractmethod
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        """`n` completions for each prompt, as one list per prompt; `constraints` (one per prompt, None for
        a free prompt) limits what each prompt's completions may be (structured decoding)."""

    def sync_weights(self, state_dict) -> None:
        """Make the generator sample from these weights (a name -> tensor mapping of the policy)."""

    @property
    def takes_adapters(self) -> bool:
        """Whether `sync_adapter` works: the generator serves the base weights and applies a LoRA adapter."""
        return False

    def sync_adapter(self, folder: str) -> None:
        """Make the generator sample from the base weights with the LoRA adapter saved in `folder` (PEFT's
        save_pretrained); only where `takes_adapters`."""
        raise NotImplementedError(f"{type(self).__name__} takes merged weights only (sync_weights)")

    def release_memory(self) -> None:
        """Free what the generator can while the learner trains; the next `sync_weights` restores it."""

    @property
    def stats(self) -> dict[str, float]:
        return {}

    @property
    def ready(self) -> bool:
        """Whether the generator exists and takes weights now (a DeferredGenerator: only once built)."""
        return True


class DeferredGenerator(Generator):
    """A generator built at its first `generate`: the trainer's own when rollout workers explore, which only
    held-out evaluation and a task list's setup use, so it holds no memory beside the learner until then. Until
    built it takes no weights (`ready` is False); once built, `on_built(generator)` gives it the policy's current
    ones."""

    def __init__(self, build: Callable[[], Generator]):
        self._build = build
        self.inner: Generator | None = None
        self.on_built: Callable[[Generator], None] | None = None

    @property
    def ready(self) -> bool:
        return self.inner is not None

    def built(self) -> Generator:
        if self.inner is None:
            self.inner = self._build()
            if self.on_built is not None:
                self.on_built(self.inner)
        return self.inner

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        return self.built().generate(prompts, params, n, constraints)

    def sync_weights(self, state_dict) -> None:
        if self.inner is not None:
            self.inner.sync_weights(state_dict)

    @property
    def takes_adapters(self) -> bool:
        return self.inner is not None and self.inner.takes_adapters

    def sync_adapter(self, folder: str) -> None:
        if self.inner is not None:
            self.inner.sync_adapter(folder)

    def release_memory(self) -> None:
        if self.inner is not None:
            self.inner.release_memory()

    @property
    def stats(self) -> dict[str, float]:
        return self.inner.stats if self.inner is not None else {}


GENERATORS: Registry[type[Generator]] = Registry("generator")
