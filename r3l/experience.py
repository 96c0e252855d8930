"""The experience record every strategy emits and every learner consumes (see docs/DESIGN.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from r3l.rollout.constraints import TokenMasks

KINDS = ("base", "retry", "reflection", "sft")  # what the sample is (see DESIGN); `objective` says how it trains
# policy: its advantage comes from its group's rewards (the advantage function) and the policy loss trains it;
# sft: the strategy set its advantage (a weight) and it competes with no group (algorithm.sft_loss trains it);
# shaped: an off-policy refinement (Critique-GRPO's): its advantage comes from its group as a policy sample's, and
# policy shaping trains it (algorithm.shaping_gamma)
OBJECTIVES = ("policy", "sft", "shaped")
GROUP_OBJECTIVES = ("policy", "shaped")  # the objectives whose advantage comes from the group's rewards


@dataclass(frozen=True)
class Segment:
    """Tokens [start, end) of an experience that were sampled as one kind of text (a reflection inside an R3
    retry, say) at one temperature (0: greedily, scored untempered). Tokens outside every segment were sampled
    as the experience's own kind at the run's sampling temperature."""

    start: int
    end: int
    kind: str
    temperature: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown segment kind {self.kind!r}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"segment [{self.start}, {self.end}) is not a span")
        if self.temperature < 0:
            raise ValueError(f"segment temperature {self.temperature} is negative")

    @property
    def scoring_temperature(self) -> float:
        """The temperature the sampler's log-probs of these tokens are at: a greedy choice is scored untempered."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class Experience:
    group: str
    kind: str
    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    reward: float
    advantage: float = 0.0
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    pivot: int | None = None
    text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    objective: str = "policy"
    # positions sampled under a constraint: (position of the masks' first token, the tokens each allowed); the
    # learner scores those tokens under the same masks. Kept in memory, not written to rollout files.
    allowed: list[tuple[int, TokenMasks]] = field(default_factory=list, repr=False)
    # spans sampled as another kind or at another temperature than the rest (see Segment); the learner scores
    # each token at the temperature it was sampled at, and logs its log-prob gap under the segment's kind
    segments: list[Segment] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown experience kind {self.kind!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown experience objective {self.objective!r}")
        n = len(self.tokens)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"tokens ({n}), loss_mask ({len(self.loss_mask)}) and logprobs ({len(self.logprobs)}) must align"
            )
        if any(segment.end > n for segment in self.segments):
            raise ValueError(f"a segment reaches past the experience's {n} tokens")

    def segments_after(self, cut: int) -> list[Segment]:
        """The segments from token `cut` on, renumbered from `cut` (an experience's suffix)."""
        return [
            Segment(max(s.start - cut, 0), s.end - cut, s.kind, s.temperature) for s in self.segments if s.end > cut
        ]

    @property
    def num_trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def behaviour_in_context(self) -> bool:
        """Whether `logprobs` were sampled in the context `tokens` hold; a retry stored without the guidance it
        was generated with (context distillation) was not, so its log-probs say nothing of a mismatch."""
        return not (self.meta.get("guidance") and self.meta.get("guidance_in_tokens") is False)

    @property
    def num_constrained_tokens(self) -> int:
        return sum(len(masks) for _, masks in self.allowed)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(replace(self, allowed=[]))
        record.pop("allowed")
        record["turn_spans"] = [list(span) for span in self.turn_spans]
        if self.allowed:
            record["constrained_tokens"] = self.num_constrained_tokens
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Experience:
        record = dict(record)
        record["turn_spans"] = [tuple(span) for span in record.get("turn_spans", [])]
        record["segments"] = [Segment(**segment) for segment in record.get("segments", [])]  # none in old files
        record.pop("constrained_tokens", None)
        return cls(**record)


def write_jsonl(experiences: Iterable[Experience], path: str | Path, append: bool = False) -> int:
    count = 0
    with open(path, "a" if append else "w", encoding="utf-8") as handle:
        for experience in experiences:
            handle.write(json.dumps(experience.to_dict(), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[Experience]:
    with open(path, encoding="utf-8") as handle:
        return [Experience.from_dict(json.loads(line)) for line in handle if line.strip()]
