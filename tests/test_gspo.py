"""GSPO's loss on hand-computed numbers: one length-normalised ratio per sequence, clipped per sequence, the
sequence mean; its gradient is the sequence ratio's."""

import math

import pytest
import torch

from r3l.algorithms.losses import POLICY_LOSSES, gspo


def test_gspo_clips_per_sequence_and_averages_sequences():
    # sequence 0: token log-ratios 0.1 and 0.3 -> mean 0.2, s = e^0.2 = 1.2214 > 1.2: clipped (A = +1) -> -1.2
    # sequence 1: log-ratios -0.05 and 0.05 (a third position masked, holding inf) -> s = 1, A = -1 -> +1
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    new = torch.tensor([[-0.9, -1.7, 0.0], [-1.05, -0.95, math.inf]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    loss, metrics = gspo(new, old, advantages, mask, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx((-1.2 + 1.0) / 2)
    loss.backward()
    # sequence 0 is clipped: no gradient; sequence 1: d/dlogp_t of (1/2)(1/2) sum_t -A s = 1/4 per trained token
    assert torch.allclose(new.grad, torch.tensor([[0.0, 0.0, 0.0], [0.25, 0.25, 0.0]]))
    assert metrics["clip_fraction"] == pytest.approx(0.5)


def test_gspo_gradient_is_the_sequence_ratios():
    # one unclipped sequence of three tokens, A = 2: loss = -2 s, s = exp(mean(logp - old)); ds/dlogp_t = s / 3
    old = torch.tensor([[-1.0, -1.5, -0.5]])
    new = torch.tensor([[-0.999, -1.5005, -0.5001]], requires_grad=True)
    mask = torch.ones(1, 3)
    loss, _ = gspo(new, old, torch.full((1, 3), 2.0), mask, clip_low=0.2, clip_high=0.2)
    s = math.exp((0.001 - 0.0005 - 0.0001) / 3)
    assert loss.item() == pytest.approx(-2 * s)
    loss.backward()
    assert torch.allclose(new.grad, torch.full((1, 3), -2 * s / 3))


def test_gspo_is_registered_and_advantage_weighted():
    assert POLICY_LOSSES.get("gspo") is gspo and gspo.advantage_weighted
    with pytest.raises(ValueError, match="gspo needs"):
        gspo(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), clip_low=1.5)
