"""Learning-rate schedules: linear warm-up followed by constant or cosine decay."""

from __future__ import annotations

import math

import torch


def lr_factor(step: int, total_steps: int, warmup_steps: int, kind: str, min_factor: float = 0.0) -> float:
    """Multiplier of the base learning rate before optimizer step `step` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    if kind == "cosine":
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_factor + (1 - min_factor) * 0.5 * (1 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule '{kind}'; use constant or cosine")


def make_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float, kind: str):
    warmup = round(warmup_ratio * total_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, warmup, kind))
