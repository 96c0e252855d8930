"""A verifier's judgement of one answer: what every grader returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement: scalar reward, binary success and a language feedback string."""

    reward: float
    success: bool
    feedback: str
