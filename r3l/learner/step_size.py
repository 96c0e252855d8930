"""How large a step the learning rate is for a model: Adam moves every weight by about lr per update
(exactly lr on its first, where the update is lr * sign(gradient)), so what matters is lr against the
size of the weights, not against the gradient."""

from __future__ import annotations

import math
import statistics

import torch

# lr / median weight RMS. Measured: SmolLM2-135M (RMS 0.190) learns at 1e-5 (5.3e-5) and collapsed onto one
# answer at 2e-5 (1.1e-4); Qwen2.5-Coder-0.5B (RMS 0.016) improved at 1e-6 (6.2e-5) and collapsed in three
# updates at 1e-5 (6.2e-4).
LARGEST_SAFE_RELATIVE_STEP = 1e-4
SUGGESTED_RELATIVE_STEP = 5e-5


def median_weight_rms(model: torch.nn.Module) -> float | None:
    """Median root-mean-square of the trainable weight matrices (None if there are none)."""
    with torch.no_grad():
        values = [
            float(torch.linalg.vector_norm(p.detach(), dtype=torch.float32)) / math.sqrt(p.numel())
            for p in model.parameters()
            if p.requires_grad and p.dim() == 2 and p.numel() > 0
        ]
    return statistics.median(values) if values else None


def relative_step(lr: float, weight_rms: float) -> float:
    return lr / weight_rms


def suggested_lr(weight_rms: float) -> float:
    """SUGGESTED_RELATIVE_STEP of the weights, to one significant digit."""
    return float(f"{SUGGESTED_RELATIVE_STEP * weight_rms:.0e}")


def step_size_warning(lr: float, weight_rms: float | None) -> str | None:
    """One line when `lr` is a step large enough to have collapsed models here, else None."""
    if not weight_rms:
        return None
    step = relative_step(lr, weight_rms)
    if step <= LARGEST_SAFE_RELATIVE_STEP:
        return None
    return (
        f"train.lr {lr:g} is a large step for this model: Adam moves each weight by about lr per update, "
        f"{step:.1e} of its typical weight (median RMS {weight_rms:.3f}); above {LARGEST_SAFE_RELATIVE_STEP:g} "
        f"both built-in models collapsed within a few updates. Try train.lr={suggested_lr(weight_rms):g}"
    )
