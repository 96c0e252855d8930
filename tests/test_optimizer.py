"""The learner's optimizer: bf16 weights move at lr 1e-6 under stochastic rounding (they do not under torch's
AdamW), the rounding is unbiased and exact on hand-computed bit patterns, and the fp32 arithmetic is AdamW's."""

import copy

import pytest
import torch

from r3l.learner.optimizer import (
    StochasticRoundingAdamW,
    adamw_step,
    build_optimizer,
    stochastic_round_to_bf16,
)

ONE_AND_A_HALF_STEP = 1 + 2**-8  # half-way between bf16's 1.0 and 1 + 2^-7: its dropped low bits are 2^15


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_value_half_way_rounds_down_below_the_threshold_and_up_from_it(sign):
    value = torch.tensor([sign * ONE_AND_A_HALF_STEP])
    down = stochastic_round_to_bf16(value, torch.tensor([2**15 - 1], dtype=torch.int32))
    up = stochastic_round_to_bf16(value, torch.tensor([2**15], dtype=torch.int32))
    assert down.item() == sign * 1.0
    assert up.item() == sign * (1 + 2**-7)


def test_a_value_bf16_holds_exactly_never_moves_and_non_finite_values_stay():
    values = torch.tensor([1.0, -0.5, 0.0, float("inf"), float("-inf"), float("nan")])
    for noise in (0, 1, 2**16 - 1):
        rounded = stochastic_round_to_bf16(values, torch.full(values.shape, noise, dtype=torch.int32))
        assert rounded[:5].tolist() == [1.0, -0.5, 0.0, float("inf"), float("-inf")]
        assert rounded[5].isnan()


def test_stochastic_rounding_is_unbiased():
    value = torch.full((200_000,), 1 + 2**-9)  # a quarter of the way to the next bf16 value
    noise = torch.randint(0, 2**16, value.shape, dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    rounded = stochastic_round_to_bf16(value, noise).float()
    assert set(rounded.unique().tolist()) == {1.0, 1 + 2**-7}
    assert (rounded == 1 + 2**-7).float().mean().item() == pytest.approx(0.25, abs=0.01)


def test_the_fp32_arithmetic_is_torch_adamw():
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(64, generator=generator)
    reference = weights.clone().requires_grad_(True)
    torch_adamw = torch.optim.AdamW([reference], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    mine, exp_avg, exp_avg_sq = weights.clone(), torch.zeros(64), torch.zeros(64)
    for step in range(1, 6):
        grad = torch.randn(64, generator=generator)
        reference.grad = grad.clone()
        torch_adamw.step()
        adamw_step(mine, grad, exp_avg, exp_avg_sq, step, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    torch.testing.assert_close(mine, reference.detach(), rtol=1e-6, atol=1e-7)


def movement_at_tiny_lr(dtype: torch.dtype, optimizer_class, steps: int = 10) -> tuple[float, float]:
    """(share of weights changed, mean movement along the descent direction) of a 512x512 weight at std 0.02 after
    `steps` AdamW steps at lr 1e-6 with a fixed gradient."""
    generator = torch.Generator().manual_seed(0)
    start = (torch.randn(512, 512, generator=generator) * 0.02).to(dtype)
    gradient = torch.randn(512, 512, generator=generator).to(dtype)
    weight = torch.nn.Parameter(start.clone())
    optimizer = optimizer_class([weight], lr=1e-6, betas=(0.9, 0.999), weight_decay=0.0)
    for _ in range(steps):
        weight.grad = gradient.clone()
        optimizer.step()
    moved = weight.detach().float() - start.float()
    return (moved != 0).float().mean().item(), (-moved * gradient.float().sign()).mean().item()


def test_bf16_weights_move_at_lr_1e_6_only_with_stochastic_rounding():
    fp32_changed, fp32_movement = movement_at_tiny_lr(torch.float32, torch.optim.AdamW)
    bf16_changed, bf16_movement = movement_at_tiny_lr(torch.bfloat16, torch.optim.AdamW)
    rounded_changed, rounded_movement = movement_at_tiny_lr(torch.bfloat16, StochasticRoundingAdamW)
    assert fp32_changed > 0.99 and fp32_movement == pytest.approx(10e-6, rel=0.01)
    assert bf16_changed < 0.05  # torch's AdamW rounds the update away: the failure this optimizer exists for
    assert bf16_movement < 0.2 * fp32_movement
    assert rounded_movement == pytest.approx(fp32_movement, rel=0.15)  # unbiased: on average the fp32 update
    assert rounded_changed > 5 * bf16_changed  # each weight moves by a whole bf16 step, with the right probability


def test_a_resumed_optimizer_rounds_as_the_uninterrupted_one():
    generator = torch.Generator().manual_seed(1)
    start = (torch.randn(300, generator=generator) * 0.02).bfloat16()
    gradients = [torch.randn(300, generator=generator).bfloat16() for _ in range(4)]

    def run(weight, optimizer, grads):
        for grad in grads:
            weight.grad = grad.clone()
            optimizer.step()

    whole = torch.nn.Parameter(start.clone())
    run(whole, StochasticRoundingAdamW([whole], lr=1e-4, seed=3), gradients)
    first = torch.nn.Parameter(start.clone())
    optimizer = StochasticRoundingAdamW([first], lr=1e-4, seed=3)
    run(first, optimizer, gradients[:2])
    state = copy.deepcopy(optimizer.state_dict())
    resumed = torch.nn.Parameter(first.detach().clone())
    optimizer = StochasticRoundingAdamW([resumed], lr=1e-4, seed=3)
    optimizer.load_state_dict(state)
    run(resumed, optimizer, gradients[2:])
    assert torch.equal(resumed, whole)


def test_the_stochastic_optimizer_is_chosen_as_soon_as_a_trained_weight_is_bf16():
    fp32, bf16 = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    settings = {"lr": 1e-6, "betas": (0.9, 0.999), "weight_decay": 0.0, "fused": False}
    assert type(build_optimizer([fp32], **settings)) is torch.optim.AdamW
    assert type(build_optimizer([fp32, bf16], **settings)) is StochasticRoundingAdamW
