"""The update-size guard: the share of (sampled) weights an update changed and its RMS against the weights', in
the learner's metrics every step, and a one-line warning naming the cause when an update changes almost
nothing (bf16 weights at lr 1e-6 round Adam's step away)."""

import copy
import math

import pytest
import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.learner.learner import Learner
from r3l.learner.optimizer import StochasticRoundingAdamW
from r3l.learner.update_size import (
    WeightSample,
    changed_share,
    relative_rms,
    sample_indices,
    update_metrics,
    update_size_warning,
    update_sums,
)
from tests.test_shared_prefix import batch_of_groups


def test_changed_share_and_relative_rms_by_hand():
    before = torch.tensor([1.0, -2.0, 2.0, 1.0])
    after = torch.tensor([1.0, -2.0, 2.5, 0.5])
    assert changed_share(before, after).item() == 0.5
    # change (0, 0, 0.5, -0.5): RMS sqrt(0.5 / 4); weights: RMS sqrt(10 / 4); ratio sqrt(0.05)
    assert relative_rms(before, after).item() == pytest.approx(math.sqrt(0.05))
    sums = update_sums(before, after)
    assert {key: float(value) for key, value in sums.items()} == {
        "elements": 4.0,
        "changed": 2.0,
        "delta_sq": 0.5,
        "weight_sq": 10.0,
    }
    metrics = update_metrics({key: float(value) for key, value in sums.items()}, lr=0.01)
    assert metrics["update/changed_share"] == 0.5
    assert metrics["update/relative_rms"] == pytest.approx(math.sqrt(0.05))
    assert metrics["update/lr_over_weight_rms"] == pytest.approx(0.01 / math.sqrt(2.5))
    assert update_metrics({"elements": 0.0}, lr=0.01) == {}


def test_sampled_indices_are_fixed_and_cover_a_small_parameter():
    assert sample_indices(5, 8, seed=1).tolist() == [0, 1, 2, 3, 4]
    drawn = sample_indices(10**9, 8, seed=3)  # no permutation of a billion elements
    assert drawn.shape == (8,) and int(drawn.max()) < 10**9
    assert torch.equal(drawn, sample_indices(10**9, 8, seed=3))


def adam_steps(dtype: torch.dtype, steps: int = 10, lr: float = 1e-6) -> tuple[float, float]:
    """(changed share of all elements, of the watched sample) after `steps` AdamW steps on a 512x512 Linear at
    std 0.02 in `dtype`."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(512, 512, bias=False)
    torch.nn.init.normal_(layer.weight, std=0.02)
    layer = layer.to(dtype)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    sample = WeightSample(layer.parameters())
    whole = layer.weight.detach().clone()
    before = sample.read()
    inputs = torch.randn(64, 512, dtype=dtype)
    for _ in range(steps):
        optimizer.zero_grad()
        layer(inputs).float().pow(2).mean().backward()
        optimizer.step()
    sums = {key: float(value) for key, value in sample.sums(before).items()}
    return changed_share(whole, layer.weight.detach()).item(), update_metrics(sums, lr)["update/changed_share"]


def test_bf16_weights_at_lr_1e6_barely_move_and_the_sample_says_so():
    whole, sampled = adam_steps(torch.bfloat16)
    assert whole < 0.05 and sampled < 0.1  # ~2 % of bf16 weights change in 10 steps
    whole, sampled = adam_steps(torch.float32)
    assert whole > 0.99 and sampled > 0.99


def warning_for(metrics):
    base = {"grad_norm": 1.0, "nonfinite_update": 0.0, "lr": 1e-6, "update/lr_over_weight_rms": 5e-5}
    return update_size_warning({**base, **metrics})


def test_the_warning_names_the_cause():
    assert warning_for({"update/changed_share": 0.9}) is None
    assert warning_for({"update/changed_share": 0.02, "grad_norm": 0.0}) is None  # nothing to apply
    assert warning_for({"update/changed_share": 0.02, "nonfinite_update": 1.0}) is None  # dropped, said elsewhere
    bf16 = warning_for({"update/changed_share": 0.02, "update/low_precision": 1.0})
    assert bf16.startswith("the update changed 2.0% of the sampled weights") and "bf16" in bf16
    tiny_lr = warning_for({"update/changed_share": 0.0, "update/lr_over_weight_rms": 1e-9})
    assert "lr" in tiny_lr and "RMS" in tiny_lr
    assert "no step" in warning_for({"update/changed_share": 0.01})


def test_the_learner_logs_the_update_size_each_finite_update(tiny):
    model, tokenizer = tiny
    learner = Learner(
        copy.deepcopy(model), tokenizer, AlgorithmConfig(), TrainConfig(lr=1e-3), temperature=1.0, autocast_bf16=False
    )
    metrics = learner.update(batch_of_groups())
    assert metrics["update/changed_share"] > 0.5  # the unused embedding rows get no step
    assert 0 < metrics["update/relative_rms"] < 1 and metrics["update/low_precision"] == 0.0
    assert update_size_warning(metrics) is None


def test_a_bf16_policy_at_lr_1e6_is_named_under_torchs_adamw_and_moves_under_stochastic_rounding(tiny):
    model, tokenizer = tiny
    policy = copy.deepcopy(model).to(torch.bfloat16)
    learner = Learner(policy, tokenizer, AlgorithmConfig(), TrainConfig(lr=1e-6), temperature=1.0, autocast_bf16=False)
    assert isinstance(learner.optimizer, StochasticRoundingAdamW)  # the learner's own choice for bf16 weights
    before = {name: p.detach().float().clone() for name, p in policy.named_parameters()}
    for _ in range(10):
        metrics = learner.update(batch_of_groups())
    assert metrics["update/stochastic_rounding"] == 1.0 and update_size_warning(metrics) is None
    moved = sum((p.detach().float() != before[n]).sum().item() for n, p in policy.named_parameters())
    assert moved > 0.05 * sum(p.numel() for p in policy.parameters())  # ten updates at lr 1e-6 move bf16 weights

    learner.optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
    metrics = learner.update(batch_of_groups())  # torch's AdamW on bf16 weights: the failure the guard names
    assert metrics["update/changed_share"] < 0.1 and metrics["update/low_precision"] == 1.0
    assert metrics["update/stochastic_rounding"] == 0.0
    warning = update_size_warning(metrics)
    assert warning is not None and "bf16" in warning
