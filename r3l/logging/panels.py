"""Which metric goes in which panel of a run's plots, and how the panel draws it: keys are told apart by their
words (a training success rate, a held-out reward, a quantity measured by the optimizer step)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def key_tokens(key: str) -> list[str]:
    return [t for t in re.split(r"[/_.\-\s]+", key.lower()) if t]


def held_out(key: str) -> bool:
    return key.startswith("eval/")


REFLECTION_KEYS = (
    "valid_report_rate",
    "retry_success",
    "retry_improvement_rate",
    "pivot_relative_mean",
    "pivot_zero_fraction",
    "retry_slots_unused",
)


def update_key(key: str) -> bool:
    """The loss and the gradient norm: on a step without an update they are null (dropped) or 0 by construction
    (no learning signal), never a measurement, and are drawn as gaps."""
    return key.endswith("loss") or key == "grad_norm"


def success_rate(key: str) -> bool:
    """A training success rate (not a count such as retry_successes, not the R3L retry panel's retry_success)."""
    tokens = key_tokens(key)
    return (
        not held_out(key)
        and key not in REFLECTION_KEYS
        and bool(tokens)
        and (tokens[-1] == "success" or tokens[-2:] == ["success", "rate"])
    )


def training_reward(key: str) -> bool:
    tokens = key_tokens(key)
    return not held_out(key) and bool(tokens) and (tokens[-1] == "reward" or tokens[-2:] == ["reward", "mean"])


def held_out_success(key: str) -> bool:
    return held_out(key) and key_tokens(key)[-1] == "success"


@dataclass(frozen=True)
class Panel:
    name: str  # file stem
    title: str
    ylabel: str
    matches: Callable[[str], bool]
    robust_scale: bool = False  # y-range from the bulk of the values, so rare spikes do not flatten the rest
    hide_zero: bool = False  # leave out metrics that are 0 at every step (KL with KL off, on-policy approx_kl)
    hide_one: bool = False  # leave out metrics that are 1 at every step (the on-policy importance ratio)
    unit_range: bool = False  # a share or rate: the y-axis spans [0, 1], so small changes are not blown up
    smooth: bool = True  # a centred moving average drawn over the per-step points (levels and counters: no)
    update: bool = False  # measured by the optimizer step: steps without an update are shaded
    from_zero: bool = False  # a level or a count: the y-axis starts at 0 (a constant learning rate looks flat)


PANELS: list[Panel] = [
    Panel("reward", "training reward (sampled)", "mean reward", training_reward),
    Panel("success", "training success (sampled)", "success rate", success_rate, unit_range=True),
    Panel(
        "held_out",
        "held-out success (bars: 95% Wilson)",
        "held-out success",
        held_out_success,
        unit_range=True,
        smooth=False,
    ),
    Panel(
        "held_out_reward",
        "held-out mean reward",
        "mean reward",
        lambda k: held_out(k) and key_tokens(k)[-1] == "reward",
        smooth=False,
    ),
    Panel(
        "zero_variance",
        "groups without a learning signal (all rewards equal)",
        "share of groups",
        lambda k: k == "zero_variance_groups",
        unit_range=True,
    ),
    Panel("loss", "loss", "loss", lambda k: "loss" in k.lower(), update=True),
    Panel(
        "kl", "KL", "KL", lambda k: any(re.fullmatch(r"kl\d*", t) for t in key_tokens(k)), hide_zero=True, update=True
    ),
    Panel(
        "clip_fraction",
        "clipped share of tokens",
        "share of tokens",
        lambda k: k.endswith("clip_fraction"),
        hide_zero=True,
        update=True,
    ),
    Panel(
        "ratio",
        "importance ratio (new / old policy)",
        "ratio",
        lambda k: k.startswith("ratio_"),
        hide_one=True,
        update=True,
    ),
    Panel("entropy", "entropy", "nats per token", lambda k: "entropy" in k.lower(), update=True),
    Panel(
        "tokens_per_s",
        "tokens/s",
        "tokens per second",
        lambda k: any(s in k.lower() for s in ("tokens_per_s", "tokens/s", "tok_per_s")),
        robust_scale=True,
    ),
    Panel(
        "grad_norm",
        "grad norm",
        "gradient norm (before clipping)",
        lambda k: any(s in k.lower() for s in ("grad_norm", "gradnorm", "grad/norm")),
        update=True,
    ),
    Panel(
        "lr",
        "learning rate",
        "learning rate",
        lambda k: ("lr" in key_tokens(k) or "learning_rate" in k.lower()) and not k.startswith("update/"),
        smooth=False,
        from_zero=True,
    ),
    Panel(
        "response_length",
        "response length",
        "tokens",
        lambda k: bool({"length", "len"} & set(key_tokens(k))) or "response_len" in k.lower(),
    ),
    Panel(
        "seconds",
        "time per step",
        "seconds",
        lambda k: k in ("step_seconds", "rollout_seconds", "train_seconds", "eval/seconds"),
        from_zero=True,
    ),
    Panel(
        "memory",
        "memory (resident set size of the trainer process)",
        "MiB",
        lambda k: k in ("rss_mib", "peak_rss_mib"),
        smooth=False,
        from_zero=True,
    ),
    Panel("reflection", "R3L: reports, retries, pivots", "rate / mean", lambda k: k in REFLECTION_KEYS),
    Panel(
        "termination",
        "how episodes ended",
        "share of episodes",
        lambda k: k.startswith("termination/"),
        unit_range=True,
    ),
    Panel(
        "hack_watch",
        "reward-hacking watch: rewarded answers that copy the prompt, paid endings on rejected moves",
        "share of episodes",
        lambda k: k.endswith(("hack/prompt_copies", "hack/rewarded_rejected_endings")),
        unit_range=True,
        smooth=False,
    ),
    Panel(
        "update_changed",
        "guard: share of sampled weights an update changed (bf16 rounding, a tiny lr: near 0)",
        "share of weights",
        lambda k: k == "update/changed_share",
        unit_range=True,
        smooth=False,
        update=True,
    ),
    Panel(
        "update_rms",
        "guard: update RMS / weight RMS",
        "ratio",
        lambda k: k == "update/relative_rms",
        smooth=False,
        update=True,
        from_zero=True,
    ),
    Panel(
        "logprob_gap",
        "guard: learner - sampler log-prob gap by kind of token (a temperature or sync mismatch: one kind jumps)",
        "nats per token",
        lambda k: k.startswith("generator_logprob_gap"),
        smooth=False,
        update=True,
        from_zero=True,
    ),
    Panel(
        "lora_base",
        "guard: LoRA base weights changed since the start (1: drifted)",
        "changed",
        lambda k: k == "lora/base_changed",
        unit_range=True,
        smooth=False,
    ),
    Panel(
        "nonfinite",
        "non-finite updates (dropped), running count",
        "count",
        lambda k: k == "nonfinite_updates",
        smooth=False,
        from_zero=True,
    ),
]
