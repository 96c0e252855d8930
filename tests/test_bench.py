"""`r3l bench`: the instrument's arithmetic on hand-computed numbers and its plumbing on the tiny model.

Nothing here depends on how fast anything runs: timings are only checked to be recorded.
"""

import json
from pathlib import Path

import pytest
import torch

from r3l.bench import limits, registry, side_by_side
from r3l.bench.flops import ModelShape, decode_bytes, decode_flops, sequence_work, training_flops, utilization
from r3l.bench.machine import copy_bandwidth, gemm_peak
from r3l.bench.records import StepRecord
from r3l.bench.stats import Workload, equal_work_problems, paired_ratios, relative_difference, spread
from r3l.bench.trl_side import grpo_settings, trl_mismatches
from r3l.config import AlgorithmConfig, TrainConfig, load_config
from r3l.errors import UserError
from r3l.experience import Experience
from r3l.learner.batching import collate, collate_shared_prefix, forward_work
from r3l.learner.learner import Learner

SMALL = ModelShape(layers=2, hidden=4, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10)
TINY_BENCH = [
    "model=tiny-random",
    "train.tasks_per_step=2",
    "sampling.group_size=4",
    "sampling.max_new_tokens=6",
    "train.micro_batch_size=4",
    "logging.progress=false",
    "logging.tensorboard=false",
]


def test_model_shape_weights_by_hand():
    # attention: q and o 4x(2x2) each = 32, k and v 4x(1x2) each = 16; MLP 3 x 4 x 8 = 96; two layers
    assert SMALL.body_weights == 2 * (32 + 16 + 96) == 288
    assert SMALL.head_weights == 40
    assert SMALL.attention_flops_per_pair == 4 * 2 * 2 * 2 == 32
    assert SMALL.kv_values_per_position() == 2 * 2 * 1 * 2 == 8


def test_model_shape_accounts_for_every_weight_of_a_real_model(tiny):
    model, _ = tiny
    shape = ModelShape.from_config(model.config)
    norms = sum(p.numel() for name, p in model.named_parameters() if "norm" in name)
    assert shape.body_weights + shape.head_weights + norms == sum(p.numel() for p in model.parameters())  # tied head


def test_training_and_decode_arithmetic_by_hand():
    # forward: 2 x 288 x 5 positions + 32 x 15 pairs + 2 x 40 x 2 head positions = 2880 + 480 + 160; backward 2x that
    assert training_flops(SMALL, positions=5, attention_pairs=15, head_positions=2) == 3 * 3520
    assert sequence_work(3, 2) == {"positions": 5, "attention_pairs": 15, "head_positions": 2}
    # 3 steps read all 328 weights each, 10 cached positions read 8 values each, 2 bytes a value
    assert decode_bytes(SMALL, steps=3, kv_positions=10, bytes_per_value=2) == (3 * 328 + 10 * 8) * 2
    assert decode_flops(SMALL, rows=4, kv_positions=10) == 2 * 328 * 4 + 32 * 10
    assert utilization(10.0, 2.0, 5.0) == 1.0 and utilization(1.0, 0.0, 5.0) == 0.0


def experience(tokens, prompt_length, advantage=1.0, group="g"):
    n = len(tokens)
    return Experience(
        group=group,
        kind="base",
        tokens=tokens,
        loss_mask=[0] * prompt_length + [1] * (n - prompt_length),
        logprobs=[0.0] * n,
        reward=0.0,
        advantage=advantage,
    )


def test_forward_work_counts_plain_and_shared_prefix_batches():
    plain = collate([experience([1, 2, 3, 4], 2), experience([5, 6], 1)], pad_id=0)
    assert forward_work(plain) == {
        "positions": 6,
        "attention_pairs": 10 + 3,
        "padded_positions": 8,
        "head_positions": 3,
    }
    # both share the prefix [1, 2]; suffixes [3, 4, 5] and [3, 6] attend to it as well as to themselves
    shared = collate_shared_prefix([experience([1, 2, 3, 4, 5], 3), experience([1, 2, 3, 6], 3)], pad_id=0)
    assert forward_work(shared) == {
        "positions": 2 + 5,
        "attention_pairs": 3 + (6 + 6) + (4 + 3),
        "padded_positions": 2 + 6,
        "head_positions": 3,
    }
    # the same as the two whole sequences (15 and 10 pairs) with the shared prefix's 3 pairs counted once
    assert forward_work(shared)["attention_pairs"] == 15 + 10 - 3


