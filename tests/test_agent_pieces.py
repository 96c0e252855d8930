"""R3L's pure pieces (budget, retry choice, pivotal masks, improvement), action formats, conversation cuts,
and auxiliary SFT samples in the advantage step and the learner (hand-computed losses and KL)."""

import pytest
import torch

from r3l.agent.actions import parse_reply
from r3l.agent.credit import pivotal_mask, turns_only
from r3l.agent.improvement import IMPROVEMENT_RULES
from r3l.agent.retry_plan import choose_retries, split_budget
from r3l.algorithms import assign_advantages
from r3l.config import AlgorithmConfig, TrainConfig
from r3l.experience import Experience
from r3l.learner.learner import Learner
from r3l.rollout.chat import PromptFormat
from r3l.rollout.conversation import TokenConversation
from tests.test_conversation import completion_of


def test_split_budget_halves_the_group():
    assert split_budget(8, 0.5) == (4, 4)
    assert split_budget(6, 0.5) == (3, 3)
    assert split_budget(5, 0.5) == (2, 3)  # round half to even: 2.5 -> 2
    assert split_budget(1, 0.5) == (1, 0)  # at least one base episode
    assert split_budget(8, 0.25) == (2, 6)
    assert split_budget(8, 0.5, reflect_retry=False) == (8, 0)


def test_choose_retries_gives_each_base_at_most_its_share():
    assert choose_retries([3, 5], 4) == [3, 5]  # one retry per base (R3L's code); two slots stay empty
    assert choose_retries([3, 5], 4, per_base=2) == [3, 5, 3, 5]
    assert choose_retries([3, 5], 3, per_base=4) == [3, 5, 3]
    assert choose_retries([3, 5, 7], 2) == [3, 5]
    assert choose_retries([], 4) == []


def test_pivotal_mask_zeroes_the_shared_turns_only():
    mask = [0, 0, 1, 1, 0, 1, 1, 1, 0, 1]
    spans = [(2, 4), (5, 8), (9, 10)]
    assert pivotal_mask(mask, spans, 0) == mask
    assert pivotal_mask(mask, spans, 1) == [0, 0, 0, 0, 0, 1, 1, 1, 0, 1]
    assert pivotal_mask(mask, spans, 2) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert turns_only(mask, spans, 1) == [0, 0, 0, 0, 0, 1, 1, 1, 0, 1]
    assert turns_only([1] * 10, spans, 2) == [0] * 9 + [1]


def test_reference_improvement_needs_a_successful_retry():
    improved = IMPROVEMENT_RULES.get("reference")  # (retry reward, retry steps, base reward, base steps)
    assert improved(1.0, 9, 0.5, 4)  # succeeds where the base did not
    assert improved(1.0, 3, 1.0, 5)  # succeeds in fewer steps
    assert not improved(1.0, 5, 1.0, 5)
    assert not improved(0.4, 9, 0.25, 4)  # a partial-reward gain that does not succeed: no SFT
    assert not improved(0.25, 3, 0.25, 9)  # shorter, but no success
    assert not improved(0.0, 2, 0.5, 9)
    assert improved(0.8, 9, 0.5, 4, success_reward=0.8)


def test_any_gain_improvement_counts_partial_rewards():
    improved = IMPROVEMENT_RULES.get("any_gain")
    assert improved(0.4, 9, 0.25, 4) and improved(1.0, 9, 0.5, 4) and improved(1.0, 3, 1.0, 5)
    assert not improved(0.25, 3, 0.25, 9) and not improved(0.0, 2, 0.5, 9) and not improved(1.0, 5, 1.0, 5)


def test_tagged_action_format():
    reply = parse_reply("<think>the key is here</think> <action> take key </action> extra", "tagged")
    assert (reply.action, reply.thought) == ("take key", "the key is here")
    assert parse_reply("take key", "tagged").action is None
    assert parse_reply("<action>  </action>", "tagged").action is None
    assert parse_reply("<action>open door", "tagged").action is None  # cut off before the closing tag
    assert parse_reply("<act>go</act>", "tagged", action_tag="act").action == "go"
    assert parse_reply("<answer>4</answer>", "whole_reply").action == "<answer>4</answer>"


def test_conversation_cuts_are_token_identical(tiny):
    _, tokenizer = tiny
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("You are in a room.", "Play."))
    prompt = list(conversation.tokens)
    conversation.add_assistant(completion_of(tokenizer, "<action>look</action>"), trained=True)
    conversation.add_user("A door is north.")
    conversation.add_assistant(completion_of(tokenizer, "<action>go north</action>", stopped=False), trained=True)
    conversation.add_user("You see a key.")
    conversation.add_assistant(completion_of(tokenizer, "<action>take key</action>"), trained=True)
    assert conversation.before_turn(0).tokens == prompt
    for turn in range(3):
        cut = conversation.before_turn(turn)
        assert cut.tokens == conversation.tokens[: conversation.turn_spans[turn][0]]
        assert cut.turn_spans == conversation.turn_spans[:turn]
        assert cut.messages[-1]["role"] == "user"
    for turn in range(2):  # after a turn, adding the same observation again reproduces the original exactly
        rebuilt = conversation.after_turn(turn)
        rebuilt.add_user(conversation.messages[len(rebuilt.messages)]["content"])
        assert rebuilt.tokens == conversation.before_turn(turn + 1).tokens
        assert rebuilt.drift() == 0
    with pytest.raises(IndexError):
        conversation.before_turn(3)


