"""Algorithms as small pure tensor functions in registries: advantages, policy losses, KL, entropy."""

from r3l.algorithms.advantages import ADVANTAGES, assign_advantages, group_mean
from r3l.algorithms.aggregation import AGGREGATIONS, aggregate
from r3l.algorithms.entropy import entropy_from_logits, token_logprobs
from r3l.algorithms.gspo import gspo
from r3l.algorithms.kl import KL_ESTIMATORS, kl_penalty
from r3l.algorithms.losses import POLICY_LOSSES
from r3l.algorithms.policy_shaping import critique_grpo

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "aggregate",
    "critique_grpo",
    "assign_advantages",
    "entropy_from_logits",
    "gspo",
    "group_mean",
    "kl_penalty",
    "token_logprobs",
]