def test_learner_reports_the_work_it_computed(tiny):
    model, tokenizer = tiny
    import copy

    learner = Learner(
        copy.deepcopy(model), tokenizer, AlgorithmConfig(), TrainConfig(), temperature=1.0, autocast_bf16=False
    )
    metrics = learner.update(
        [experience([1, 2, 3, 4, 5], 3, 1.0), experience([1, 2, 3, 6], 3, -1.0), experience([1, 2, 3, 7], 3, 0.0)]
    )  # the zero-advantage one is skipped
    assert metrics["forward_positions"] == 7 and metrics["forward_attention_pairs"] == 22
    assert metrics["forward_head_positions"] == 3 and metrics["trained_tokens"] == 4


def test_spread_and_paired_ratios():
    assert spread([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0}
    assert paired_ratios([4.0, 9.0], [2.0, 3.0]) == [2.0, 3.0]
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])
    assert relative_difference(100, 80) == 0.2 and relative_difference(0, 0) == 0.0


def workload(**changes):
    values = dict(
        settings={"group_size": 8, "dtype": "bfloat16"},
        prompt_ids=((1, 2), (3,)),
        completions=16,
        generated_tokens=100,
        trained_tokens=100,
    )
    return Workload(**{**values, **changes})


def test_equal_work_check():
    assert equal_work_problems(workload(), workload(generated_tokens=110, trained_tokens=110), 0.15) == []
    problems = equal_work_problems(
        workload(),
        workload(
            settings={"group_size": 4, "dtype": "bfloat16"},
            prompt_ids=((1, 2), (4,)),
            completions=8,
            generated_tokens=130,
        ),
        0.15,
    )
    assert problems[0] == "group_size: 8 vs 4"
    assert any("prompt tokens differ in 1 of 2" in p for p in problems)
    assert any(p.startswith("completions: 16 vs 8") for p in problems)
    assert any(p.startswith("generated_tokens: 100 vs 130") for p in problems)


def test_trl_settings_match_ours_and_refuse_what_trl_cannot_run(tmp_path):
    config = load_config(None, ["model.autocast_bf16=true", "generator.dtype=bfloat16"])
    assert trl_mismatches(config) == []
    assert trl_mismatches(load_config(None, [])) == []  # auto: both bf16, or both fp32, for this machine
    settings = grpo_settings(config, steps=7, output_dir=tmp_path, device_type="cpu")
    assert settings["per_device_train_batch_size"] * settings["gradient_accumulation_steps"] == 64
    assert (settings["num_generations"], settings["max_completion_length"], settings["beta"]) == (8, 24, 0.0)
    assert settings["bf16"] and settings["max_steps"] == 7 and not settings["gradient_checkpointing"]
    bad = load_config(
        None,
        ["algorithm.kl_coef=0.1", "train.micro_batch_size=24", "generator.dtype=float32", "model.autocast_bf16=true"],
    )
    problems = trl_mismatches(bad)
    assert len(problems) == 3 and "kl_coef" in problems[0] and "micro_batch_size=24" in problems[1]


def test_trl_generates_with_vllm_colocate_only_where_it_can():
    from r3l.bench.trl_side import trl_generator

    assert trl_generator("auto", "cuda", True) == "vllm"
    assert trl_generator("auto", "cuda", False) == trl_generator("auto", "cpu", True) == "hf"
    assert trl_generator("hf", "cuda", True) == "hf"
    with pytest.raises(UserError, match="--trl-generator vllm needs CUDA"):
        trl_generator("vllm", "cpu", True)
    settings = grpo_settings(load_config(None, []), steps=2, output_dir=Path("x"), device_type="cuda", generator="vllm")
    assert settings["use_vllm"] and settings["vllm_mode"] == "colocate"
    assert "use_vllm" not in grpo_settings(load_config(None, []), steps=2, output_dir=Path("x"), device_type="cpu")


