"""The HF generator on the tiny-random model: token-exact completions and log-probabilities."""

import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.experience import Experience
from r3l.learner.batching import collate
from r3l.learner.learner import Learner
from r3l.rollout.chat import PromptFormat, encode_prompt
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator


def prompts(tokenizer, questions):
    return [encode_prompt(tokenizer, PromptFormat().messages(q)) for q in questions]


def test_sampling_returns_n_completions_per_prompt_with_aligned_logprobs(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    out = generator.generate(
        prompts(tokenizer, ["hi", "what is 2+2?"]), SamplingParams(temperature=1.0, max_new_tokens=12, seed=0), n=3
    )
    assert [len(group) for group in out] == [3, 3]
    for completion in [c for group in out for c in group]:
        assert len(completion.tokens) == len(completion.logprobs) <= 12
        assert all(lp <= 0 for lp in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")
        assert completion.text == tokenizer.decode(completion.tokens, skip_special_tokens=True)


def test_seeded_sampling_is_reproducible(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=10, seed=7)
    batch = prompts(tokenizer, ["a", "bb"])
    first = [c.tokens for g in generator.generate(batch, params, n=2) for c in g]
    second = [c.tokens for g in generator.generate(batch, params, n=2) for c in g]
    assert first == second


def test_batched_greedy_equals_one_at_a_time(tiny):
    """Left padding, per-row positions and dropping finished rows must not change any row."""
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    batch = prompts(tokenizer, ["short", "a much longer question about many different things"])
    together = [g[0].tokens for g in generator.generate(batch, params)]
    alone = [generator.generate([p], params)[0][0].tokens for p in batch]
    assert together == alone


def test_learner_recomputes_exactly_the_generator_logprobs(tiny):
    """What is trained is what was generated: same tokens, same log-probabilities (fp32 both sides)."""
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    prompt_ids = prompts(tokenizer, ["check token exactness"])[0]
    completion = generator.generate([prompt_ids], SamplingParams(temperature=0.7, max_new_tokens=10, seed=1))[0][0]
    recomputed, generated, targets = learner_recomputation(model, tokenizer, prompt_ids, completion, 0.7)
    assert torch.allclose(recomputed, generated, atol=1e-4)
    assert targets == completion.tokens


def learner_recomputation(model, tokenizer, prompt_ids, completion, temperature):
    """(the learner's log-probabilities of a completion's tokens, the generator's, the tokens the learner
    scores), from the experience record of prompt + completion, in fp32."""
    record = Experience(
        group="g",
        kind="base",
        tokens=list(prompt_ids) + completion.tokens,
        loss_mask=[0] * len(prompt_ids) + [1] * len(completion.tokens),
        logprobs=[0.0] * len(prompt_ids) + completion.logprobs,
        reward=1.0,
    )
    learner = Learner(model, tokenizer, AlgorithmConfig(), TrainConfig(), temperature=temperature, autocast_bf16=False)
    batch = collate([record], tokenizer.pad_token_id)
    with torch.no_grad():
        recomputed, _ = learner._logprobs(model, batch)
    mask = batch["loss_mask"] > 0
    return recomputed[mask], batch["gen_logprobs"][mask], batch["targets"][mask].tolist()


def test_stop_strings_end_generation(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    batch = prompts(tokenizer, ["x"])
    free = generator.generate(batch, SamplingParams(temperature=0.0, max_new_tokens=6))[0][0]
    stop_text = tokenizer.decode(free.tokens[:2])
    stopped = generator.generate(batch, SamplingParams(temperature=0.0, max_new_tokens=6, stop=(stop_text,)))[0][0]
    assert stopped.finish_reason == "stop"
    assert len(stopped.tokens) <= 2 and stopped.tokens == free.tokens[: len(stopped.tokens)]
