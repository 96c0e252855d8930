"""GSPO's sequence-level loss on hand-computed numbers, and its preset."""

import math
from pathlib import Path

import pytest
import torch

from r3l.algorithms import POLICY_LOSSES
from r3l.algorithms.gspo import sequence_log_ratio
from r3l.config import load_config

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
LOGPROBS = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -7.0, -7.0]])
OLD = torch.tensor([[-1.1, -2.3, 0.0], [-0.4, 0.0, 0.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])


def test_sequence_ratio_is_the_mean_log_ratio_of_the_trained_tokens():
    # row 0: (0.1 + 0.3) / 2 = 0.2 (the untrained third token's -9 is ignored); row 1: -0.1
    assert sequence_log_ratio(LOGPROBS, OLD, MASK).tolist() == pytest.approx([0.2, -0.1])


def test_loss_clipped_per_sequence():
    gspo = POLICY_LOSSES.get("gspo")
    loss, metrics = gspo(
        LOGPROBS, OLD, ADVANTAGES, MASK, aggregation="seq-mean-token-mean", clip_low=0.2, clip_high=0.2
    )
    # row 0: s = e^0.2 = 1.2214 > 1.2 with A = 1 -> the clipped -1.2; row 1: s = e^-0.1 = 0.9048 inside [0.8, 1.2]
    # -> -(-2) * 0.9048 = 1.8097; the mean over the two sequences: (-1.2 + 1.8097) / 2
    assert float(loss) == pytest.approx((-1.2 + 2 * math.exp(-0.1)) / 2, rel=1e-5)
    assert metrics["clip_fraction"] == pytest.approx(2 / 3)  # row 0's two trained tokens of three
    assert metrics["sequence_ratio_mean"] == pytest.approx((2 * math.exp(0.2) + math.exp(-0.1)) / 3, rel=1e-5)


def test_the_papers_clip_range():
    gspo = POLICY_LOSSES.get("gspo")
    loss, _ = gspo(LOGPROBS, OLD, ADVANTAGES, MASK, aggregation="seq-mean-token-mean")
    # defaults 3e-4 / 4e-4: row 0 clipped at 1.0004 (A > 0): -1.0004; row 1 (A < 0) at 0.9997: 2 * 0.9997 = 1.9994
    assert float(loss) == pytest.approx((-1.0004 + 1.9994) / 2, rel=1e-6)


def test_gradient_on_policy_is_the_advantage_over_each_sequences_length():
    gspo = POLICY_LOSSES.get("gspo")
    logprobs = LOGPROBS.clone().requires_grad_(True)
    loss, metrics = gspo(logprobs, logprobs.detach(), ADVANTAGES, MASK, aggregation="seq-mean-token-mean")
    loss.backward()
    # s = 1: d(-A s)/d logp_t = -A / n_i, averaged over 2 sequences: row 0 -1/(2*2), row 1 +2/(2*1)
    assert logprobs.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.0, 1.0, 0.0, 0.0])
    assert metrics["clip_fraction"] == 0.0 and metrics["sequence_ratio_mean"] == pytest.approx(1.0)


def test_token_mean_weighs_sequences_by_length():
    gspo = POLICY_LOSSES.get("gspo")
    loss, _ = gspo(LOGPROBS, OLD, ADVANTAGES, MASK, aggregation="token-mean", clip_low=0.2, clip_high=0.2)
    assert float(loss) == pytest.approx((2 * -1.2 + 2 * math.exp(-0.1)) / 3, rel=1e-5)


def test_one_token_sequences_equal_ppo_clip():
    mask = torch.ones(2, 1)
    logprobs, old, adv = torch.tensor([[-0.2], [-1.0]]), torch.tensor([[-0.5], [-0.9]]), torch.tensor([[1.5], [-1.0]])
    ours, _ = POLICY_LOSSES.get("gspo")(logprobs, old, adv, mask, aggregation="token-mean", clip_low=0.2, clip_high=0.2)
    theirs, _ = POLICY_LOSSES.get("ppo_clip")(logprobs, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert float(ours) == pytest.approx(float(theirs))


def test_bad_clip_is_refused():
    with pytest.raises(ValueError, match="gspo needs"):
        POLICY_LOSSES.get("gspo")(LOGPROBS, OLD, ADVANTAGES, MASK, clip_low=1.5)


def test_preset():
    algorithm = load_config(None, ["model=tiny-random", "algorithm=gspo"]).algorithm
    assert (algorithm.policy_loss, algorithm.aggregation, algorithm.advantage) == (
        "gspo",
        "seq-mean-token-mean",
        "grpo",
    )
    assert algorithm.loss_args == {"clip_low": 3e-4, "clip_high": 4e-4}


def test_two_training_steps(tmp_path):
    import json

    from tests.conftest import run_cli

    result = run_cli(
        "train",
        "model=tiny-random",
        "algorithm=gspo",
        "env=countdown",
        "sampling.group_size=4",
        "sampling.max_new_tokens=8",
        "train.tasks_per_step=2",
        "train.steps=2",
        "eval.size=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        "generator.dtype=float32",
        "algorithm.updates_per_batch=2",
        f"reward.functions=[{Path(__file__).parent / 'helpers' / 'rewards.py'}:vowel_share_reward]",
        f"run.dir={tmp_path}",
        "run.name=g",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    metrics = [json.loads(line) for line in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "loss" in m]
    assert len(trained) == 2 and all(math.isfinite(m["loss"]) and "sequence_ratio_mean" in m for m in trained)
