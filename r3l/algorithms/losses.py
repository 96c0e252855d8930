"""Policy losses: per-token log-probabilities and advantages [B, T] -> (scalar loss, metrics).

Every loss has the signature
``fn(logprobs, old_logprobs, advantages, mask, *, aggregation="token-mean", denominator=None, **params)``
with all tensors [B, T] (advantages already broadcast to tokens). It returns the loss (a scalar
with grad, to minimise) and a dict of python-float metrics computed over the masked tokens.
Each loss names its own params, so a misspelt one fails with a TypeError.
Off-policy diagnostics, where reported: ``ratio_mean`` is the masked mean of
pi/pi_old, and ``approx_kl`` is the masked mean of the k3 estimator of KL(pi_old || pi),
(r - 1) - log r with r = pi/pi_old (as in CleanRL/verl), which is >= 0.
"""

from __future__ import annotations

import torch

from r3l.algorithms.aggregation import aggregate
from r3l.registry import Registry

POLICY_LOSSES: Registry = Registry("policy loss")

# log-ratios beyond this are clamped before exp() so a stale sample cannot overflow to inf.
_MAX_LOG_RATIO = 20.0


def _check(logprobs: torch.Tensor, mask: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, tensor in others.items():
        if tensor is not None and tensor.shape != logprobs.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} must have the shape of logprobs {tuple(logprobs.shape)}")
    if mask.shape != logprobs.shape:
        raise ValueError(f"mask {tuple(mask.shape)} must have the shape of logprobs {tuple(logprobs.shape)}")


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A metric's token mean, left on the device (the learner reads its sums once per update)."""
    return aggregate(values.detach().float(), mask, "token-mean")


