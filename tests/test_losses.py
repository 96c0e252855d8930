"""Aggregation and policy losses on hand-computed numbers."""

import math

import pytest
import torch

from r3l.algorithms import POLICY_LOSSES, aggregate

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


def f(t):
    return float(t.detach())


# ---------------------------------------------------------------- aggregation
def test_token_mean():
    assert f(aggregate(VALUES, MASK, "token-mean")) == pytest.approx(7 / 3)  # (1+2+4)/3
    assert f(aggregate(VALUES, MASK, "token-mean", denominator=7.0)) == pytest.approx(1.0)  # 7/7


def test_seq_mean_token_mean():
    # rows: (1+2)/2 = 1.5, 4/1 = 4 -> (1.5+4)/2 = 2.75; with denominator 5: 5.5/5 = 1.1
    assert f(aggregate(VALUES, MASK, "seq-mean-token-mean")) == pytest.approx(2.75)
    assert f(aggregate(VALUES, MASK, "seq-mean-token-mean", denominator=5.0)) == pytest.approx(1.1)


def test_seq_mean_token_sum():
    # rows: 1+2 = 3, 4 -> (3+4)/2 = 3.5; with denominator 7: 7/7 = 1
    assert f(aggregate(VALUES, MASK, "seq-mean-token-sum")) == pytest.approx(3.5)
    assert f(aggregate(VALUES, MASK, "seq-mean-token-sum", denominator=7.0)) == pytest.approx(1.0)


def test_sequence_without_tokens_is_not_counted():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert f(aggregate(VALUES, mask, "seq-mean-token-mean")) == pytest.approx(1.5)  # only row 0
    assert f(aggregate(VALUES, mask, "seq-mean-token-sum")) == pytest.approx(3.0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_empty_mask_and_masked_inf(mode):
    values = VALUES.clone().requires_grad_(True)
    out = aggregate(values, torch.zeros(2, 3), mode)
    assert f(out) == 0.0
    out.backward()
    assert torch.equal(values.grad, torch.zeros(2, 3))
    poisoned = torch.tensor([[1.0, 2.0, float("inf")], [4.0, float("nan"), -float("inf")]])
    assert math.isfinite(f(aggregate(poisoned, MASK, mode)))


def test_bool_mask_and_gradient():
    values = VALUES.clone().requires_grad_(True)
    aggregate(values, MASK.bool(), "token-mean").backward()
    assert values.grad.flatten().tolist() == pytest.approx([1 / 3, 1 / 3, 0.0, 1 / 3, 0.0, 0.0])


def test_aggregate_errors():
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-mean, seq-mean-token-sum"):
        aggregate(VALUES, MASK, "mean")
    with pytest.raises(ValueError, match="same shape"):
        aggregate(VALUES, MASK[:, :2], "token-mean")
    with pytest.raises(ValueError, match="positive"):
        aggregate(VALUES, MASK, "token-mean", denominator=0.0)


# ---------------------------------------------------------------- ppo_clip
# Ratios r with old_logprobs = 0 and logprobs = log r; clip_low .2, clip_high .28.
RATIOS = [[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]]
ADVS = [[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]
# per-token loss -min(rA, clip(r, .8, 1.28)A):
#  (1.5,+1): min(1.5, 1.28) = 1.28 -> -1.28  clipped (high side, not 1.2)
#  (1.1,+1): -1.1;  (0.5,+1): min(.5, .8) = .5 -> -0.5
#  (0.5,-1): min(-.5, -.8) = -.8 -> 0.8     clipped (low side)
#  (0.9,-1): 0.9;   (1.5,-1): min(-1.5, -1.28) = -1.5 -> 1.5
# token-mean = (-1.28 - 1.1 - 0.5 + 0.8 + 0.9 + 1.5) / 6 = 0.32 / 6
PPO_TOKEN_MEAN = 0.32 / 6


def ppo_inputs():
    logprobs = torch.log(torch.tensor(RATIOS)).requires_grad_(True)
    return logprobs, torch.zeros(2, 3), torch.tensor(ADVS), torch.ones(2, 3)


def test_ppo_clip_value_and_metrics():
    logprobs, old, advs, mask = ppo_inputs()
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask, clip_low=0.2, clip_high=0.28)
    assert f(loss) == pytest.approx(PPO_TOKEN_MEAN, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(2 / 6)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # (1.5+1.1+.5+.5+.9+1.5)/6
    # k3 = (r-1) - log r: 1.5 -> .094535, 1.1 -> .004690, 0.5 -> .193147, 0.9 -> .005361
    # (2*.094535 + .004690 + 2*.193147 + .005361) / 6 = .585415 / 6
    assert metrics["approx_kl"] == pytest.approx(0.585415 / 6, abs=1e-5)
    # left on the device for the learner to read once per update: 0-dim, outside the graph
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())


def test_ppo_clip_symmetric_default():
    logprobs, old, advs, mask = ppo_inputs()
    loss, _ = POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask)
    # only the first token changes vs clip_high .28: -1.2 instead of -1.28 -> 0.40 / 6
    assert f(loss) == pytest.approx(0.40 / 6, abs=1e-6)


