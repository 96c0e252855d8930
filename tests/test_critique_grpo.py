"""Critique-GRPO: policy shaping on hand-computed numbers, the critiques, the strategy's groups (scripted
generator on countdown) and two training steps."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from r3l.algorithms import POLICY_LOSSES
from r3l.algorithms.policy_shaping import shaped
from r3l.config import load_config
from r3l.envs import Task
from r3l.explore.critique import CRITIQUES
from tests.conftest import run_cli

MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
LOGPROBS = torch.tensor([[-1.0, -2.0], [math.log(0.4), math.log(0.1)]])
OLD = torch.tensor([[-1.1, -2.3], [-5.0, -5.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
OFF_POLICY = torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # row 1: a refinement, sampled after a critique


def test_shaping_function():
    # f(pi) = pi / (pi + 0.1): 0.4 -> 0.8, 0.1 -> 0.5, 1 -> 1/1.1
    assert shaped(torch.log(torch.tensor([0.4, 0.1, 1.0])), 0.1).tolist() == pytest.approx([0.8, 0.5, 1 / 1.1])


def test_loss_clips_responses_and_shapes_refinements():
    loss, metrics = POLICY_LOSSES.get("critique_grpo")(LOGPROBS, OLD, ADVANTAGES, MASK, off_policy=OFF_POLICY)
    # row 0 (PPO-clip, A = 1): ratios e^0.1 = 1.1052 (kept) and e^0.3 = 1.3499 (clipped to 1.2)
    # row 1 (shaped, A = 2; the old log-probs play no part): -2 * 0.8 and -2 * 0.5; token-mean over 4 tokens
    expected = (-math.exp(0.1) - 1.2 - 1.6 - 1.0) / 4
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(1 / 4) and metrics["shaped_fraction"] == pytest.approx(1 / 2)


def test_shaped_gradient():
    logprobs = LOGPROBS.clone().requires_grad_(True)
    loss, _ = POLICY_LOSSES.get("critique_grpo")(logprobs, logprobs.detach(), ADVANTAGES, MASK, off_policy=OFF_POLICY)
    loss.backward()
    # d(-A f(e^l))/dl = -A * gamma * pi / (pi + gamma)^2: pi 0.4 -> 0.16, pi 0.1 -> 0.25; times -2, over 4 tokens.
    # Row 0 on-policy at ratio 1: -A / 4
    assert logprobs.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, -0.08, -0.125], rel=1e-5)


def test_without_off_policy_tokens_it_is_ppo_clip():
    ours, _ = POLICY_LOSSES.get("critique_grpo")(LOGPROBS, OLD, ADVANTAGES, MASK)
    theirs, _ = POLICY_LOSSES.get("ppo_clip")(LOGPROBS, OLD, ADVANTAGES, MASK)
    assert float(ours) == pytest.approx(float(theirs))


def test_bad_gamma_is_refused():
    with pytest.raises(ValueError, match="gamma must be > 0"):
        POLICY_LOSSES.get("critique_grpo")(LOGPROBS, OLD, ADVANTAGES, MASK, gamma=0.0)


def attempt(answer):
    return SimpleNamespace(
        task=Task(id="t", prompt="Calculate 2 + 3.", answer=answer), text="<answer>6</answer>", feedback="Wrong answer."
    )


def test_critiques():
    with_truth = CRITIQUES.get("ground_truth")(attempt("5"))
    assert with_truth.startswith("Your previous attempt:\n<answer>6</answer>\n\n")
    assert "the correct final answer is 5." in with_truth and "Try again" in with_truth
    verdict = CRITIQUES.get("indicative")(attempt("5"))
    assert "5" not in verdict.replace("<answer>6</answer>", "") and "incorrect. Wrong answer. Try again." in verdict
    # a task without a plain answer (a game, countdown's numbers and target) gets the verdict alone
    assert CRITIQUES.get("ground_truth")(attempt({"target": 5})) == CRITIQUES.get("indicative")(attempt({"target": 5}))


def test_preset():
    algorithm = load_config(None, ["model=tiny-random", "algorithm=critique_grpo"]).algorithm
    assert (algorithm.strategy, algorithm.advantage, algorithm.policy_loss) == (
        "critique",
        "grpo_no_std",
        "critique_grpo",
    )
    assert algorithm.kl_coef == 0.0 and algorithm.loss_args["gamma"] == 0.1


SCRIPTED = [
    "model=tiny-random",
    "generator=scripted",
    "algorithm=critique_grpo",
    "env=countdown",
    "sampling.group_size=4",
    "logging.progress=false",
    "logging.tensorboard=false",
    "generator.dtype=float32",
]


def test_refinements_join_their_groups_without_the_critique(tmp_path):
    result = run_cli("rollout", *SCRIPTED, "--tasks", "3", "--no-show", "--dump", "out.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    groups = {r["group"] for r in records}
    assert len(groups) == 3
    refinements = [r for r in records if r["kind"] == "retry"]
    assert refinements and any(r["reward"] > 0 for r in refinements)  # the script solves half its retries
    for group in groups:
        members = [r for r in records if r["group"] == group]
        assert sum(r["kind"] == "base" for r in members) == 4 and sum(r["kind"] == "retry" for r in members) <= 1
        assert abs(sum(r["advantage"] for r in members)) < 1e-5  # r - mean over the group, refinements included
    from r3l.models import load_policy

    tokenizer = load_policy("tiny-random")[1]
    for refinement in refinements:
        critique = refinement["meta"]["guidance"]
        assert critique.startswith("Your previous attempt:") and not refinement["meta"]["guidance_in_tokens"]
        assert "Your previous attempt" not in tokenizer.decode(refinement["tokens"])


def test_two_training_steps_shape_the_refinements(tmp_path):
    result = run_cli(
        "train",
        *SCRIPTED,
        "train.steps=2",
        "train.tasks_per_step=2",
        "sampling.max_new_tokens=24",
        "eval.size=0",
        f"run.dir={tmp_path}",
        "run.name=c",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    metrics = [json.loads(line) for line in (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in metrics if "loss" in m]
    assert len(trained) == 2 and all(math.isfinite(m["loss"]) for m in trained)
    assert any(m["shaped_fraction"] > 0 for m in trained)  # the learner told the loss which tokens are refinements
