"""Engine/learner mismatch: the importance weights (tis, mis) on hand-computed numbers, the mismatch metrics,
and the learner: the identity when behaviour and learner agree, the weights applied where they do not, and
retries stored without their guidance left out of both."""

import copy
import math

import pytest
import torch

from r3l.algorithms.rollout_correction import (
    ROLLOUT_CORRECTIONS,
    masked_importance_weights,
    mismatch_metrics,
    mismatch_sums,
    truncated_importance_weights,
)
from r3l.config import AlgorithmConfig, TrainConfig
from r3l.errors import UserError
from r3l.learner.batching import collate
from r3l.learner.learner import Learner
from tests.test_shared_prefix import batch_of_groups


def test_weights_on_hand_computed_ratios():
    log_ratio = torch.tensor([math.log(0.5), 0.0, math.log(1.5), math.log(3.0), 40.0])
    assert truncated_importance_weights(log_ratio, 2.0).tolist() == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0])
    assert masked_importance_weights(log_ratio, 2.0).tolist() == pytest.approx([0.5, 1.0, 1.5, 0.0, 0.0])
    assert ROLLOUT_CORRECTIONS.get("none")(log_ratio, 2.0).tolist() == [1.0] * 5


def test_weights_are_one_when_behaviour_equals_learner():
    zeros = torch.zeros(3, 4)
    for name in ROLLOUT_CORRECTIONS.names():
        assert torch.equal(ROLLOUT_CORRECTIONS.get(name)(zeros, 2.0), torch.ones(3, 4)), name


def test_mismatch_sums_on_hand_computed_numbers():
    learner = torch.tensor([[-1.0, -2.0, -0.5, -9.0]])
    behaviour = torch.tensor([[-1.0, -1.0, -0.5 - math.log(3.0), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last token is not trained: left out
    sums = mismatch_sums(learner, behaviour, mask, band=2.0)
    # log-ratios 0, -1, log 3; k3 per token: 0, (e^-1 - 1) + 1 = e^-1, (3 - 1) - log 3
    assert sums["tokens"] == 3.0
    assert sums["gap"] == pytest.approx(0 + 1 + math.log(3.0))
    assert sums["kl"] == pytest.approx(math.exp(-1) + 2 - math.log(3.0))
    assert sums["outside"] == 2.0  # e^-1 < 1/2 and 3 > 2
    assert sums["gap_max"] == pytest.approx(math.log(3.0))
    metrics = mismatch_metrics(
        {"mismatch:" + k: v for k, v in sums.items() if k != "gap_max"}
        | {"mismatch:weight": 3.0, "mismatch:dropped": 1.0, "mismatch:weight_tokens": 4.0}
    )
    assert metrics["generator_logprob_gap"] == pytest.approx((1 + math.log(3.0)) / 3)
    assert metrics["generator_ratio_outside"] == pytest.approx(2 / 3)
    assert metrics["rollout_correction_weight"] == 0.75 and metrics["rollout_correction_dropped"] == 0.25


def _learner(tiny, correction: str):
    model, tokenizer = tiny
    algorithm = AlgorithmConfig(policy_loss="opmd", rollout_correction=correction, rollout_correction_threshold=2.0)
    return Learner(
        copy.deepcopy(model),
        tokenizer,
        algorithm,
        TrainConfig(lr=1e-3, micro_batch_size=8),
        temperature=1.0,
        autocast_bf16=False,
    )


def _with_learner_logprobs(learner, experiences, shift: float = 0.0):
    """The experiences with their generator log-probs set to the learner's own (minus `shift` on trained tokens)."""
    batch = collate(experiences, learner.pad_id)  # no shared prefix: target column t scores token t + 1
    with torch.no_grad():
        values = learner._logprobs(learner.model, batch)[0]
    for row, experience in enumerate(experiences):
        logprobs = [0.0] * len(experience.tokens)
        for position in range(1, len(experience.tokens)):
            if experience.loss_mask[position]:
                logprobs[position] = float(values[row, position - 1]) - shift
        experience.logprobs = logprobs
    return experiences


def _advantaged(experiences):
    for experience in experiences:
        experience.advantage = 1.0 if experience.reward > 0 else -1.0
    return experiences


def _gradients(learner, experiences):
    learner.optimizer.step = lambda: None  # keep the gradients, move nothing
    learner.update(experiences)
    return [p.grad.clone() for p in learner.model.parameters() if p.grad is not None]


@pytest.mark.parametrize("correction", ["tis", "mis"])
def test_correction_is_the_identity_when_behaviour_and_learner_agree(tiny, correction):
    plain, corrected = _learner(tiny, "none"), _learner(tiny, correction)
    experiences = _advantaged(_with_learner_logprobs(plain, batch_of_groups()))
    metrics = corrected.update(copy.deepcopy(experiences))
    plain.update(copy.deepcopy(experiences))
    assert metrics["rollout_correction_weight"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["rollout_correction_dropped"] == 0.0
    assert metrics["generator_logprob_gap"] < 1e-5 and metrics["generator_ratio_outside"] == 0.0
    for a, b in zip(plain.model.parameters(), corrected.model.parameters()):
        assert torch.allclose(a, b, atol=1e-7)


@pytest.mark.filterwarnings("ignore:Seems like")
def test_tis_truncates_and_mis_drops_a_far_behaviour(tiny):
    """The generator gave every trained token a log-prob log 4 lower than the learner's: ratio 4 > C = 2. OPMD's
    gradient is linear in the advantage, so tis (weight 2) doubles the uncorrected gradient and mis (weight 0)
    leaves none."""
    reference = _learner(tiny, "none")
    experiences = _advantaged(_with_learner_logprobs(reference, batch_of_groups(), shift=math.log(4.0)))
    tis_learner, mis_learner = _learner(tiny, "tis"), _learner(tiny, "mis")
    tis_learner.train.grad_clip = mis_learner.train.grad_clip = 1e9
    reference.train.grad_clip = 1e9
    plain = _gradients(reference, copy.deepcopy(experiences))
    tis = _gradients(tis_learner, copy.deepcopy(experiences))
    mis = _gradients(mis_learner, copy.deepcopy(experiences))
    for p, t, m in zip(plain, tis, mis):
        assert torch.allclose(t, 2 * p, rtol=1e-4, atol=1e-7)
        assert torch.count_nonzero(m) == 0


def test_a_retry_stored_without_its_guidance_is_neither_measured_nor_corrected(tiny):
    learner = _learner(tiny, "mis")
    experiences = _advantaged(_with_learner_logprobs(learner, batch_of_groups(), shift=math.log(4.0)))
    for experience in experiences:
        experience.kind = "retry"
        experience.meta.update(guidance="try the other door", guidance_in_tokens=False)
    learner.train.grad_clip = 1e9
    metrics = learner.update(experiences)
    assert "generator_logprob_gap" not in metrics  # no token's behaviour log-prob belongs to its context
    assert metrics["rollout_correction_weight"] == 1.0 and metrics["rollout_correction_dropped"] == 0.0
    assert metrics["grad_norm"] > 0


def test_an_unknown_correction_is_one_line(tiny):
    with pytest.raises(UserError, match="unknown rollout correction 'is'"):
        _learner(tiny, "is")
