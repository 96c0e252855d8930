"""Critique-GRPO on R3L's machinery: policy shaping on hand-computed numbers, refinements competing in their
group, and one training step whose refinements train by policy shaping in a part of their own."""

import json
from pathlib import Path

import pytest
import torch

from r3l.algorithms import ADVANTAGES, assign_advantages
from r3l.algorithms.losses import POLICY_LOSSES, policy_shaping
from r3l.config import load_config
from r3l.experience import Experience
from r3l.trainer import Trainer


def test_policy_shaping_on_hand_computed_numbers():
    # p = 0.5 and 0.1, gamma 0.1: f = 0.5/0.6 = 0.8333 and 0.1/0.2 = 0.5; A = +2 and -1 (a third token masked)
    logprobs = torch.log(torch.tensor([[0.5, 0.1, 0.9]])).requires_grad_(True)
    advantages = torch.tensor([[2.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, metrics = policy_shaping(logprobs, None, advantages, mask, gamma=0.1)
    assert loss.item() == pytest.approx((-2 * 0.5 / 0.6 + 1 * 0.5) / 2)
    loss.backward()
    # d f / d logp = gamma p / (p + gamma)^2: 0.05 / 0.36 and 0.01 / 0.04; times -A, over 2 tokens
    expected = [-2 * (0.05 / 0.36) / 2, 1 * (0.01 / 0.04) / 2, 0.0]
    assert logprobs.grad[0].tolist() == pytest.approx(expected)
    assert metrics["probability"] == pytest.approx(0.3)
    assert POLICY_LOSSES.get("policy_shaping") is policy_shaping and policy_shaping.advantage_weighted


def test_refinements_compete_in_their_group_and_sft_samples_do_not():
    def sample(reward, objective):
        return Experience(
            tokens=[1, 2],
            loss_mask=[0, 1],
            logprobs=[0.0, 0.0],
            reward=reward,
            group="g",
            objective=objective,
            kind="sft" if objective == "sft" else "base",
            advantage=0.25,
        )

    batch = [sample(0.0, "policy"), sample(0.0, "policy"), sample(1.0, "shaped"), sample(1.0, "sft")]
    assign_advantages(batch, "grpo", {})
    expected = ADVANTAGES.get("grpo")(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0, 0, 0])).tolist()
    assert [e.advantage for e in batch[:3]] == pytest.approx(expected) and batch[3].advantage == 0.25


def test_a_critique_grpo_step_trains_its_refinements_by_policy_shaping(tmp_path):
    config = load_config(
        None,
        [
            "algorithm=critique_grpo",
            "env=arithmetic",
            "model=tiny-random",
            "generator=scripted",
            "sampling.group_size=4",
            "sampling.max_new_tokens=16",
            "train.steps=1",
            "train.tasks_per_step=4",
            "eval.size=0",
            "logging.tensorboard=false",
            "logging.progress=false",
            "logging.dump_experiences=true",
            f"run.dir={tmp_path}",
            "run.name=critique",
        ],
    )
    Trainer(config).run()
    run_dir = Path(tmp_path / "critique")
    dump = [json.loads(line) for line in (run_dir / "experiences" / "step_000001.jsonl").read_text().splitlines()]
    bases = [r for r in dump if r["kind"] == "base"]
    refinements = [r for r in dump if r["kind"] == "retry"]
    assert refinements and all(r["objective"] == "shaped" and r["pivot"] == 0 for r in refinements)
    assert all(r["objective"] == "policy" for r in bases) and not any(r["kind"] == "sft" for r in dump)
    reflected = {r["meta"]["run"] for r in refinements}
    assert all(b["reward"] < 1.0 for b in bases if b["meta"]["run"] in reflected)  # only failures are critiqued
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if m["step"] == 1 and "loss" in m)
    assert 0.0 < step["shaped_probability"] <= 1.0
