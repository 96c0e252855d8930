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

from collections.abc import Mapping, Sequence

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


def gap_sums_by_kind(
    learner_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    token_kinds: torch.Tensor,
    kinds: Sequence[str],
) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per kind (`token_kinds` holds indices into `kinds`): (tokens, sum of |log pi - log mu|, its maximum) over
    the masked tokens of that kind, 0-dim tensors on the inputs' device (masked, not selected, as above)."""
    with torch.no_grad():
        gap = (learner_logprobs.float() - behaviour_logprobs.float()).abs()
        sums = {}
        for code, kind in enumerate(kinds):
            chosen = (mask > 0) & (token_kinds == code)
            masked = torch.where(chosen, gap, 0.0)
            peak = masked.max() if masked.numel() else masked.new_zeros(())
            sums[kind] = (chosen.float().sum(), masked.sum(), peak)
        return sums


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """Pops the learner's ``mismatch:*`` sums and turns them into per-token metrics: the behaviour-vs-learner
    gap (mean; per kind of token from ``mismatch:<kind>/tokens`` and ``mismatch:<kind>/gap``), the KL(mu || pi)
    estimate, the share of tokens whose ratio left the band and, with a correction on, the mean weight and the
    share of tokens it dropped."""
    found = {key.split(":", 1)[1]: sums.pop(key) for key in [k for k in sums if k.startswith("mismatch:")]}
    metrics = {}
    for key in sorted(k for k in found if k.endswith("/tokens")):
        kind = key[: -len("/tokens")]
        if found[key] > 0:
            metrics[f"generator_logprob_gap/{kind}"] = found.get(f"{kind}/gap", 0.0) / found[key]
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


GAP_WARNING = 0.1  # nats: a kind's mean gap above it is warned about (see logprob_gap_warning)
GAP_WARNING_RATIO = 10.0  # ... and so is one this many times another kind's, once it is above GAP_WARNING_FLOOR
GAP_WARNING_FLOOR = 0.01


def logprob_gap_warning(metrics: Mapping[str, float]) -> str | None:
    """One line when a kind of token's learner-vs-sampler log-prob gap (``generator_logprob_gap/<kind>``) is above
    GAP_WARNING, or above GAP_WARNING_FLOOR and GAP_WARNING_RATIO times another kind's: its tokens were scored
    at another temperature or by other weights than they were sampled with. None otherwise."""
    prefix = "generator_logprob_gap/"
    gaps = {key[len(prefix) :]: value for key, value in metrics.items() if key.startswith(prefix)}
    for kind, gap in sorted(gaps.items(), key=lambda item: -item[1]):
        lowest = min((other for name, other in gaps.items() if name != kind), default=None)
        far_above = lowest is not None and gap > GAP_WARNING_FLOOR and gap > GAP_WARNING_RATIO * lowest
        if gap > GAP_WARNING or far_above:
            others = ", ".join(f"{name} {value:.3g}" for name, value in sorted(gaps.items()) if name != kind)
            return (
                f"the learner scores {kind} tokens {gap:.3g} nats (mean) away from the log-probs they were sampled "
                f"with{f' (other tokens: {others})' if others else ''}: a temperature or weight-sync mismatch"
            )
    return None
