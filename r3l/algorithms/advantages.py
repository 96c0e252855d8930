"""Advantage functions: per-experience scalar advantages from rewards compared within groups.

Every function has the signature ``fn(rewards [N] float, group_ids [N] int64, **params) -> [N]``.
Group ids may be any integers (they need not be contiguous or sorted). A group whose rewards are
all equal gets advantage exactly 0 (no float rounding of the mean leaks through). A group of size one
has no baseline to compare against and gets 0 by default; `singleton="reward"` gives it the R3L
reference's baseline of 0 instead, so its advantage is its reward (docs/FIDELITY.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from r3l.errors import UserError
from r3l.experience import GROUP_OBJECTIVES
from r3l.registry import Registry

if TYPE_CHECKING:
    from r3l.experience import Experience

ADVANTAGES: Registry = Registry("advantage function")


def _check(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length; "
            f"got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if group_ids.is_floating_point() or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    return rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())


def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Map arbitrary group ids to 0..G-1; return (index [N], count per group [G] as float)."""
    _, index = torch.unique(group_ids, return_inverse=True)
    counts = torch.bincount(index).to(torch.float64)
    return index, counts


def _group_sum(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, index, values)


def group_mean(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """The mean of each element's group, broadcast back to shape [N]."""
    values = _check(values, group_ids)
    index, counts = _group_index(group_ids)
    sums = _group_sum(values, index, counts.numel())
    return (sums / counts.to(values.dtype))[index]


def group_spread(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """max - min of each element's group, broadcast back to shape [N]."""
    values = _check(values, group_ids)
    index, counts = _group_index(group_ids)
    empty = torch.zeros(counts.numel(), dtype=values.dtype, device=values.device)
    highest = empty.scatter_reduce(0, index, values, reduce="amax", include_self=False)
    lowest = empty.scatter_reduce(0, index, values, reduce="amin", include_self=False)
    return (highest - lowest)[index]


SINGLETON_RULES = ("zero", "reward")


def centred(rewards: torch.Tensor, group_ids: torch.Tensor, singleton: str = "zero") -> torch.Tensor:
    """r - group mean; exactly 0 where a group's rewards are all equal. `singleton="reward"`: a group of one is
    compared with 0 (the R3L reference's baseline), so it keeps its reward."""
    if singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton must be one of {', '.join(map(repr, SINGLETON_RULES))}, got {singleton!r}")
    rewards = _check(rewards, group_ids)
    out = torch.where(
        group_spread(rewards, group_ids) == 0, torch.zeros_like(rewards), rewards - group_mean(rewards, group_ids)
    )
    if singleton == "reward":
        out = torch.where(group_size(group_ids) == 1, rewards, out)
    return out


def group_size(group_ids: torch.Tensor) -> torch.Tensor:
    """The size of each element's group, broadcast back to shape [N] (int64)."""
    index, counts = _group_index(group_ids)
    return counts.to(torch.int64)[index]


def group_std(values: torch.Tensor, group_ids: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Each element's group standard deviation, shape [N]; 0 for groups too small to have one."""
    values = _check(values, group_ids)
    index, counts = _group_index(group_ids)
    counts = counts.to(values.dtype)
    mean = (_group_sum(values, index, counts.numel()) / counts)[index]
    squares = _group_sum((values - mean) ** 2, index, counts.numel())
    dof = counts - 1 if unbiased else counts
    var = torch.where(dof > 0, squares / dof.clamp(min=1), torch.zeros_like(squares))
    return var.sqrt()[index]


@ADVANTAGES.register("grpo")
def grpo(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eps: float = 1e-6,
    std: str = "unbiased",
    singleton: str = "zero",
) -> torch.Tensor:
    """GRPO: (r - group mean) / (group std + eps).

    ``std="unbiased"`` (default, divides by n-1 like ``torch.std`` and TRL) or ``"biased"`` (divides by n).
    A group whose rewards are all equal gets exactly 0; a group of one too, unless ``singleton="reward"``
    (the reference: mean 0, std 1, so r / (1 + eps)).
    """
    if std not in ("unbiased", "biased"):
        raise ValueError(f"grpo: std must be 'unbiased' or 'biased', got {std!r}")
    rewards = _check(rewards, group_ids)
    spread = group_std(rewards, group_ids, unbiased=(std == "unbiased"))
    if singleton == "reward":
        spread = torch.where(group_size(group_ids) == 1, torch.ones_like(spread), spread)
    return centred(rewards, group_ids, singleton) / (spread + eps)


@ADVANTAGES.register("grpo_no_std")
def grpo_no_std(rewards: torch.Tensor, group_ids: torch.Tensor, *, singleton: str = "zero") -> torch.Tensor:
    """Dr. GRPO: r - group mean (no division by the standard deviation)."""
    return centred(rewards, group_ids, singleton)


@ADVANTAGES.register("rloo")
def rloo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO: r_i - mean of the *other* members of its group, i.e. n/(n-1) * (r_i - mean); 0 for n = 1."""
    rewards = _check(rewards, group_ids)
    n = group_size(group_ids).to(rewards.dtype)
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))
    return scale * centred(rewards, group_ids)


@ADVANTAGES.register("positive_amplified")
def positive_amplified(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    alpha: float = 3.0,
    success_value: float = 1.0,
    success_threshold: float = 1.0,
    singleton: str = "zero",
) -> torch.Tensor:
    """R3L positive amplification on A = r - group mean (no std).

    Â = success_value if r >= success_threshold; alpha * A if A > 0; A otherwise.
    (The released R3L code uses success_value = 1.0; the paper's text uses alpha.)
    """
    rewards = _check(rewards, group_ids)
    advantage = centred(rewards, group_ids, singleton)
    amplified = torch.where(advantage > 0, alpha * advantage, advantage)
    return torch.where(rewards >= success_threshold, torch.full_like(advantage, success_value), amplified)


@ADVANTAGES.register("opmd")
def opmd(rewards: torch.Tensor, group_ids: torch.Tensor, *, singleton: str = "zero") -> torch.Tensor:
    """OPMD baseline: r - group mean (numerically the same as grpo_no_std; its own name for presets)."""
    return grpo_no_std(rewards, group_ids, singleton=singleton)


@ADVANTAGES.register("raft")
def raft(rewards: torch.Tensor, group_ids: torch.Tensor, *, success_threshold: float = 1.0) -> torch.Tensor:
    """RAFT: 1 for successes (r >= success_threshold), 0 otherwise; pair it with the weighted SFT loss."""
    rewards = _check(rewards, group_ids)
    return (rewards >= success_threshold).to(rewards.dtype)


def checked_advantages(
    name: str, args: dict, rewards: torch.Tensor | None = None, group_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The advantage function `name` with `args` (on one dummy reward when none are given, to check the
    settings before a run starts); bad settings are one UserError line."""
    if rewards is None or group_ids is None:
        rewards, group_ids = torch.zeros(2), torch.tensor([0, 0])
    try:
        return ADVANTAGES.get(name)(rewards, group_ids, **args)
    except (TypeError, ValueError) as error:
        raise UserError(f"bad algorithm.advantage_args for '{name}': {error}") from None


def assign_advantages(experiences: Sequence[Experience], name: str, args: dict) -> None:
    """Set the advantage of every experience that competes in its group (objective "policy" or "shaped") from the
    group's rewards, in place. Experiences with objective "sft" compete with no group: their advantage is the
    weight the strategy set.
    """
    experiences = [e for e in experiences if e.objective in GROUP_OBJECTIVES]
    if not experiences:
        return
    group_index: dict[str, int] = {}
    group_ids = torch.tensor([group_index.setdefault(e.group, len(group_index)) for e in experiences])
    rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)
    advantages = checked_advantages(name, args, rewards, group_ids)
    for experience, value in zip(experiences, advantages.tolist()):
        experience.advantage = float(value)
