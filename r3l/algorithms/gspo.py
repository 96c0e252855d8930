"""GSPO (Group Sequence Policy Optimization, arXiv 2507.18071): one importance ratio per sequence.

s_i = exp(mean over sequence i's trained tokens of (logp - old_logp)), the length-normalised sequence ratio;
the loss of sequence i is -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i), with A_i the sequence's
advantage (the masked mean of its broadcast advantages). Clipping keeps or drops whole sequences, never single
tokens. The paper's clip range is tiny because a length-normalised ratio stays near 1 (3e-4 / 4e-4).

Each sequence's loss is carried by every one of its trained tokens, so `aggregate` reduces it: with
``seq-mean-token-mean`` (the paper's, set by the `gspo` preset) the loss is the mean over sequences; with
``token-mean`` longer sequences weigh more.
"""

from __future__ import annotations

import torch

from r3l.algorithms.aggregation import aggregate
from r3l.algorithms.losses import _MAX_LOG_RATIO, POLICY_LOSSES, _check, _masked_mean, _off_policy_metrics


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's mean over its masked positions, [B] (0 for a row with none)."""
    weights = mask.to(values.dtype)
    counts = weights.sum(dim=-1)
    totals = torch.where(mask != 0, values * weights, torch.zeros_like(values)).sum(dim=-1)
    return torch.where(counts > 0, totals / counts.clamp(min=1e-12), torch.zeros_like(totals))


def sequence_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = mean over sequence i's trained tokens of (logp - old_logp), [B]."""
    return sequence_mean(logprobs - old_logprobs, mask).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


@POLICY_LOSSES.register("gspo")
def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "seq-mean-token-mean",
    denominator: float | None = None,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO's clipped sequence-level surrogate (see the module doc).

    Metrics: ``clip_fraction`` (the share of trained tokens whose sequence is clipped, so its gradient is 0),
    ``sequence_ratio_mean`` (the token-weighted mean of s_i), ``ratio_mean`` and ``approx_kl`` per token.
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"gspo needs 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    ratio = sequence_log_ratio(logprobs, old_logprobs, mask).exp()
    advantage = sequence_mean(advantages, mask)
    unclipped = -advantage * ratio
    clipped = -advantage * ratio.clamp(1 - clip_low, 1 + clip_high)
    per_sequence = torch.maximum(unclipped, clipped)
    loss = aggregate(per_sequence[:, None].expand_as(mask), mask, aggregation, denominator)
    metrics = {
        "clip_fraction": _masked_mean((clipped > unclipped).float()[:, None].expand_as(mask), mask),
        "sequence_ratio_mean": _masked_mean(ratio.detach()[:, None].expand_as(mask), mask),
    }
    metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


gspo.advantage_weighted = True