def step(seconds, tokens, work=None, decode=None):
    return StepRecord(
        seconds=seconds,
        rollout_seconds=seconds / 2,
        train_seconds=seconds / 2,
        prompts=2,
        completions=8,
        generated_tokens=tokens,
        trained_tokens=tokens,
        work=work or {},
        decode=decode or {},
    )


def test_side_by_side_summary_and_table():
    class Context:
        config = load_config(None, TINY_BENCH)
        warmup, repeats, vs = 1, 2, "trl"

    measured = {"r3l": [step(1.0, 40), step(2.0, 40)], "trl": [step(3.0, 40), step(3.0, 40)]}
    data = side_by_side.summarise(Context, measured, SMALL)
    assert data["step_time_ratio_trl_over_r3l"] == {"min": 1.5, "median": 2.25, "max": 3.0}
    assert data["sides"]["r3l"]["generated_tokens"] == 80 and data["sides"]["trl"]["optimizer_updates"] == 2
    assert data["sides"]["r3l"]["train_tokens_per_s"]["median"] == pytest.approx(60.0)  # 40/0.5 and 40/1.0
    data["equal_work"] = side_by_side.equal_work_record(workload(), workload())
    markdown = side_by_side.table(data)
    assert "| step time (s) | 1.50 [1.00, 2.00] | 3.00 [3.00, 3.00] | **2.25x** [1.50, 3.00] |" in markdown
    assert "| generated tokens (sum) | 80 | 80 |  |" in markdown
    assert "Equal work: yes (prompts token-identical: True" in markdown


def test_limits_figures_by_hand():
    steps = {
        "r3l": [
            step(
                4.0,
                2,
                work={"positions": 5, "attention_pairs": 15, "head_positions": 2, "padded_positions": 8},
                decode={"decode_steps": 3, "decode_rows": 4, "decode_kv_positions": 10, "decode_seconds": 2.0},
            ).to_json()
        ]
    }
    data, details = limits.efficiency(SMALL.to_json(), steps, peak=1000.0, bandwidth=100.0, value_bytes=2)
    figures = data["sides"]["r3l"]
    assert details["steps"]["r3l"][0]["train_mfu"] == figures["train_mfu"]
    assert figures["train_mfu"] == pytest.approx(3 * 3520 / 2.0 / 1000.0)  # train_seconds is 2.0
    assert figures["train_flops_per_trained_token"] == 3 * 3520 / 2
    assert figures["train_padding_fraction"] == 1 - 5 / 8
    assert figures["decode_efficiency"] == pytest.approx((3 * 328 + 80) * 2 / 2.0 / 100.0)
    assert figures["decode_bytes_per_token"] == (3 * 328 + 80) * 2 / 4
    assert figures["decode_flops_utilization"] == pytest.approx((2 * 328 * 4 + 320) / 2.0 / 1000.0)


def test_machine_limits_are_measured_positive():
    assert gemm_peak(torch.float32, torch.device("cpu"), sizes=(64,))["flops_per_s"] > 0
    assert copy_bandwidth(torch.device("cpu"), mebibytes=1)["bytes_per_s"] > 0


def test_sections_plan_adds_what_they_need_and_a_new_section_is_one_decorator():
    assert [s.name for s in registry.plan(["limits"])] == ["side_by_side", "limits"]
    with pytest.raises(UserError, match="unknown bench section 'nope'"):
        registry.plan(["nope"])

    @registry.section("extra_probe", order=999, needs=("side_by_side",))
    def extra_probe(ctx):
        return registry.SectionResult({"probe": 1}, "| probe |\n")

    try:
        assert [s.name for s in registry.plan(None)][-1] == "extra_probe"
    finally:
        registry.SECTIONS._items.pop("extra_probe")


