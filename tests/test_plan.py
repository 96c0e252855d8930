"""`r3l plan`: parameter counts and per-device memory on hand-computed numbers, the published sizes of the models the
recipes name, and a layout that cannot fit refused in one line naming the setting to change."""

from dataclasses import replace

import pytest

from r3l.config import load_config
from r3l.learner.learner import per_layer_units
from r3l.plan import (
    GIB,
    HUB_SHAPES,
    Layout,
    Shape,
    candidate_changes,
    fsdp_per_layer,
    layout_of,
    lora_parameter_count,
    memory_parts,
    parameter_count,
    peak_gib,
    positions_per_pass,
    trained_per_row,
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
    assert parts["weights (fp32)"] == 348 * 4 / 2 and parts["gradients (fp32)"] == 348 * 4 / 2
    assert parts["Adam state (fp32, 2 moments)"] == 348 * 8 / 2
    assert parts["activations"] == 52 * 3 * 4 * 2  # 52 bytes per token and unit under autocast, every layer kept
    assert parts["trained logits (fp32, x2)"] == 2 * 10 * 8
    assert parts["autocast's bf16 weight copies"] == 348 * 2  # saved by each matmul for the backward
    assert parts["KL reference (a full copy)"] == 348 * 2  # frozen, so held in bf16 under autocast
    assert parts["rank 0's unsharded copy"] == 348 * 4
    assert parts["vLLM (its share of the device)"] == 0.5 * GIB
    resident = 348 * 2 + 348 * 2 + 348 * 4 + 348 * 2 + 348 * 4  # weights, grads, Adam, reference, unsharded copy
    asleep = peak_gib(memory_parts(TOY, layout, 1.0), layout)
    assert asleep == pytest.approx((resident + 0.5 * GIB) / GIB * 1.1)  # vLLM asleep: the larger of it and training
    awake = Layout(**{**layout.__dict__, "vllm_sleeps": False})
    assert peak_gib(memory_parts(TOY, awake, 1.0), awake) == pytest.approx(
        (resident + 0.5 * GIB + 52 * 3 * 4 * 2 + 160 + 348 * 2) / GIB * 1.1
    )


def test_a_multi_turn_row_trains_every_turn_within_its_context():
    assert trained_per_row(False, max_turns=25, max_new_tokens=512, context=20480) == 512  # one reply
    assert trained_per_row(True, max_turns=25, max_new_tokens=512, context=20480) == 12800  # 25 replies
    assert trained_per_row(True, max_turns=50, max_new_tokens=512, context=20480) == 20480  # no more than the context
    # the ALFWorld recipe: micro-batches of 2 episodes of up to 25 turns x 512 tokens, at Qwen2.5-7B's vocabulary
    config = load_config("examples/paper/r3l_alfworld_qwen7b.yaml", ["train.micro_batch_size=2"])
    layout = layout_of(config)
    assert layout.trained_tokens == 2 * 12800
    logits = memory_parts(HUB_SHAPES["Qwen/Qwen2.5-7B-Instruct"], layout, 80.0)["trained logits (fp32, x2)"]
    assert logits == pytest.approx(25600 * 152064 * 8 / GIB)  # 29.0 GiB, not the 1.2 of one reply per row


def test_checkpointed_layer_inputs_keep_the_weights_dtype():
    # under autocast the residual stream stays in the master weights' dtype: fp32 inputs for fp32 weights
    checkpointed = replace(HAND_LAYOUT, gradient_checkpointing=True)
    kept = memory_parts(TOY, checkpointed, 1.0)["activations"] * GIB
    assert kept == 2 * 3 * 4 * 4 + 52 * 3 * 4  # 2 layers' inputs (3 positions x 4 units, fp32) + one layer live
    bf16 = replace(checkpointed, model_bytes=2)
    assert memory_parts(TOY, bf16, 1.0)["activations"] * GIB == 2 * 3 * 4 * 2 + 52 * 3 * 4
    fp32 = replace(HAND_LAYOUT, autocast=False)  # no autocast on fp32 weights: fp32 activations
    assert memory_parts(TOY, fp32, 1.0)["activations"] * GIB == 78 * 3 * 4 * 2
    assert memory_parts(TOY, fp32, 1.0)["autocast's bf16 weight copies"] == 0.0


def test_bf16_master_weights_count_bf16_weights_and_gradients_and_fp32_adam():
    parts = {k: v * GIB for k, v in memory_parts(TOY, replace(HAND_LAYOUT, model_bytes=2), 1.0).items()}
    assert parts["weights (bf16)"] == parts["gradients (bf16)"] == 348 * 2 / 2
    assert parts["Adam state (fp32, 2 moments)"] == 348 * 8 / 2
    lora = {k: v * GIB for k, v in memory_parts(TOY, replace(HAND_LAYOUT, model_bytes=2, lora_rank=2), 1.0).items()}
    assert lora["gradients (fp32)"] == 0  # no target named: no adapters; PEFT keeps adapters fp32


def test_a_single_fsdp_unit_gathers_the_whole_policy_while_it_trains():
    assert [fsdp_per_layer(s, g) for s in (True, False) for g in (True, False)] == [
        per_layer_units(s, g) for s in (True, False) for g in (True, False)
    ]
    one_unit = replace(HAND_LAYOUT, per_layer_units=False)
    gathered = memory_parts(TOY, one_unit, 1.0)["one FSDP unit gathered (weights, gradients)"] * GIB
    assert gathered == 348 * 4 + 348 * 4  # the full fp32 weights and their gradients, on every rank
    assert memory_parts(TOY, HAND_LAYOUT, 1.0)["one FSDP unit gathered (weights, gradients)"] == 0.0
    alone = replace(one_unit, ranks=1)  # one process: nothing is sharded, nothing gathered
    assert memory_parts(TOY, alone, 1.0)["one FSDP unit gathered (weights, gradients)"] == 0.0
    recipe = load_config("examples/layout_one_gpu_colocated.yaml", ["distributed.learner_ranks=2"])
    assert layout_of(recipe).per_layer_units  # gradient checkpointing: per-layer units
    shared = load_config(
        "examples/layout_one_gpu_colocated.yaml", ["distributed.learner_ranks=2", "model.gradient_checkpointing=false"]
    )
    assert not layout_of(shared).per_layer_units


def test_a_positions_cap_bounds_the_positions_a_pass_keeps_activations_for():
    rows = replace(HAND_LAYOUT, micro_batch=4, context=100)
    assert positions_per_pass(rows) == 400
    assert positions_per_pass(replace(rows, micro_batch_tokens=150)) == 150
    assert positions_per_pass(replace(rows, micro_batch_tokens=50)) == 100  # a sequence over the cap: a pass alone
    assert positions_per_pass(replace(rows, micro_batch_tokens=1000)) == 400
    # a group's shared prompt (train.share_prefix) runs once: 4 rows of 100 in 2 groups of 2, prompts of 60
    assert positions_per_pass(replace(rows, group_size=2, shared_prompt=60)) == 400 - 2 * 60
    assert positions_per_pass(replace(rows, group_size=8, shared_prompt=60)) == 400 - 3 * 60  # one group
    capped = replace(rows, micro_batch_tokens=150, trained_tokens=200)
    assert memory_parts(TOY, capped, 1.0)["activations"] * GIB == 52 * 150 * 4 * 2
    assert memory_parts(TOY, capped, 1.0)["trained logits (fp32, x2)"] * GIB == 150 * 10 * 8  # no more than kept
    uncapped = replace(capped, micro_batch_tokens=None)
    assert memory_parts(TOY, uncapped, 1.0)["trained logits (fp32, x2)"] * GIB == 200 * 10 * 8


def test_plan_prints_the_table_and_refuses_what_cannot_fit_in_one_line():
    fits = run_cli("plan", "examples/layout_one_gpu_colocated.yaml")
    assert fits.returncode == 0, fits.stderr
    assert "| Adam state (fp32, 2 moments) | 11.5 |" in fits.stdout and "of 80 |" in fits.stdout
    seven = run_cli("plan", "examples/layout_one_gpu_colocated.yaml", "model.name=Qwen/Qwen2.5-7B-Instruct")
    assert seven.returncode == 2 and seven.stderr.count("\n") == 1
    assert "does not fit in 80 GiB per GPU: set distributed.learner_ranks=16" in seven.stderr
    lora = run_cli(
        "plan",
        "examples/layout_one_gpu_colocated.yaml",
        "model.name=Qwen/Qwen2.5-7B-Instruct",
        "model.lora.enabled=true",
    )
    assert lora.returncode == 0, lora.stdout + lora.stderr
    unknown = run_cli("plan", "model.name=someone/unknown-model")
    assert unknown.returncode == 2 and "does not know the shape of 'someone/unknown-model'" in unknown.stderr


def test_a_hint_is_checked_to_fit_before_it_is_given():
    # the 7B on one GPU: the fewest ranks that fit (8 leave rank 0 at 82 GiB: its unsharded fp32 copy, 28 GiB)
    seven = ("examples/layout_one_gpu_colocated.yaml", "model.name=Qwen/Qwen2.5-7B-Instruct")
    refused = run_cli("plan", *seven)
    setting = refused.stderr.split(": set ")[1].split()[0]
    assert setting == "distributed.learner_ranks=16"
    assert run_cli("plan", *seven, setting).returncode == 0  # the hint, followed, fits
    assert run_cli("plan", *seven, "distributed.learner_ranks=8").returncode == 2  # and is the smallest that does
    # the ALFWorld recipe on 40 GiB GPUs: no single setting fits, and plan says so instead of a hint that fails
    recipe = run_cli("plan", "examples/paper/r3l_alfworld_qwen7b.yaml", "--gpu-memory", "40")
    assert recipe.returncode == 2 and recipe.stderr.count("\n") == 1
    assert "no single setting fits it; the largest parts: rank 0's unsharded copy 28.4 GiB" in recipe.stderr


def test_each_candidate_change_is_the_layout_the_setting_gives():
    layout = replace(
        HAND_LAYOUT, micro_batch=4, trained_tokens=8, ranks=1, vllm_sleeps=False, per_layer_units=False, shared_prompt=2
    )
    changes = dict(candidate_changes(layout))
    assert (
        changes["train.micro_batch_size=2"].trained_tokens == 4 and changes["train.micro_batch_size=1"].micro_batch == 1
    )
    assert changes["distributed.learner_ranks=2"].ranks == 2 and "distributed.learner_ranks=128" not in changes
    checkpointed = changes["model.gradient_checkpointing=true"]  # which turns the shared-prefix forward off
    assert checkpointed.gradient_checkpointing and checkpointed.per_layer_units and checkpointed.shared_prompt == 0
    assert changes["generator.sleep=true"].vllm_sleeps
    assert not changes["model.lora.enabled=true"].kl_reference  # LoRA's reference is its adapters off
    assert not changes["algorithm.kl_coef=0 (no reference model)"].kl_reference
    names = [name for name, _ in candidate_changes(layout)]
    assert names.index("train.micro_batch_size=2") < names.index("train.micro_batch_size=1")  # the largest first


def test_a_cpu_plan_counts_the_process_and_its_runtime():
    small = run_cli("plan", "--device", "cpu", "--gpu-memory", "100")
    assert small.returncode == 0, small.stderr
    assert "| the training process (resident) | GiB |" in small.stdout and "| CPU runtime" in small.stdout
    assert "vLLM" not in small.stdout and "| generator copy + KV cache |" in small.stdout
    tight = run_cli("plan", "--device", "cpu", "--gpu-memory", "1")
    assert tight.returncode == 2 and "does not fit in 1 GiB of memory: " in tight.stderr
    wrong = run_cli("plan", "--device", "tpu")
    assert wrong.returncode == 2 and "--device tpu: use cuda or cpu" in wrong.stderr
