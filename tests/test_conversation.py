"""Token-exact conversations: generated turns kept as sampled, user turns tokenised once, no drift."""

import torch

from r3l.rollout.chat import PromptFormat
from r3l.rollout.conversation import TokenConversation
from r3l.rollout.generator import Completion, SamplingParams
from r3l.rollout.hf import HFGenerator


def completion_of(tokenizer, text, stopped=True):
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if stopped else [])
    return Completion(tokens, [-0.5] * len(tokens), text, "stop" if stopped else "length")


def test_turns_concatenate_without_drift(tiny):
    _, tokenizer = tiny
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("What is 2 + 2?"))
    first = conversation.add_assistant(completion_of(tokenizer, "<answer>5</answer>"), trained=False)
    conversation.add_user("That is wrong. Reflect on what went wrong.")
    second = conversation.add_assistant(completion_of(tokenizer, "I added badly."), trained=True)
    conversation.add_user("Try again.")
    assert conversation.drift() == 0
    assert [conversation.loss_mask[i] for i in range(*first)] == [0] * (first[1] - first[0])
    assert sum(conversation.loss_mask) == second[1] - second[0]
    assert conversation.tokens[second[0] : second[1]] == completion_of(tokenizer, "I added badly.").tokens
    assert len(conversation.tokens) == len(conversation.logprobs) == len(conversation.loss_mask)


def test_truncated_turn_gets_its_end_marker_from_the_template(tiny):
    _, tokenizer = tiny
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("Count to ten."))
    conversation.add_assistant(completion_of(tokenizer, "one two three", stopped=False), trained=True)
    conversation.add_user("Go on.")
    assert conversation.drift() == 0


def test_sampled_turns_stay_token_exact(tiny):
    """Random models sample tokens that decode and re-encode differently: kept as sampled, drift is counted."""
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    conversation = TokenConversation.start(tokenizer, PromptFormat().messages("Say something."))
    sampled = generator.generate([conversation.tokens], SamplingParams(temperature=1.0, max_new_tokens=6, seed=3))[0][0]
    start, end = conversation.add_assistant(sampled, trained=True)
    conversation.add_user("Again.")
    assert conversation.tokens[start:end] == sampled.tokens
    assert conversation.drift() >= 0
