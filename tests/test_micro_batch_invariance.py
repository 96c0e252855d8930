"""One update's gradient does not depend on how its batch is cut into micro-batches: one experience per pass,
padding-aware cuts (train.micro_batch_overhead), a cap on a pass's positions (train.micro_batch_tokens) and one
pass for all give the same gradient, with and without
shared prefixes, for a policy-loss part beside an SFT part normalised on its own (R3L's batches)."""

import pytest
import torch

from r3l.config import AlgorithmConfig, TrainConfig
from r3l.experience import Experience
from r3l.learner.learner import Learner
from tests.helpers.experience_groups import shared_prompt_groups

# (micro_batch_size, micro_batch_overhead, micro_batch_tokens)
CUTS = [(1, 0, None), (3, 64, None), (4, 0, None), (16, 64, None), (16, 64, 40)]


def batch(vocab: int) -> list[Experience]:
    """Two groups sharing a prompt each, replies of 3-11 tokens, one zero advantage, two SFT samples."""
    generator = torch.Generator().manual_seed(0)
    groups = (("a", 9, [1.0, 0.0, -0.5, 0.25]), ("b", 4, [0.5, -0.5]))
    records = shared_prompt_groups(vocab, groups, lambda index, prompt: 3 + 2 * index + prompt % 3, generator)
    for length in (14, 30):  # a reflection trained as SFT: long, its own group
        tokens = torch.randint(3, vocab, (length,), generator=generator).tolist()
        records.append(
            Experience(
                group=f"sft{length}",
                kind="sft",
                tokens=tokens,
                loss_mask=[0] * 6 + [1] * (length - 6),
                logprobs=[-1.0] * length,
                reward=1.0,
                advantage=1.0,
                objective="sft",
            )
        )
    return records


def gradient(size: int, overhead: int, tokens: int | None, share_prefix: bool) -> tuple[torch.Tensor, float]:
    from r3l.models import load_policy

    model, tokenizer = load_policy("tiny-random")
    model = model.float()
    algorithm = AlgorithmConfig(kl_coef=0.0, sft_loss="nll")
    train = TrainConfig(
        micro_batch_size=size,
        micro_batch_overhead=overhead,
        micro_batch_tokens=tokens,
        share_prefix=share_prefix,
        grad_clip=1e9,
    )
    learner = Learner(model, tokenizer, algorithm, train, temperature=1.0, autocast_bf16=False)
    seen = []
    learner.optimizer.step = lambda: seen.append(torch.cat([p.grad.flatten().clone() for p in model.parameters()]))
    metrics = learner.update(batch(model.config.vocab_size))
    return seen[0], metrics["grad_norm"]


@pytest.mark.filterwarnings(r"ignore:Seems like `optimizer.step\(\)` has been overridden")  # by the test, on purpose
@pytest.mark.parametrize("share_prefix", [False, True])
def test_the_gradient_does_not_depend_on_the_micro_batches(share_prefix):
    torch.manual_seed(0)
    reference, reference_norm = gradient(*CUTS[0], share_prefix)
    assert reference_norm > 0 and reference.abs().max() > 0
    for size, overhead, tokens in CUTS[1:]:
        step, norm = gradient(size, overhead, tokens, share_prefix)
        assert norm == pytest.approx(reference_norm, rel=1e-5), (size, overhead, tokens)
        torch.testing.assert_close(step, reference, rtol=1e-4, atol=1e-5 * float(reference.abs().max()))