def sft_sample(tokens, weight, group="g"):
    return Experience(
        group=group,
        kind="sft",
        tokens=tokens,
        loss_mask=[0, 0, 1, 1, 1],
        logprobs=[0.0] * 5,
        reward=1.0,
        advantage=weight,
        objective="sft",
    )


def policy_sample(tokens, advantage, group="g"):
    return Experience(
        group=group,
        kind="base",
        tokens=tokens,
        loss_mask=[0, 0, 1, 1, 1],
        logprobs=[0.0] * 5,
        reward=1.0,
        advantage=advantage,
    )


def test_advantages_leave_sft_samples_out_of_the_groups():
    base = [
        Experience(group="g", kind="base", tokens=[1, 2], loss_mask=[0, 1], logprobs=[0, 0], reward=r)
        for r in (1.0, 0.0)
    ]
    sft = sft_sample([1, 2, 3, 4, 5], 0.7)
    assign_advantages([*base, sft], "positive_amplified", {"alpha": 3.0})
    # group mean over the two policy samples only: 0.5 -> [success -> 1.0, -0.5]
    assert [e.advantage for e in base] == [1.0, -0.5]
    assert sft.advantage == 0.7


TOKENS = [[5, 9, 13, 17, 21], [6, 10, 14, 18, 22], [7, 11, 15, 19, 23]]


def target_logprobs(model, rows):
    """log p of each trained target (tokens 2..4 of each row) under `model`, one tensor per row."""
    with torch.no_grad():
        out = []
        for row in rows:
            logits = model(torch.tensor([row])).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(row[1:])[:, None])[1:, 0])
        return out


def fresh_learner(tiny, **algorithm):
    model, tokenizer = tiny
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    return copy, Learner(
        copy,
        tokenizer,
        AlgorithmConfig(name="r3l", **algorithm),
        TrainConfig(lr=1e-9),
        temperature=1.0,
        autocast_bf16=False,
        ref_model=algorithm.get("kl_coef") and ref_of(tiny),
    )


def ref_of(tiny):
    """A reference policy that differs from the policy: the same weights with the head scaled."""
    model, _ = tiny
    ref = type(model)(model.config)
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        ref.get_output_embeddings().weight.mul_(0.5)
    return ref.eval()


def test_sft_samples_join_the_policy_loss_as_positive_samples_by_default(tiny):
    """R3L's code: SFT samples go through the same OPMD loss with advantage = their weight (1), and one
    token-mean over every trained token: loss = sum(-A * logp) / N / (1 + tau)."""
    model, learner = fresh_learner(tiny)
    logp = target_logprobs(model, TOKENS)
    samples = [policy_sample(TOKENS[0], -0.5), sft_sample(TOKENS[1], 1.0), sft_sample(TOKENS[2], 1.0)]
    expected = float(0.5 * logp[0].sum() - logp[1].sum() - logp[2].sum()) / 9 / 2
    metrics = learner.update(samples)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-4) and metrics["sft_samples"] == 2


def test_nll_sft_loss_has_its_own_normaliser(tiny):
    model, learner = fresh_learner(tiny, sft_loss="nll")
    logp = target_logprobs(model, TOKENS)
    samples = [policy_sample(TOKENS[0], -0.5), sft_sample(TOKENS[1], 0.5), sft_sample(TOKENS[2], 0.5)]
    policy = float(0.5 * logp[0].sum()) / 3 / 2  # OPMD over the policy sample's 3 tokens, / (1 + tau)
    sft = float(-0.5 * (logp[1].sum() + logp[2].sum())) / 6  # weighted NLL over the 6 SFT tokens
    metrics = learner.update(samples)
    assert metrics["loss"] == pytest.approx(policy + sft, rel=1e-4) and metrics["sft_samples"] == 2


@pytest.mark.parametrize("sft_loss", ["policy_loss", "nll"])
def test_kl_is_one_mean_over_every_trained_token(tiny, sft_loss):
    """k2 KL = 0.5 (logp - logp_ref)^2, averaged once over the 9 trained tokens of policy and SFT samples."""
    model, learner = fresh_learner(tiny, sft_loss=sft_loss, kl_coef=0.001, kl_estimator="k2")
    logp, ref = target_logprobs(model, TOKENS), target_logprobs(learner.ref_model, TOKENS)
    expected = float(sum((0.5 * (p - r) ** 2).sum() for p, r in zip(logp, ref))) / 9
    metrics = learner.update([policy_sample(TOKENS[0], -0.5), sft_sample(TOKENS[1], 1.0), sft_sample(TOKENS[2], 1.0)])
    assert expected > 1e-4 and metrics["kl"] == pytest.approx(expected, rel=1e-4)
