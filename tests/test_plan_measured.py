"""`r3l plan --device cpu` against the peak resident memory a real run records (issue 51): the embedded model,
single-turn (arithmetic) and multi-turn (FrozenLake), full fine-tuning and LoRA, 2 steps each in a process of its
own (the second step is the first with Adam's moments). Every row trains (train.skip_zero_advantage=false) and the
episodes run until their context is full, so that the plan's bound is reached. The same configurations at
Qwen2.5-Coder-0.5B are measured in results/plan_check (too slow for the suite)."""

import json

import pytest
import torch

from r3l.build import env_factory
from r3l.config import load_config
from r3l.models.embedded import load_embedded_tokenizer
from r3l.models.precision import native_bf16
from r3l.plan import layout_of, memory_parts, model_shape, peak_gib
from r3l.rollout.chat import PromptFormat, encode_prompt
from tests.conftest import run_cli

SINGLE_TURN = ["train.steps=2", "train.tasks_per_step=4", "train.skip_zero_advantage=false"]
MULTI_TURN = [
    "env=gym:FrozenLake-v1",
    "agent.max_turns=30",
    "sampling.max_new_tokens=32",
    "agent.max_context_tokens=512",
    "agent.terminate_on=[]",
    "sampling.group_size=4",
    "train.tasks_per_step=1",
    "train.micro_batch_size=4",
    "train.steps=2",
    "train.skip_zero_advantage=false",
]
TOLERANCE = 0.25
# A peak read beside other work reads low: multi-turn-full measured 4.88 GiB under the parallel suite, 5.25-5.26
# alone, 5.17 beside a process holding 17.5 GiB (plan 6.17; likely the run's file-backed pages, the torch
# libraries', evicted before they are counted). A plan above the measure gets this much.
TOLERANCE_ABOVE = 0.30


def longest_prompt(config) -> int:
    env = env_factory(config)()
    tokenizer, style = load_embedded_tokenizer(), PromptFormat.from_config(config.env)
    system = getattr(env, "system_prompt", None)
    return max(len(encode_prompt(tokenizer, style.messages(task.prompt, system))) for task in env.tasks("train"))


@pytest.mark.parametrize(
    "overrides",
    [SINGLE_TURN, SINGLE_TURN + ["model.lora.enabled=true"], MULTI_TURN, MULTI_TURN + ["model.lora.enabled=true"]],
    ids=["single-turn-full", "single-turn-lora", "multi-turn-full", "multi-turn-lora"],
)
def test_plan_is_within_a_quarter_of_the_peak_a_cpu_run_records(tmp_path, overrides):
    settings = [*overrides, "eval.size=0", "logging.progress=false", f"run.dir={tmp_path}"]
    config = load_config(None, settings)
    prompt = longest_prompt(config) if "env=gym:FrozenLake-v1" not in overrides else 512
    layout = layout_of(config, "cpu", native_bf16(torch.device("cpu")), prompt)
    planned = peak_gib(memory_parts(model_shape(config.model.name), layout, 24.0), layout)
    run = run_cli("train", *settings)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = next(tmp_path.glob("*/metrics.jsonl")).read_text().splitlines()
    measured = max(json.loads(line)["peak_rss_mib"] for line in lines) / 1024
    ratio = planned / measured
    assert 1 - TOLERANCE <= ratio <= 1 + TOLERANCE_ABOVE, f"planned {planned:.2f} GiB, measured {measured:.2f} GiB"
