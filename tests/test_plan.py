"""`r3l plan`: the memory arithmetic on hand-computed numbers, the known shapes, and the command's refusals."""

import json

import pytest

from r3l.config import load_config
from r3l.plan.architectures import KNOWN, Architecture, architecture
from r3l.plan.memory import GIB, Layout, device_peak, kv_cache_tokens, learner_parts, vllm_parts
from r3l.plan.report import make_plan, refusal
from tests.conftest import run_cli

# head size 2; per layer q 4x4, k 4x2, v 4x2, o 4x4, gate/up 4x8, down 8x4 = 144, norms 8: 152; two layers 304,
# tied embeddings 10x4 = 40, final norm 4: 348 parameters
SMALL = Architecture(hidden=4, layers=2, heads=2, kv_heads=1, intermediate=8, vocab=10)


def test_parameter_counts():
    assert SMALL.parameters == 348
    assert SMALL.lora_parameters(1, ["q_proj", "v_proj"]) == 2 * ((4 + 4) + (4 + 2))  # 28
    assert SMALL.kv_bytes_per_token() == 2 * 2 * 1 * 2 * 2  # keys and values, layers, KV heads, head size, bf16
    assert KNOWN["qwen/qwen2.5-1.5b-instruct"].parameters == pytest.approx(1.54e9, rel=0.01)  # biases left out
    assert KNOWN["qwen/qwen2.5-7b-instruct"].parameters == pytest.approx(7.61e9, rel=0.01)  # untied head
    assert KNOWN["qwen/qwen3-4b"].parameters == pytest.approx(4.02e9, rel=0.01)  # head_dim 128, not 2560/32
    assert KNOWN["meta-llama/llama-3.2-3b-instruct"].parameters == pytest.approx(3.21e9, rel=0.01)


def test_learner_parts_full_fine_tuning():
    parts = learner_parts(SMALL, Layout(dtype="float32", micro_batch=2, context=3))
    # 6 tokens; no checkpointing: 2 layers x (8 x 4 + 3 x 8) = 112 values a token in bf16, plus 10 logits x 8 bytes
    assert parts == {
        "weights": 1392,
        "gradients": 1392,
        "optimizer": 2784,
        "kl_reference": 0.0,
        "activations": 6 * 112 * 2 + 6 * 10 * 8,
    }
    checkpointed = learner_parts(SMALL, Layout(micro_batch=2, context=3, gradient_checkpointing=True))
    # each layer's input (2 x 4) plus one layer recomputed (8 x 4 + 3 x 8): 64 values a token
    assert checkpointed["activations"] == 6 * 64 * 2 + 6 * 10 * 8


def test_learner_parts_lora_sharded_with_reference():
    layout = Layout(dtype="bfloat16", lora_rank=1, lora_targets=("q_proj", "v_proj"), ranks=2, kl_reference=True)
    parts = learner_parts(SMALL, layout)
    assert parts["weights"] == (348 + 28) * 2 / 2 and parts["gradients"] == 28 * 2 / 2
    assert parts["optimizer"] == 2 * 28 * 2 / 2 and parts["kl_reference"] == 348 * 2  # the reference is whole


def test_vllm_and_the_peak():
    engine = vllm_parts(SMALL, 0.5, 2000)  # 1000 bytes: bf16 weights 696, KV cache 304 = 19 tokens of 16 bytes
    assert engine == {"vllm_weights": 696, "vllm_kv_cache": 304} and kv_cache_tokens(SMALL, 304) == 19
    parts = {"weights": 10, "gradients": 10, "optimizer": 20, "kl_reference": 5, "activations": 50}
    assert device_peak(parts, 100, sleeps=True) == max(10 + 20 + 5 + 100, 95)  # generating: 135
    assert device_peak(parts, 30, sleeps=True) == 95  # training
    assert device_peak(parts, 30, sleeps=False) == 125


def test_shapes_come_from_a_local_config(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 4,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "intermediate_size": 8,
                "vocab_size": 10,
            }
        )
    )
    assert architecture(str(tmp_path)) == SMALL
    with pytest.raises(Exception, match="is not known here; pass a local model directory"):
        architecture("someone/unknown-model")


def test_a_plan_from_a_config():
    config = load_config(
        None,
        [
            "model=Qwen/Qwen2.5-1.5B-Instruct",
            "generator=vllm",
            "train.micro_batch_size=2",
            "model.gradient_checkpointing=true",
            "agent.max_context_tokens=4096",
            "sampling.group_size=8",
            "train.tasks_per_step=16",
        ],
    )
    plan = make_plan(config, 80)
    assert plan.sequences == 128 and plan.tokens == 128 * 4096
    assert plan.layout.vllm_share == 0.4 and plan.vllm["vllm_weights"] == plan.arch.parameters * 2
    assert plan.fits and refusal(plan) is None
    assert plan.peak == pytest.approx(max(3 * 4 * plan.arch.parameters + 32 * GIB, sum(plan.parts.values())))


@pytest.mark.parametrize(
    "overrides, setting",
    [
        (["train.micro_batch_size=32"], "lower train.micro_batch_size"),
        (
            ["train.micro_batch_size=1", "model.gradient_checkpointing=true", "--gpu-memory", "40"],
            "model.lora.enabled=true",
        ),
        (
            ["generator=vllm", "generator.engine_args.gpu_memory_utilization=0.1", "--gpu-memory", "80"],
            "raise generator.engine_args.gpu_memory_utilization",
        ),
    ],
)
def test_refused_in_one_line_naming_the_setting(tmp_path, overrides, setting):
    result = run_cli("plan", "model=Qwen/Qwen2.5-7B-Instruct", *overrides, cwd=tmp_path)
    assert result.returncode == 2 and "per device (GiB):" in result.stdout
    assert len(result.stderr.strip().splitlines()) == 1 and setting in result.stderr


def test_fits(tmp_path):
    result = run_cli(
        "plan",
        "model=Qwen/Qwen2.5-1.5B-Instruct",
        "train.micro_batch_size=2",
        "model.gradient_checkpointing=true",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "of 80 GiB: fits" in result.stdout and "1.54B parameters" in result.stdout