def test_ppo_clip_gradient_zero_when_clipped():
    logprobs, old, advs, mask = ppo_inputs()
    loss, _ = POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    # d/dlogp of -A r / 6 = -A r / 6 where unclipped; 0 where clipped
    expected = [0.0, -1.1 / 6, -0.5 / 6, 0.0, 0.9 / 6, 1.5 / 6]
    assert logprobs.grad.flatten().tolist() == pytest.approx(expected, abs=1e-6)


def test_ppo_clip_mask_and_denominator():
    logprobs, old, advs, _ = ppo_inputs()
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # the (1.5, -1) token (loss 1.5) is masked: (0.32 - 1.5) / 5 = -0.236
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask, clip_low=0.2, clip_high=0.28)
    assert f(loss) == pytest.approx(-1.18 / 5, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    loss, _ = POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask, clip_low=0.2, clip_high=0.28, denominator=10.0)
    assert f(loss) == pytest.approx(-1.18 / 10, abs=1e-6)


def test_ppo_dual_clip():
    # r = 5, A = -1: standard loss -min(-5, -1.2) = 5; dual clip c = 3 caps it at 3 with zero gradient
    logprobs = torch.log(torch.tensor([[5.0]])).requires_grad_(True)
    args = (torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    loss, _ = POLICY_LOSSES.get("ppo_clip")(logprobs, *args)
    assert f(loss) == pytest.approx(5.0)
    loss, metrics = POLICY_LOSSES.get("ppo_clip")(logprobs, *args, dual_clip=3.0)
    assert f(loss) == pytest.approx(3.0)
    assert metrics["dual_clip_fraction"] == 1.0
    loss.backward()
    assert logprobs.grad.item() == 0.0
    with pytest.raises(ValueError, match="dual_clip"):
        POLICY_LOSSES.get("ppo_clip")(logprobs, *args, dual_clip=1.0)


def test_ppo_unknown_param_fails():
    logprobs, old, advs, mask = ppo_inputs()
    with pytest.raises(TypeError):
        POLICY_LOSSES.get("ppo_clip")(logprobs, old, advs, mask, clip=0.2)


# ---------------------------------------------------------------- opmd and sft
LOGP = [[-1.0, -2.0], [-0.5, -4.0]]
LOSS_MASK = torch.tensor([[1, 1], [1, 0]])


def test_opmd_divided_by_one_plus_tau():
    logprobs = torch.tensor(LOGP, requires_grad=True)
    advs = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    # -A*logp on masked tokens: 1, 2, -1 -> token-mean 2/3 -> /(1+1) = 1/3
    loss, metrics = POLICY_LOSSES.get("opmd")(logprobs, None, advs, LOSS_MASK)
    assert f(loss) == pytest.approx(1 / 3)
    assert metrics == {}
    loss.backward()
    # d/dlogp = -A / 3 / 2
    assert logprobs.grad.flatten().tolist() == pytest.approx([-1 / 6, -1 / 6, 1 / 3, 0.0])
    loss, _ = POLICY_LOSSES.get("opmd")(logprobs, None, advs, LOSS_MASK, tau=0.0)
    assert f(loss) == pytest.approx(2 / 3)


def test_opmd_ignores_old_logprobs_for_the_loss():
    logprobs = torch.tensor(LOGP)
    advs = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    loss, metrics = POLICY_LOSSES.get("opmd")(logprobs, logprobs - 1.0, advs, LOSS_MASK)
    assert f(loss) == pytest.approx(1 / 3)
    # ratio e^1 = 2.718282; k3 = (e - 1) - 1 = 0.718282
    assert metrics["ratio_mean"] == pytest.approx(2.718282, abs=1e-5)
    assert metrics["approx_kl"] == pytest.approx(0.718282, abs=1e-5)


def test_sft():
    logprobs = torch.tensor(LOGP)
    # -logp on masked tokens: 1, 2, .5 -> 3.5/3
    loss, metrics = POLICY_LOSSES.get("sft")(logprobs, None, None, LOSS_MASK)
    assert f(loss) == pytest.approx(3.5 / 3)
    assert metrics["nll"] == pytest.approx(3.5 / 3)
    # weighted by A = [[1,1],[2,2]]: 1, 2, 1 -> 4/3
    advs = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    loss, _ = POLICY_LOSSES.get("sft")(logprobs, None, advs, LOSS_MASK, weighted=True)
    assert f(loss) == pytest.approx(4 / 3)
    # advantages ignored unless weighted
    loss, _ = POLICY_LOSSES.get("sft")(logprobs, None, advs, LOSS_MASK)
    assert f(loss) == pytest.approx(3.5 / 3)
    # seq-mean-token-sum: rows 3 and .5 -> 1.75
    loss, _ = POLICY_LOSSES.get("sft")(logprobs, None, None, LOSS_MASK, aggregation="seq-mean-token-sum")
    assert f(loss) == pytest.approx(1.75)


def test_losses_registered():
    assert set(POLICY_LOSSES.names()) == {"ppo_clip", "gspo", "policy_shaping", "opmd", "sft"}
