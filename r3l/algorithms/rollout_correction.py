"""Engine/learner mismatch: how far the generator's log-probabilities are from the learner's, and the
importance weights that correct the policy gradient for it (truncated or masked importance sampling).

The generator (HF in another precision, vLLM, a stale worker) samples from a behaviour policy mu that is not
exactly the learner's pi_old. Per trained token, with log-ratio d = log pi_old - log mu:
- ``none``: weight 1 (no correction);
- ``tis``: truncated importance sampling, weight min(e^d, C);
- ``mis``: masked importance sampling, weight e^d where e^d <= C and 0 beyond (the token is dropped).
A weight multiplies the token's advantage; every policy loss here is linear in a non-negative factor on the
advantage, so that is the same as weighting the token's loss. When mu = pi_old every weight is 1.
"""

from __future__ import annotations

import torch

from r3l.registry import Registry

ROLLOUT_CORRECTIONS: Registry = Registry("rollout correction")

_MAX_LOG_RATIO = 20.0  # e^20 overflows nothing in float32; beyond it a ratio is clamped before exp()


def _ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio.float().clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()


@ROLLOUT_CORRECTIONS.register("none")
def no_correction(log_ratio: torch.Tensor, threshold: float) -> torch.Tensor:
    return torch.ones_like(log_ratio, dtype=torch.float32)


@ROLLOUT_CORRECTIONS.register("tis")
def truncated_importance_weights(log_ratio: torch.Tensor, threshold: float) -> torch.Tensor:
    return _ratio(log_ratio).clamp(max=threshold)


@ROLLOUT_CORRECTIONS.register("mis")
def masked_importance_weights(log_ratio: torch.Tensor, threshold: float) -> torch.Tensor:
    ratio = _ratio(log_ratio)
    return torch.where(ratio <= threshold, ratio, torch.zeros_like(ratio))


def mismatch_sums(
    learner_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, band: float
) -> dict[str, torch.Tensor]:
    """Sums over the masked tokens, to be divided by their count (``tokens``) once every micro-batch is in:
    ``gap`` |log pi - log mu|, ``kl`` the k3 estimate of KL(mu || pi) (tokens were sampled from mu, so
    E_mu[(r - 1) - log r] with r = pi / mu, >= 0 per token), ``outside`` tokens whose ratio leaves
    [1/band, band]; ``gap_max`` is a maximum, not a sum. 0-dim tensors on the inputs' device, computed by
    masking rather than selecting (a selection's size is read from the device)."""
    with torch.no_grad():
        chosen = mask > 0
        selected = chosen.float()
        log_ratio = torch.where(chosen, learner_logprobs.float() - behaviour_logprobs.float(), 0.0)
        ratio = _ratio(log_ratio)  # 1 where not selected: adds nothing to either sum below
        clamped = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        gap = log_ratio.abs()
        return {
            "tokens": selected.sum(),
            "gap": gap.sum(),
            "kl": ((ratio - 1) - clamped).sum(),
            "outside": (((ratio > band) | (ratio < 1 / band)).float() * selected).sum(),
            "gap_max": gap.max() if gap.numel() else gap.new_zeros(()),
        }


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """Pops the learner's ``mismatch:*`` sums and turns them into per-token metrics: the behaviour-vs-learner
    gap (mean), the KL(mu || pi) estimate, the share of tokens whose ratio left the band and, with a correction
    on, the mean weight and the share of tokens it dropped."""
    found = {key.split(":", 1)[1]: sums.pop(key) for key in [k for k in sums if k.startswith("mismatch:")]}
    metrics = {}
    tokens = found.get("tokens", 0.0)
    if tokens > 0:
        metrics.update(
            {
                "generator_logprob_gap": found.get("gap", 0.0) / tokens,
                "generator_kl": found.get("kl", 0.0) / tokens,
                "generator_ratio_outside": found.get("outside", 0.0) / tokens,
            }
        )
    weighted = found.get("weight_tokens", 0.0)
    if weighted > 0:
        metrics.update(
            {
                "rollout_correction_weight": found.get("weight", 0.0) / weighted,
                "rollout_correction_dropped": found.get("dropped", 0.0) / weighted,
            }
        )
    return metrics
