"""`r3l plan`: parameter counts and per-device memory on hand-computed numbers, the published sizes of the models the
recipes name, and a layout that cannot fit refused in one line naming the setting to change."""

from dataclasses import replace

import pytest

from r3l.plan import (
    GIB,
    HUB_SHAPES,
    Layout,
    Shape,
    lora_parameter_count,
    memory_parts,
    parameter_count,
    peak_gib,
    positions_per_pass,
)
from tests.conftest import run_cli

TOY = Shape(hidden=4, intermediate=8, layers=2, heads=2, kv_heads=1, vocab=10, tied=True)


def test_parameter_counts_by_hand():
    # per layer: q 4x4 + o 4x4 = 32, k and v 4x2 each = 16, mlp 3 x 4 x 8 = 96, two norms 8 -> 152; two layers 304;
    # tied embedding 10 x 4 = 40; final norm 4 -> 348
    assert parameter_count(TOY) == 348
    assert parameter_count(Shape(4, 8, 2, 2, 1, 10, tied=False)) == 388  # an output head of its own
    # LoRA rank 2 on q (4 -> 4) and v (4 -> 2): 2 x (4 + 4) + 2 x (4 + 2) = 28 per layer
    assert lora_parameter_count(TOY, 2, ["q_proj", "v_proj"]) == 56


@pytest.mark.parametrize(
    "name, billions",
    [
        ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
        ("Qwen/Qwen2.5-7B-Instruct", 7.62),
        ("Qwen/Qwen3-4B", 4.02),
        ("meta-llama/Llama-3.2-3B-Instruct", 3.21),
        ("smollm2-135m-instruct", 0.135),
    ],
)
def test_the_known_shapes_have_their_published_sizes(name, billions):
    assert parameter_count(HUB_SHAPES[name]) / 1e9 == pytest.approx(billions, rel=0.01)


HAND_LAYOUT = Layout(
    ranks=2,
    model_bytes=4,
    lora_rank=None,
    lora_targets=(),
    gradient_checkpointing=False,
    micro_batch=1,
    context=3,
    trained_tokens=2,
    kl_reference=True,
    generator="vllm",
    vllm_share=0.5,
    vllm_sleeps=True,
    sequences=4,
    decoded_at_once=4,
)


def test_memory_per_device_by_hand():
    layout = HAND_LAYOUT
    parts = {name: value * GIB for name, value in memory_parts(TOY, layout, device_gib=1.0).items()}
    assert parts["weights"] == 348 * 4 / 2 and parts["gradients (fp32)"] == 348 * 4 / 2
    assert parts["Adam state (fp32, 2 moments)"] == 348 * 8 / 2
    assert parts["activations (bf16)"] == 34 * 3 * 4 * 2  # 34 values per token and unit, every layer kept
    assert parts["trained logits (fp32, x2)"] == 2 * 10 * 8
    assert parts["KL reference (a full copy)"] == parts["rank 0's unsharded copy"] == 348 * 4
    assert parts["vLLM (its share of the device)"] == 0.5 * GIB
    resident = 348 * 2 + 348 * 2 + 348 * 4 + 348 * 4 + 348 * 4  # weights, grads, Adam, reference, unsharded copy
    asleep = peak_gib(memory_parts(TOY, layout, 1.0), layout)
    assert asleep == pytest.approx((resident + 0.5 * GIB) / GIB * 1.1)  # vLLM asleep: the larger of it and training
    awake = Layout(**{**layout.__dict__, "vllm_sleeps": False})
    assert peak_gib(memory_parts(TOY, awake, 1.0), awake) == pytest.approx(
        (resident + 0.5 * GIB + 34 * 3 * 4 * 2 + 160) / GIB * 1.1
    )


def test_a_positions_cap_bounds_the_positions_a_pass_keeps_activations_for():
    rows = replace(HAND_LAYOUT, micro_batch=4, context=100)
    assert positions_per_pass(rows) == 400
    assert positions_per_pass(replace(rows, micro_batch_tokens=150)) == 150
    assert positions_per_pass(replace(rows, micro_batch_tokens=50)) == 100  # a sequence over the cap: a pass alone
    assert positions_per_pass(replace(rows, micro_batch_tokens=1000)) == 400
    capped = replace(rows, micro_batch_tokens=150, trained_tokens=200)
    assert memory_parts(TOY, capped, 1.0)["activations (bf16)"] * GIB == 34 * 150 * 4 * 2
    assert memory_parts(TOY, capped, 1.0)["trained logits (fp32, x2)"] * GIB == 150 * 10 * 8  # no more than kept
    uncapped = replace(capped, micro_batch_tokens=None)
    assert memory_parts(TOY, uncapped, 1.0)["trained logits (fp32, x2)"] * GIB == 200 * 10 * 8


def test_plan_prints_the_table_and_refuses_what_cannot_fit_in_one_line():
    fits = run_cli("plan", "examples/layout_one_gpu_colocated.yaml")
    assert fits.returncode == 0, fits.stderr
    assert "| Adam state (fp32, 2 moments) | 11.5 |" in fits.stdout and "of 80 |" in fits.stdout
    seven = run_cli("plan", "examples/layout_one_gpu_colocated.yaml", "model.name=Qwen/Qwen2.5-7B-Instruct")
    assert seven.returncode == 2 and seven.stderr.count("\n") == 1
    assert "does not fit in 80 GiB per GPU: set distributed.learner_ranks=2" in seven.stderr
    lora = run_cli(
        "plan",
        "examples/layout_one_gpu_colocated.yaml",
        "model.name=Qwen/Qwen2.5-7B-Instruct",
        "model.lora.enabled=true",
    )
    assert lora.returncode == 0, lora.stdout + lora.stderr
    unknown = run_cli("plan", "model.name=someone/unknown-model")
    assert unknown.returncode == 2 and "does not know the shape of 'someone/unknown-model'" in unknown.stderr
