"""A LoRA policy's weight sync merges its adapters out of place: 100 syncs leave a bf16 base bit for bit as it was
(PEFT's in-place merge and unmerge moved a third of its elements), and what the generator gets is the merged model."""

import copy

import pytest
import torch

from r3l.config import LoraConfig
from r3l.learner.learner import apply_lora
from r3l.learner.lora_merge import MergedLora, base_checksum
from r3l.learner.weights import merged_state_dict
from r3l.models import load_policy


def lora_policy(dtype: torch.dtype):
    model, _ = load_policy("tiny-random", dtype)
    torch.manual_seed(0)
    policy = apply_lora(model, LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))
    with torch.no_grad():
        noise = torch.Generator().manual_seed(1)
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapters a delta, small against the base
                parameter.add_(torch.randn(parameter.shape, generator=noise) * 0.01)
    return policy


def base_weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in policy.get_base_model().state_dict().items() if "lora_" not in k}


def test_a_hundred_syncs_leave_a_bf16_base_bit_identical():
    policy = lora_policy(torch.bfloat16)
    before, checksum = base_weights(policy), base_checksum(policy)
    generator_copy = load_policy("tiny-random", torch.bfloat16)[0]  # a plain model, as the HF generator holds
    for _ in range(100):
        with merged_state_dict(policy) as weights:
            generator_copy.load_state_dict(dict(weights))
    after = base_weights(policy)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert base_checksum(policy) == checksum


def test_in_place_merging_drifts_a_bf16_base_and_the_checksum_sees_it():
    """What the sync did before, so the guard is shown to catch it."""
    policy = lora_policy(torch.bfloat16)
    before, checksum = base_weights(policy), base_checksum(policy)
    for _ in range(20):
        policy.merge_adapter()
        policy.unmerge_adapter()
    after = base_weights(policy)
    changed = sum((after[k] != before[k]).sum().item() for k in before)
    assert changed > 0
    assert base_checksum(policy) != checksum


def test_the_merged_weights_are_merge_and_unloads_under_a_plain_models_names():
    policy = lora_policy(torch.float32)
    expected = copy.deepcopy(policy).merge_and_unload().state_dict()
    merged = MergedLora(policy)
    assert set(merged) == set(expected) and len(merged) == len(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-6)
    adapted = [name for name in expected if "q_proj.weight" in name]
    assert adapted and all(
        not torch.equal(merged[n], policy.get_base_model().state_dict()[n.replace("q_proj.", "q_proj.base_layer.")])
        for n in adapted
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_merged_sum_is_rounded_once_from_fp32(dtype):
    policy = lora_policy(dtype)
    merged = MergedLora(policy)
    name = next(n for n in merged if "q_proj.weight" in n)
    layer = policy.get_base_model().get_submodule(name.removesuffix(".weight"))
    exact = (
        layer.base_layer.weight.float()
        + (layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float()) * layer.scaling["default"]
    )
    assert merged[name].dtype == dtype
    assert torch.equal(merged[name], exact.to(dtype))