def test_bench_runs_side_by_side_with_trl_and_writes_json_and_markdown(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from r3l.bench.run import run_bench
    from r3l.logging.plots import render_report

    monkeypatch.setattr(
        limits, "gemm_peak", lambda dtype, device: {"flops_per_s": 1e12, "size": 64, "dtype": "bfloat16", "by_size": {}}
    )
    monkeypatch.setattr(limits, "copy_bandwidth", lambda device: {"bytes_per_s": 1e10, "buffer_mib": 1})
    config = load_config(None, [*TINY_BENCH, f"run.dir={tmp_path / 'runs'}"])
    out_dir, markdown = run_bench(
        config, vs="trl", out=tmp_path / "bench", repeats=1, warmup=0, sections="side_by_side,limits"
    )
    record = json.loads((out_dir / "bench.json").read_text())
    assert any("ratio" in key for key in record) and record["median_step_time_ratio_trl_over_r3l"] > 0
    sides = record["sections"]["side_by_side"]["sides"]
    assert sides["trl"]["completions"] == sides["r3l"]["completions"] == 8
    assert sides["trl"]["prompts"] == sides["r3l"]["prompts"] == 2
    for side in sides.values():
        assert side["generated_tokens"] > 0 and side["trained_tokens"] == side["generated_tokens"]
    equal = record["sections"]["side_by_side"]["equal_work"]
    assert equal["prompt_tokens_identical"] and equal["settings"]["optimizer_updates"] == 1
    ours = record["sections"]["limits"]["sides"]["r3l"]
    assert ours["decode_bytes_per_token"] > 0 and "train_mfu" in ours
    assert "| step time (s) |" in markdown and "TRL GRPOTrainer" in markdown and "training MFU" in markdown
    assert (out_dir / "bench.md").read_text() == markdown
    assert (out_dir / "r3l" / "config.yaml").exists()
    details = json.loads((out_dir / "bench_details.json").read_text())
    assert len(details["side_by_side"]["steps"]["trl"]) == 1 and details["side_by_side"]["trl_settings"]["beta"] == 0
    assert len(details["limits"]["steps"]["r3l"]) == 1
    assert [p.name for p in render_report(out_dir)] == ["bench.png"]


def test_bench_refuses_an_unknown_competitor(tmp_path):
    from r3l.bench.run import run_bench

    with pytest.raises(UserError, match="--vs nope"):
        run_bench(
            load_config(None, [*TINY_BENCH, f"run.dir={tmp_path}"]),
            vs="nope",
            out=tmp_path / "b",
            sections="side_by_side",
        )


def test_bench_refuses_a_model_that_cannot_sample_in_one_line(tiny, tmp_path):
    import copy

    from r3l.bench.run import run_bench

    model, tokenizer = tiny
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.get_output_embeddings().weight[0, 0] = float("nan")
    broken.save_pretrained(tmp_path / "nan-model")
    tokenizer.save_pretrained(tmp_path / "nan-model")
    config = load_config(
        None,
        [
            *TINY_BENCH,
            f"model={tmp_path / 'nan-model'}",
            f"run.dir={tmp_path}",
            "generator.dtype=bfloat16",
            "model.autocast_bf16=true",
        ],
    )
    with pytest.raises(UserError, match="non-finite next-token logits in bfloat16 .* no side can sample"):
        run_bench(config, vs="trl", out=tmp_path / "b", sections="side_by_side")


def test_random_shape_models_build_without_download(tmp_path):
    from r3l.models import load_policy
    from r3l.models.random_shape import shape_settings

    assert shape_settings("qwen2.5-1.5b")["hidden_size"] == 1536
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
            }
        )
    )
    model, tokenizer = load_policy(f"random:{tmp_path}")
    assert model.config.vocab_size == len(tokenizer) and model.config.num_hidden_layers == 1
    with pytest.raises(UserError, match="not a known shape"):
        load_policy("random:no-such-shape")


def test_math_attention_bytes_by_hand():
    from r3l.learner.attention import math_attention_bytes

    plain = {"input_ids": torch.zeros(2, 3)}
    assert math_attention_bytes(plain, heads=4, layers=5) == 2 * 4 * 4 * 5 * (2 * 3 * 3)
    shared = {"input_ids": torch.zeros(2, 3), "prefix_ids": torch.zeros(1, 4)}
    assert math_attention_bytes(shared, heads=1, layers=1) == 2 * 4 * (1 * 4 * 4 + 2 * 3 * (4 + 3))
