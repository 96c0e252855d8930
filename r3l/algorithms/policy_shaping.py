"""Critique-GRPO's loss (arXiv 2506.03106): PPO-clip on the tokens sampled in the context they are trained in,
policy shaping on the rest (a refinement sampled after a critique, trained as an answer to the question alone).

A shaped token's term is -A * f(pi) with f(pi) = pi / (pi + gamma), pi = exp(logp) the current policy's
probability of the token: no importance ratio (the refinement's behaviour policy is not pi in this context)
and no clipping. Its gradient, -A * gamma * pi / (pi + gamma)^2 * grad log pi, is largest for tokens of moderate
probability and vanishes for tokens the policy already picks, so a correct but unfamiliar refinement teaches most.
Both kinds of tokens share one aggregation (token-mean over the group's tokens, as the paper).
"""

from __future__ import annotations

import torch

from r3l.algorithms.aggregation import aggregate
from r3l.algorithms.losses import _MAX_LOG_RATIO, POLICY_LOSSES, _check, _masked_mean, _off_policy_metrics


def shaped(logprobs: torch.Tensor, gamma: float) -> torch.Tensor:
    """f(pi) = pi / (pi + gamma) of each token's probability pi = exp(logprobs)."""
    probability = logprobs.clamp(max=0.0).exp()
    return probability / (probability + gamma)


@POLICY_LOSSES.register("critique_grpo")
def critique_grpo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    denominator: float | None = None,
    off_policy: torch.Tensor | None = None,
    gamma: float = 0.1,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """-min(r A, clip(r) A) where `off_policy` is 0 (r = pi / pi_old), -f(pi) A where it is 1 (see the module doc).

    The learner passes `off_policy` (1 - the batch's `behaviour_in_context`); without it every token is
    on-policy and this is ppo_clip. Metrics: ``clip_fraction`` (of on-policy tokens, over all trained tokens),
    ``shaped_fraction`` (of trained tokens under shaping), ``ratio_mean``, ``approx_kl``.
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages, off_policy=off_policy)
    if not gamma > 0:
        raise ValueError(f"critique_grpo: gamma must be > 0, got {gamma}")
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"critique_grpo needs 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    refined = torch.zeros_like(mask, dtype=torch.bool) if off_policy is None else off_policy > 0
    ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    on_policy_term = torch.maximum(unclipped, clipped)
    per_token = torch.where(refined, -advantages * shaped(logprobs, gamma), on_policy_term)
    loss = aggregate(per_token, mask, aggregation, denominator)
    metrics = {
        "clip_fraction": _masked_mean(((clipped > unclipped) & ~refined).float(), mask),
        "shaped_fraction": _masked_mean(refined.float(), mask),
    }
    metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


critique_grpo.advantage_weighted = True
critique_grpo.takes_off_policy = True
