"""CUDA checks (skipped without a GPU): the learner's bf16 forward/backward stays finite and the shared-prefix
path equals the plain one; recording the machine starts no CUDA. `bash scripts/gpu_check.sh` runs them with the
default job on CUDA."""

import copy
import math
import random
import subprocess
import sys

import pytest
import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.experience import Experience
from r3l.learner.batching import collate, collate_shared_prefix
from r3l.learner.learner import Learner

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def unequal_prefix_batch(vocab: int, seed: int = 0) -> list[Experience]:
    """Two groups whose prompts differ in length (64 and 50 tokens, so the longer one fills the cuDNN tile
    that misbehaves: 64 mod 128), with replies of a few lengths."""
    rng = random.Random(seed)
    experiences = []
    for group, prompt_length in (("long", 64), ("short", 50)):
        prompt = [rng.randrange(vocab) for _ in range(prompt_length)]
        for reply_length, reward in ((14, 1.0), (9, 0.0), (78, 1.0), (3, 0.0)):
            tokens = prompt + [rng.randrange(vocab) for _ in range(reply_length)]
            experiences.append(
                Experience(
                    group=group,
                    kind="base",
                    tokens=tokens,
                    loss_mask=[0] * prompt_length + [1] * reply_length,
                    logprobs=[0.0] * len(tokens),
                    reward=reward,
                    advantage=reward - 0.5,
                )
            )
    return experiences


def logprobs_and_grads(model, tokenizer, share: bool):
    learner = Learner(
        model, tokenizer, AlgorithmConfig(), TrainConfig(share_prefix=share), temperature=1.0, autocast_bf16=True
    )
    experiences = unequal_prefix_batch(model.config.vocab_size)
    batch = collate_shared_prefix(experiences, 0) if share else collate(experiences, 0)
    batch = {name: tensor.cuda() for name, tensor in batch.items()}
    model.zero_grad()
    logprobs, _ = learner._logprobs(model, batch)
    values = logprobs[batch["loss_mask"] > 0]
    (values * torch.linspace(-1, 1, len(values), device=values.device)).sum().backward()
    grads = {name: p.grad.float().clone() for name, p in model.named_parameters() if p.grad is not None}
    return values.detach().float(), grads


@pytest.fixture(scope="module")
def cuda_tiny(tiny):
    model, tokenizer = tiny
    return copy.deepcopy(model).cuda(), tokenizer


def test_shared_prefix_equals_plain_in_bf16_on_cuda(cuda_tiny):
    model, tokenizer = cuda_tiny
    plain_values, plain_grads = logprobs_and_grads(model, tokenizer, share=False)
    shared_values, shared_grads = logprobs_and_grads(model, tokenizer, share=True)
    assert torch.isfinite(plain_values).all() and torch.isfinite(shared_values).all()
    assert (plain_values - shared_values).abs().mean() < 2e-2
    for name, plain in plain_grads.items():
        shared = shared_grads[name]
        assert torch.isfinite(shared).all(), name
        assert (shared - plain).norm() <= 0.05 * plain.norm() + 1e-6, name


def test_learner_update_is_finite_on_cuda(cuda_tiny):
    model, tokenizer = cuda_tiny
    policy = copy.deepcopy(model)
    learner = Learner(policy, tokenizer, AlgorithmConfig(), TrainConfig(lr=1e-3), temperature=1.0)
    for _ in range(3):
        metrics = learner.update(unequal_prefix_batch(policy.config.vocab_size))
        assert metrics["nonfinite_update"] == 0.0 and math.isfinite(metrics["grad_norm"])
    assert all(torch.isfinite(p).all() for p in policy.parameters())


def test_learner_attention_backward_is_finite_where_cudnn_fails():
    """pytorch/pytorch#196678: every logit ~ -120 and key length 64 mod 128 gave NaN query gradients with
    cuDNN on H100/H200; the learner takes cuDNN out of the kernel choice."""
    from r3l.learner.attention import avoid_cudnn_attention

    avoid_cudnn_attention(torch.device("cuda"))
    torch.manual_seed(0)
    length, dim = 704, 64
    query = torch.randn(1, 1, length, dim, device="cuda", dtype=torch.bfloat16) * 0.1
    key = torch.randn(1, 1, length, dim, device="cuda", dtype=torch.bfloat16) * 0.1
    value = torch.randn(1, 1, length, dim, device="cuda", dtype=torch.bfloat16)
    query[..., 0], key[..., 0] = 1.0, -120 * math.sqrt(dim)
    for tensor in (query, key, value):
        tensor.requires_grad_()
    mask = torch.ones(length, length, dtype=torch.bool, device="cuda").tril()[None, None]
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    out.backward(torch.randn_like(out))
    assert torch.isfinite(query.grad).all() and torch.isfinite(key.grad).all()


@pytest.mark.parametrize("mode", ["static", "compiled"])
def test_static_and_compiled_decoding_equal_the_dynamic_loop_on_cuda(cuda_tiny, mode):
    """generator.decode=static|compiled (CUDA graphs) on the GPU: greedy tokens equal the dynamic loop's (fp32)."""
    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = cuda_tiny
    prompts = [tokenizer(text).input_ids for text in ("short", "a longer prompt about several things", "2+2?")]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    expected = HFGenerator(model, tokenizer, dtype=torch.float32).generate(prompts, params, n=2)
    generator = HFGenerator(model, tokenizer, dtype=torch.float32, decode=mode)
    for _ in range(2):  # the second call replays what the first captured
        got = generator.generate(prompts, params, n=2)
        assert [[c.tokens for c in row] for row in got] == [[c.tokens for c in row] for row in expected]


def r3l_sync_sites(learner, experiences) -> list[str]:
    """Where r3l's own code waited for the GPU during one update (torch's sync debug mode names each caller)."""
    import warnings

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            learner.update(experiences)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename.split('/r3l/')[-1]}:{w.lineno}" for w in caught if "/r3l/" in w.filename]


def test_the_learner_waits_for_the_gpu_per_pass_not_per_micro_batch(cuda_tiny):
    """Issue 35 #8: metric sums stay on the device and are read once per pass, trained positions and forward work
    are found on the host, batches go over from pinned memory; so r3l's own waits do not grow with micro-batches
    (transformers' forward may wait on its own: not counted)."""
    model, tokenizer = cuda_tiny
    experiences = unequal_prefix_batch(model.config.vocab_size)
    sites = {}
    for size in (8, 2):
        learner = Learner(
            copy.deepcopy(model), tokenizer, AlgorithmConfig(), TrainConfig(micro_batch_size=size), temperature=1.0
        )
        learner.update(experiences)  # the first update's one-time work (optimizer state) aside
        sites[size] = r3l_sync_sites(learner, experiences)
    print(sites)
    assert len(sites[2]) == len(sites[8]), sites
    assert len(sites[8]) <= 3, sites


def test_naming_the_gpus_starts_no_cuda_in_a_process_that_had_none():
    """A trainer that forks GPU workers after recording its session must not have initialised CUDA by it."""
    probe = (
        "import torch; from r3l.provenance import machine; m = machine(); "
        "print(len(m['gpus']), torch.cuda.is_initialized())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, initialised = done.stdout.split()
    assert int(count) >= 1 and initialised == "False"
