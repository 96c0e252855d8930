"""LoRA's KL reference is the policy with its adapters off: no copy of the weights, and the KL it gives is the KL
to the untrained model (hand-computed against a plain copy of it)."""

import pytest
import torch

from r3l.build import trainable_policy
from r3l.config import AlgorithmConfig, LoraConfig, TrainConfig, load_config
from r3l.learner.learner import AdaptersOff, Learner, apply_lora
from tests.test_agent_pieces import TOKENS, policy_sample, sft_sample, target_logprobs


def plain_copy(model):
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def test_lora_with_kl_holds_no_copy_and_full_fine_tuning_does(tiny):
    model, _ = tiny
    lora = load_config(None, ["algorithm.kl_coef=0.01", "model.lora.enabled=true", "model.lora.r=2"])
    policy, reference = trainable_policy(lora, plain_copy(model))
    assert isinstance(reference, AdaptersOff) and callable(policy.disable_adapter)
    full = load_config(None, ["algorithm.kl_coef=0.01"])
    policy, reference = trainable_policy(full, plain_copy(model))
    assert isinstance(reference, torch.nn.Module) and reference is not policy
    assert not any(p.requires_grad for p in reference.parameters())
    _, none = trainable_policy(load_config(None, ["algorithm.kl_coef=0"]), plain_copy(model))
    assert none is None


def test_the_adapters_off_reference_is_the_untrained_model(tiny):
    """k2 KL = 0.5 (logp - logp_base)^2 over the 9 trained tokens, logp under adapters moved off zero."""
    model, tokenizer = tiny
    base = plain_copy(model)
    policy = apply_lora(plain_copy(model), LoraConfig(enabled=True, r=2, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    learner = Learner(
        policy,
        tokenizer,
        AlgorithmConfig(name="r3l", kl_coef=0.001, kl_estimator="k2"),
        TrainConfig(lr=1e-9),
        temperature=1.0,
        autocast_bf16=False,
        ref_model=AdaptersOff(),
    )
    logp, ref = target_logprobs(policy, TOKENS), target_logprobs(base, TOKENS)
    expected = float(sum((0.5 * (p - r) ** 2).sum() for p, r in zip(logp, ref))) / 9
    metrics = learner.update([policy_sample(TOKENS[0], -0.5), sft_sample(TOKENS[1], 1.0), sft_sample(TOKENS[2], 1.0)])
    assert expected > 1e-4 and metrics["kl"] == pytest.approx(expected, rel=1e-4)
    after = target_logprobs(policy, TOKENS)  # the adapters are on again after the reference's forward
    assert all(torch.allclose(a, p, atol=1e-4) for a, p in zip(after, logp))


def test_an_adapters_off_reference_needs_a_lora_policy(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="needs a LoRA"):
        Learner(
            plain_copy(model),
            tokenizer,
            AlgorithmConfig(kl_coef=0.01),
            TrainConfig(),
            temperature=1.0,
            ref_model=AdaptersOff(),
        )
