"""A fully fine-tuned policy's KL reference is frozen, so under bf16 autocast it is held in bf16 (half the memory,
14 GiB less at 7B) and scores as the fp32 policy does under autocast; `r3l plan` counts it so."""

import torch

from r3l.build import frozen_reference
from r3l.models import load_policy
from r3l.plan import Layout, reference_bytes


def test_the_reference_is_bf16_under_autocast_and_the_models_dtype_without():
    model, _ = load_policy("tiny-random")
    under_autocast, plain = frozen_reference(model, autocast=True), frozen_reference(model, autocast=False)
    assert {p.dtype for p in under_autocast.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in plain.parameters()} == {torch.float32}
    assert not any(p.requires_grad for p in under_autocast.parameters())
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the policy keeps its fp32 master weights


def test_the_bf16_reference_scores_as_the_policy_does_under_autocast():
    model, _ = load_policy("tiny-random")
    reference = frozen_reference(model, autocast=True)
    tokens = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        policy_logprobs = model(tokens).logits.float().log_softmax(-1)
        reference_logprobs = reference(tokens).logits.float().log_softmax(-1)
    assert (policy_logprobs - reference_logprobs).abs().max() < 0.05  # bf16 rounding of the norms' weights only


def test_plan_counts_the_reference_in_bf16_under_autocast():
    layout = Layout(
        ranks=1, model_bytes=4, lora_rank=None, lora_targets=(), gradient_checkpointing=False, micro_batch=1,
        context=64, trained_tokens=16, kl_reference=True, generator="hf", vllm_share=0.4, vllm_sleeps=True,
        sequences=8, decoded_at_once=8,
    )  # fmt: skip
    assert reference_bytes(layout) == 2
    assert reference_bytes(Layout(**{**layout.__dict__, "autocast": False})) == 4