def _off_policy_metrics(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        log_ratio = (logprobs - old_logprobs).float().clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        ratio = log_ratio.exp()
        return {
            "ratio_mean": _masked_mean(ratio, mask),
            "approx_kl": _masked_mean((ratio - 1) - log_ratio, mask),
        }


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    denominator: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO/GRPO clipped surrogate: -min(r*A, clip(r, 1-clip_low, 1+clip_high)*A), r = exp(logp - old_logp).

    ``clip_high`` > ``clip_low`` is DAPO's clip-higher. ``dual_clip`` = c > 1 (Dual-clip PPO) caps
    the per-token loss of negative-advantage tokens at c*|A|.
    Metrics: ``clip_fraction`` (masked tokens where the clipped term is chosen, so the gradient is 0),
    ``dual_clip_fraction`` (only with dual_clip), ``ratio_mean``, ``approx_kl`` (k3, see module doc).
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"ppo_clip needs 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"ppo_clip: dual_clip must be > 1 (or None), got {dual_clip}")

    log_ratio = (logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    metrics = {"clip_fraction": _masked_mean((clipped > unclipped).float(), mask)}
    if dual_clip is not None:
        cap = -advantages * dual_clip
        capped = (advantages < 0) & (per_token > cap)
        per_token = torch.where(capped, cap, per_token)
        metrics["dual_clip_fraction"] = _masked_mean(capped.float(), mask)

    loss = aggregate(per_token, mask, aggregation, denominator)
    metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): one importance ratio per sequence, length-normalised,
    s = exp(mean over the sequence's trained tokens of (logp - old_logp)), clipped per sequence:
    -min(s*A, clip(s, 1-clip_low, 1+clip_high)*A), averaged over sequences (`seq-mean-token-mean`, the paper's).

    Written token by token as GSPO-token: each trained token carries s_t = sg(s) * pi/sg(pi), whose value is s and
    whose gradient is s * grad logp_t, so the sequence mean of the token terms has GSPO's gradient; the clip decision
    is the sequence's (every token of a clipped sequence gets no gradient). Per-token advantages are used as given
    (constant along a sequence for GRPO's). The paper's clip range is tiny (3e-4, 4e-4): the ratio is a geometric
    mean. Metrics: ``clip_fraction`` (share of trained tokens in clipped sequences), ``ratio_mean``, ``approx_kl``.
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"gspo needs 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    active = mask != 0
    weights = mask.to(logprobs.dtype)
    token_log_ratio = torch.where(active, logprobs - old_logprobs, torch.zeros_like(logprobs))
    lengths = weights.sum(dim=-1).clamp(min=1.0)
    sequence_log_ratio = ((token_log_ratio * weights).sum(dim=-1) / lengths).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    sequence_ratio = sequence_log_ratio.exp()
    own = torch.where(active, logprobs - logprobs.detach(), torch.zeros_like(logprobs))
    token_ratio = sequence_ratio.detach()[..., None] * own.exp()  # value s, gradient s * grad logp_t
    unclipped = -advantages * token_ratio
    clipped = -advantages * token_ratio.clamp(1 - clip_low, 1 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    loss = aggregate(per_token, mask, aggregation, denominator)
    metrics = {"clip_fraction": _masked_mean((clipped > unclipped).float(), mask)}
    metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


@POLICY_LOSSES.register("policy_shaping")
def policy_shaping(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    denominator: float | None = None,
    gamma: float = 0.1,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Policy shaping for off-policy tokens (LUFFY, arXiv 2504.14945; Critique-GRPO's refinements, arXiv
    2506.03106): aggregate(-A * f(p)), f(p) = p / (p + gamma), p = exp(logp). No ratio to a behaviour policy and no
    clip: the refinement was sampled under a critique the trained context does not hold. f's gradient,
    gamma p / (p + gamma)^2 * grad logp, lifts the tokens the policy finds unlikely more than plain -A logp would.
    Metric ``probability``: the masked token-mean of p (logged as shaped_probability for the refinements).
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if not gamma > 0:
        raise ValueError(f"policy_shaping: gamma must be > 0, got {gamma}")
    probability = logprobs.clamp(max=0.0).exp()
    loss = aggregate(-advantages * probability / (probability + gamma), mask, aggregation, denominator)
    metrics = {"probability": _masked_mean(probability, mask)}
    if old_logprobs is not None:
        metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


@POLICY_LOSSES.register("opmd")
def opmd(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    denominator: float | None = None,
    tau: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """R3L / OPMD: aggregate(-A * logp) / (1 + tau); no importance ratio, no clipping.

    ``old_logprobs`` is only used for the ``ratio_mean``/``approx_kl`` diagnostics and may be None.
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if not tau > -1:
        raise ValueError(f"opmd: tau must be > -1, got {tau}")
    loss = aggregate(-advantages * logprobs, mask, aggregation, denominator) / (1 + tau)
    metrics = {} if old_logprobs is None else _off_policy_metrics(logprobs, old_logprobs, mask)
    return loss, metrics


@POLICY_LOSSES.register("sft")
def sft(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor | None,
    mask: torch.Tensor,
    *,
    aggregation: str = "token-mean",
    denominator: float | None = None,
    weighted: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood aggregate(-logp); with ``weighted=True``, aggregate(-A * logp) (RAFT).

    ``advantages`` is ignored unless weighted; ``old_logprobs`` only feeds diagnostics. Both may be None.
    Metric ``nll``: the unweighted masked token-mean of -logp.
    """
    _check(logprobs, mask, old_logprobs=old_logprobs, advantages=advantages)
    if weighted:
        if advantages is None:
            raise ValueError("sft with weighted=True needs advantages (the per-token weights)")
        per_token = -advantages * logprobs
    else:
        per_token = -logprobs
    loss = aggregate(per_token, mask, aggregation, denominator)
    metrics = {"nll": _masked_mean(-logprobs, mask)}
    if old_logprobs is not None:
        metrics.update(_off_policy_metrics(logprobs, old_logprobs, mask))
    return loss, metrics


# Losses whose every term is multiplied by the advantage: an experience with advantage 0 adds exactly
# zero gradient, so a learner may skip its forward and backward pass (keeping the normaliser).
ppo_clip.advantage_weighted = True
opmd.advantage_weighted = True
gspo.advantage_weighted = True
policy_shaping.advantage_weighted = True
