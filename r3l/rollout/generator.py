"""The generator protocol: token ids in, sampled token ids and their log-probabilities out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
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
    # end a row once its text holds a complete JSON object after any thinking (a report: json_close.report_end);
    # an engine that cannot stop there cuts the reply at that point afterwards (nothing after it is kept or trained)
    stop_at_json_close: bool = False


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

    @property
    def cut_off(self) -> bool:
        """Stopped by the token limit, not ended by the model."""
        return self.finish_reason == "length"


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
        """Running totals since the generator was built (positions prefilled and reused, decode steps, seconds);
        `kv_cache_bytes` is a level, not a total."""
        return {}

    @property
    def ready(self) -> bool:
        """Whether the generator exists and takes weights now (a deferred one only once built)."""
        return True


GENERATORS: Registry[type[Generator]] = Registry("generator")


STAT_LEVELS = frozenset({"kv_cache_bytes"})  # what the generator holds now, not a running total


def step_generator_stats(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """A step's share of the generator's running totals (`after` minus `before`, levels as they are after), as
    `generator/NAME` metrics, with `generator/kv_reuse_share`: the share of prompt positions taken from kept keys
    and values instead of prefilled (absent where the step read no prompt)."""
    step = {
        f"generator/{name}": value if name in STAT_LEVELS else value - before.get(name, 0.0)
        for name, value in after.items()
    }
    read = step.get("generator/prefill_positions", 0.0) + step.get("generator/kv_reused_positions", 0.0)
    if read > 0:
        step["generator/kv_reuse_share"] = step.get("generator/kv_reused_positions", 0.0) / read
    return step
