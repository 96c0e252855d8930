"""Per-token KL estimators between the policy and a reference, from samples of the policy.

With x ~ pi (the sampled tokens) and log r = logp_ref - logp (Schulman, "Approximating KL
Divergence", 2020, http://joschu.net/blog/kl-approx.html), estimating KL(pi || pi_ref):

- k1 = logp - logp_ref = -log r: unbiased, high variance, can be negative per token.
- k2 = 0.5 * (logp - logp_ref)^2: biased (low bias when the policies are close), low variance,
  always >= 0. Its gradient equals the gradient of KL(pi || pi_ref) in expectation on-policy.
- k3 = r - log r - 1 = exp(logp_ref - logp) - (logp_ref - logp) - 1: unbiased, low variance,
  always >= 0 (the "low_var_kl" of verl / GRPO paper).

The learner skips the reference pass entirely when the KL coefficient is 0; nothing here
assumes a reference exists.
"""

from __future__ import annotations

import torch

from r3l.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")

# exp() of a larger log-ratio would overflow; beyond it k3 is clamped (its value is huge anyway).
_MAX_LOG_RATIO = 20.0


@KL_ESTIMATORS.register("k1")
def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """logp - logp_ref (unbiased)."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2")
def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """0.5 * (logp - logp_ref)^2 (biased, low variance, >= 0)."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """exp(logp_ref - logp) - (logp_ref - logp) - 1 (unbiased, low variance, >= 0)."""
    log_ratio = (ref_logprobs - logprobs).clamp(max=_MAX_LOG_RATIO)
    return torch.expm1(log_ratio) - log_ratio


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k2") -> torch.Tensor:
    """Per-token KL estimate [B, T] of the policy from the reference with estimator ``kind`` (k1 | k2 | k3)."""
    estimator = KL_ESTIMATORS.get(kind)
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} must have the same shape"
        )
    return estimator(logprobs, ref_logprobs)
