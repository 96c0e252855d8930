"""The HF generator's CPU attention hands SDPA grouped keys and values as they are (r3l/models/grouped_attention.py):
bit for bit what transformers' SDPA computes after repeating them, taken only by CPU inference calls of more than one
query position under a mask, and a generator with it replies and scores exactly as one without it, its kept keys
reused across calls."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from r3l.models import grouped_attention
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator


class Grouped(torch.nn.Module):
    """What the attention functions read of an attention layer: its query heads per key/value head."""

    num_key_value_groups = 3
    is_causal = True


def left_padded_mask(lengths: list[int], queries: int, width: int) -> torch.Tensor:
    """transformers' boolean SDPA mask `[rows, 1, queries, width]`: causal over the last `queries` positions of
    rows left-padded to `width`."""
    keys, positions = torch.arange(width), torch.arange(width - queries, width)
    starts = torch.tensor([width - length for length in lengths])
    allowed = (keys[None, None, :] <= positions[None, :, None]) & (keys[None, None, :] >= starts[:, None, None])
    return allowed[:, None]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_keys_attend_bit_for_bit_as_repeated_ones(dtype):
    generator = torch.Generator().manual_seed(0)
    rows, kv_heads, queries, width, dim = 3, 2, 5, 40, 16
    query = torch.randn(rows, kv_heads * Grouped.num_key_value_groups, queries, dim, generator=generator).to(dtype)
    key, value = (torch.randn(rows, kv_heads, width, dim, generator=generator).to(dtype) for _ in range(2))
    mask = left_padded_mask([40, 31, 12], queries, width)
    module = Grouped()
    with torch.inference_mode():
        assert grouped_attention.takes_grouped(module, query, mask)
        mine, _ = grouped_attention.grouped_attention(module, query, key, value, mask, scaling=0.25)
        theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert mine.shape == theirs.shape == (rows, queries, kv_heads * Grouped.num_key_value_groups, dim)
    assert torch.equal(mine, theirs)


def test_only_cpu_inference_calls_of_several_positions_under_a_mask_take_the_grouped_path():
    module, mask = Grouped(), left_padded_mask([8, 6], 4, 8)
    query = torch.zeros(2, 6, 4, 16)
    with torch.inference_mode():
        assert grouped_attention.takes_grouped(module, query, mask)
        assert not grouped_attention.takes_grouped(module, query[:, :, :1], mask[:, :, :1])  # decode: packed already
        assert not grouped_attention.takes_grouped(module, query, None)  # no mask: transformers groups them itself
        assert not grouped_attention.takes_grouped(module, query, mask, sliding_window=4)
        single = Grouped()
        single.num_key_value_groups = 1
        assert not grouped_attention.takes_grouped(single, query, mask)
    assert not grouped_attention.takes_grouped(module, query, mask)  # gradients: transformers' own order of sums


def test_a_generator_replies_and_scores_exactly_as_with_transformers_sdpa(tiny, monkeypatch):
    model, tokenizer = tiny  # 4 query heads over 2
    taken = []
    takes = grouped_attention.takes_grouped
    monkeypatch.setattr(grouped_attention, "takes_grouped", lambda *a, **k: taken.append(takes(*a, **k)) or taken[-1])
    grouped, plain = HFGenerator(model, tokenizer), HFGenerator(model, tokenizer)
    plain.model.set_attn_implementation("sdpa")
    assert grouped.model.config._attn_implementation == grouped_attention.NAME
    draw = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 1000, (n,), generator=draw).tolist() for n in (30, 21, 12)]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    turns = {name: [] for name in ("grouped", "plain")}
    for generator, name in ((grouped, "grouped"), (plain, "plain")):
        first = generator.generate(prompts, params)
        later = [p + g[0].tokens + [7, 8, 9] for p, g in zip(prompts, first)]  # the next turn: kept keys reused
        turns[name] = [first, generator.generate(later, params)]
    assert any(taken) and grouped.stats["kv_reused_positions"] > 0
    for mine, theirs in zip(turns["grouped"], turns["plain"]):
        assert [g[0].tokens for g in mine] == [g[0].tokens for g in theirs]
        assert [g[0].logprobs for g in mine] == [g[0].logprobs for g in theirs]
