"""What one measured training step did: its times and the tokens it generated and trained."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StepRecord:
    seconds: float
    rollout_seconds: float
    train_seconds: float
    prompts: int
    completions: int
    generated_tokens: int
    trained_tokens: int
    # learner forward work (positions, attention_pairs, head_positions, padded_positions) and
    # generator decode counters (see HFGenerator.stats); empty where a side does not report them
    work: dict[str, float] = field(default_factory=dict)
    decode: dict[str, float] = field(default_factory=dict)

    @property
    def rollout_tokens_per_s(self) -> float:
        return self.generated_tokens / max(self.rollout_seconds, 1e-9)

    @property
    def train_tokens_per_s(self) -> float:
        return self.trained_tokens / max(self.train_seconds, 1e-9)

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "rollout_tokens_per_s": self.rollout_tokens_per_s,
            "train_tokens_per_s": self.train_tokens_per_s,
        }
