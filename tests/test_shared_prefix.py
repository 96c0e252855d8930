"""Training with a group's shared prompt computed once gives the same log-probs and gradients as the plain path."""

import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.experience import Experience
from r3l.learner.batching import (
    cheapest_split,
    collate,
    collate_shared_prefix,
    prefix_micro_batches,
    shared_prefix_length,
)
from r3l.learner.learner import Learner


def record(tokens, prompt_length, group, reward):
    n = len(tokens)
    return Experience(
        group=group,
        kind="base",
        tokens=tokens,
        loss_mask=[0] * prompt_length + [1] * (n - prompt_length),
        logprobs=[0.0] * n,
        reward=reward,
        advantage=reward - 0.5,
    )


def batch_of_groups():
    first_prompt, second_prompt = [1, 9690, 198, 40, 41, 42], [1, 9690, 198, 50, 51]
    return [
        record(first_prompt + [7, 8, 9], 6, "a", 1.0),
        record(first_prompt + [10, 2], 6, "a", 0.0),
        record(second_prompt + [11, 12, 13, 14], 5, "b", 1.0),
        record(second_prompt + [15], 5, "b", 0.0),
        record(first_prompt + [16, 17], 6, "a", 1.0),
    ]


def test_shared_prefix_length_stops_before_the_last_prompt_token():
    assert shared_prefix_length(record([1, 2, 3, 4, 5], 3, "g", 0.0)) == 2
    assert shared_prefix_length(record([1, 2], 0, "g", 0.0)) == 0


def test_prefix_micro_batches_keep_groups_together():
    # run a: prefix 5, suffixes 4, 2, 3; run b: prefix 4, suffixes 5, 2; ordered by prefix + suffix, then prefix
    assert prefix_micro_batches(batch_of_groups(), 4) == [[2, 3], [0, 1, 4]]
    # size 2: run a sorted by length (suffixes 2, 3, 4 for 1, 4, 0) is cut into [1, 4] (5 + 2 x 3) and [0] (5 + 4),
    # 20 positions, where index order ([0, 1] and [4]) pads to 21
    assert prefix_micro_batches(batch_of_groups(), 2) == [[1, 4], [2, 3], [0]]


def test_a_run_is_cut_by_length_where_padding_costs_more_than_a_pass():
    """A group of 8 episodes of very different lengths (a multi-turn game's): in one micro-batch every short one
    would be padded to the longest; cut by length, the short ones go together and the long ones together, each
    pass paying the prefix once more and the overhead (64 positions, the default)."""
    prompt = [1, 9690, 198, 40, 41]
    lengths = [10, 300, 12, 280, 11, 310, 9, 290]
    batch = [record(prompt + [7] * n, 5, "a", float(i % 2)) for i, n in enumerate(lengths)]

    def cost(split):  # prefix once a pass + rows x the widest suffix + the overhead
        return sum(4 + len(part) * max(lengths[i] + 1 for i in part) + 64 for part in split)

    for size in (8, 4):
        split = prefix_micro_batches(batch, size, overhead=64)
        assert [0, 2, 4, 6] in split and sorted(i for part in split for i in part) == list(range(8))
        assert cost(split) < 0.65 * cost([list(range(start, start + size)) for start in range(0, 8, size)])


def test_cheapest_split_weighs_padding_against_one_more_pass():
    # (rows, prefix width, row width): two short runs and one long reflection-like sample
    widths = [(4, 60, 20), (4, 60, 25), (1, 300, 80)]
    # one pass: 3 x 300 + 9 x 80 = 1620; short runs together, long apart: (2 x 60 + 8 x 25) + (300 + 80) = 700;
    # each apart: (60 + 80) + (60 + 100) + 380 = 680
    assert cheapest_split(widths, 32, overhead=64) == [[0, 1], [2]]  # 1684 / 828 / 872
    assert cheapest_split(widths, 32, overhead=0) == [[0], [1], [2]]
    assert cheapest_split(widths, 32, overhead=1000) == [[0, 1, 2]]  # 2620 / 2700 / 3680
    assert cheapest_split(widths, 8, overhead=1000) == [[0, 1], [2]]  # 9 rows do not fit in 8
    assert cheapest_split([(40, 10, 10)], 8, overhead=0) == [[0]]  # wider than size: alone
    assert cheapest_split([], 8, overhead=0) == []


