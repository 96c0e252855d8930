"""The generator's inverse-CDF sampler and its seeds: the right distribution, never a zero entry, and what a
prompt samples independent of the rest of its batch."""

import torch

from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator, inverse_cdf_sample
from r3l.rollout.seeds import RowDraws, row_seeds


def uniforms(rows, seed):
    return torch.rand((rows, 1), generator=torch.Generator().manual_seed(seed))


def test_inverse_cdf_sample_follows_the_distribution_and_skips_zeros():
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.2, 0.7, 0.0]]).repeat(100_000, 1)
    counts = torch.bincount(inverse_cdf_sample(probs, uniforms(100_000, 0)), minlength=6) / 100_000
    assert counts[0] == counts[2] == counts[5] == 0
    assert torch.allclose(counts[[1, 3, 4]], torch.tensor([0.1, 0.2, 0.7]), atol=0.01)


def test_inverse_cdf_sample_takes_unnormalised_rows():
    probs = torch.tensor([[3.0, 1.0], [0.0, 5.0]])
    # row 0: P(0) = 0.75, so draws below 0.75 pick 0 and above pick 1; row 1 always picks 1
    draws = torch.tensor([[0.7], [0.0], [0.8], [0.99]])
    assert inverse_cdf_sample(probs.repeat(2, 1), draws).tolist() == [0, 1, 1, 1]


def test_row_seeds_depend_on_the_prompt_and_its_earlier_rows_only():
    a, b = [1, 2, 3], [4, 5]
    together = row_seeds(9, [a, b, a])
    assert row_seeds(9, [b]) == [together[1]] and row_seeds(9, [a]) == [together[0]]
    assert len(set(together)) == 3  # the second copy of `a` gets its own seed
    assert row_seeds(9, [b, a, a]) == [together[1], together[0], together[2]]
    # "a twice, one sample each" draws what "a once, two samples" does
    assert row_seeds(9, [a], n=2) == [together[0], together[2]] and row_seeds(9, [a, b], n=2)[:2] == [
        together[0],
        together[2],
    ]
    assert row_seeds(10, [a]) != [together[0]] and row_seeds(None, [a, b], n=2) == [None] * 4
    assert all(0 <= s < 2**63 for s in together)


def test_row_draws_are_per_row_streams():
    draws = RowDraws([5, 6, 7], device=torch.device("cpu"))
    first = draws.uniform([0, 1, 2])
    assert torch.equal(first[1:], RowDraws([6, 7], device=torch.device("cpu")).uniform([0, 1]))
    assert torch.equal(draws.uniform([2]), RowDraws([7], device=torch.device("cpu")).uniform([0, 0])[1:])


def test_what_a_prompt_samples_does_not_depend_on_its_batch(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32, prefill_chunk=2)
    prompts = [tokenizer(text).input_ids for text in ("one", "a second, longer prompt", "three", "four")]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    whole = [[c.tokens for c in row] for row in generator.generate(prompts, params, n=3)]
    halves = [[c.tokens for c in row] for row in generator.generate(prompts[2:], params, n=3)]
    reversed_order = [[c.tokens for c in row] for row in generator.generate(prompts[::-1], params, n=3)]
    assert halves == whole[2:] and reversed_order == whole[::-1]
    assert len({tuple(t) for t in whole[1]}) > 1  # the n samples of a prompt differ
    copies = [row[0].tokens for row in generator.generate([prompts[1]] * 3, params, n=1)]
    assert copies == whole[1]  # three copies of a prompt sample what three samples of it do
