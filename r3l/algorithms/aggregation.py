"""Reduce per-token values [B, T] under a loss mask to one scalar (token-mean, seq-mean-token-mean, ...).

Gradient accumulation: a learner that splits one batch into micro-batches and sums their
gradients should pass ``denominator`` = the count over the *whole* batch (masked tokens for
``token-mean``; sequences with at least one masked token for the ``seq-mean-*`` modes). Each
micro-batch then contributes its sum divided by that shared count, and the accumulated
gradient equals the gradient of the full-batch loss. Without ``denominator`` the count of
the micro-batch itself is used.
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    denominator: float | None = None,
) -> torch.Tensor:
    """Aggregate ``values`` [B, T] over ``mask`` [B, T] (0/1, bool or float weights) to a scalar.

    - ``token-mean``: sum(values * mask) / (denominator or mask.sum()).
    - ``seq-mean-token-mean``: each sequence's masked token-mean, averaged over the sequences
      that have at least one masked token (or divided by ``denominator``).
    - ``seq-mean-token-sum``: each sequence's masked token-sum, averaged over the sequences that
      have at least one masked token (or divided by ``denominator``).

    Masked-out positions never contribute, even if they hold inf or NaN. An empty mask gives 0.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose one of: {', '.join(AGGREGATIONS)}")
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same shape")
    if denominator is not None and not denominator > 0:
        raise ValueError(f"denominator must be positive, got {denominator}")
    if values.dim() == 1:
        values, mask = values.unsqueeze(0), mask.unsqueeze(0)

    weights = mask.to(values.dtype)
    active = mask != 0
    masked = torch.where(active, values * weights, torch.zeros_like(values))

    if mode == "token-mean":
        count = weights.sum() if denominator is None else denominator
        return _safe_divide(masked.sum(), count)

    token_count = weights.sum(dim=-1)
    has_tokens = active.any(dim=-1)
    seq_values = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        seq_values = torch.where(has_tokens, seq_values / torch.where(has_tokens, token_count, 1.0), 0.0)
    count = has_tokens.sum().to(values.dtype) if denominator is None else denominator
    return _safe_divide(seq_values.sum(), count)


def _safe_divide(total: torch.Tensor, count: torch.Tensor | float) -> torch.Tensor:
    """total / count, or 0 (keeping the graph) when count is 0, which only happens with an empty mask."""
    if isinstance(count, torch.Tensor):
        return torch.where(count != 0, total / torch.where(count != 0, count, 1.0), total * 0.0)
    return total / count