def test_collate_shared_prefix_layout():
    batch = collate_shared_prefix(batch_of_groups()[:4], pad_id=0)
    assert batch["prefix_ids"].tolist() == [[1, 9690, 198, 40, 41], [1, 9690, 198, 50, 0]]
    assert batch["prefix_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert batch["prefix_index"].tolist() == [0, 0, 1, 1]
    assert batch["input_ids"][0].tolist() == [42, 7, 8, 9, 0]
    assert batch["loss_mask"][0].tolist() == [1, 1, 1, 0]
    assert batch["suffix_positions"][3].tolist() == [4, 5, 6, 7, 8]


def test_no_attention_row_is_fully_masked(tiny, monkeypatch):
    """A query row with every key masked has log-sum-exp -inf, which cuDNN's backward on H100/H200 turns
    into NaN gradients (the divergence seen on CUDA); prefixes of unequal length must not produce one."""
    model, tokenizer = tiny
    sdpa = torch.nn.functional.scaled_dot_product_attention
    empty_rows = []

    def spy(query, key, value, attn_mask=None, **kwargs):
        if attn_mask is not None:
            allowed = attn_mask if attn_mask.dtype == torch.bool else attn_mask > torch.finfo(attn_mask.dtype).min
            empty_rows.append(int((~allowed.expand(query.shape[0], -1, query.shape[2], key.shape[2])).all(-1).sum()))
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    learner = Learner(model, tokenizer, AlgorithmConfig(), TrainConfig(), temperature=1.0, autocast_bf16=False)
    experiences = batch_of_groups()
    assert len({shared_prefix_length(e) for e in experiences}) > 1  # prefixes of unequal length
    learner._logprobs(model, collate_shared_prefix(experiences, 0))
    assert empty_rows and sum(empty_rows) == 0


def loss_and_grads(model, tokenizer, share):
    model.zero_grad()
    learner = Learner(
        model, tokenizer, AlgorithmConfig(), TrainConfig(share_prefix=share), temperature=1.0, autocast_bf16=False
    )
    experiences = batch_of_groups()
    batch = collate_shared_prefix(experiences, 0) if share else collate(experiences, 0)
    logprobs, _ = learner._logprobs(model, batch)
    mask = batch["loss_mask"] > 0
    values = logprobs[mask]
    values.sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return values.detach(), grads


def test_shared_prefix_matches_plain_forward_and_backward(tiny):
    model, tokenizer = tiny
    plain_values, plain_grads = loss_and_grads(model, tokenizer, share=False)
    shared_values, shared_grads = loss_and_grads(model, tokenizer, share=True)
    assert torch.allclose(plain_values, shared_values, atol=1e-5)
    assert plain_grads.keys() == shared_grads.keys()
    for name in plain_grads:
        assert torch.allclose(plain_grads[name], shared_grads[name], atol=1e-5, rtol=1e-4), name


def updated_weights(model, tokenizer, skip, advantages):
    import copy

    policy = copy.deepcopy(model)
    learner = Learner(
        policy,
        tokenizer,
        AlgorithmConfig(),
        TrainConfig(skip_zero_advantage=skip, lr=1e-2),
        temperature=1.0,
        autocast_bf16=False,
    )
    for step in range(2):  # the second step also checks that optimizer momentum is applied alike
        experiences = batch_of_groups()
        for experience, advantage in zip(experiences, advantages[step]):
            experience.advantage = advantage
        metrics = learner.update(experiences)
    return policy.state_dict(), metrics


def test_skipping_zero_advantage_experiences_changes_nothing(tiny):
    model, tokenizer = tiny
    advantages = [[0.5, 0.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]]
    skipped, metrics = updated_weights(model, tokenizer, True, advantages)
    computed, reference = updated_weights(model, tokenizer, False, advantages)
    assert metrics["skipped_zero_advantage"] == 5 and reference["skipped_zero_advantage"] == 0
    assert metrics["trained_tokens"] == reference["trained_tokens"]
    for name in computed:
        assert torch.allclose(skipped[name], computed[name], atol=1e-6), name
    assert any(not torch.equal(computed[name], model.state_dict()[name]) for name in computed)
