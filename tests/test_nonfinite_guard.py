"""The learner never applies an update whose loss or gradient norm is NaN/inf, and a run stops after
`train.max_nonfinite_updates` of them in a row."""

import copy
import json

import pytest
import torch
from safetensors.torch import load_file

from r3l.config import AlgorithmConfig, TrainConfig, load_config
from r3l.errors import RunStopped
from r3l.learner.learner import Learner
from r3l.trainer import Trainer
from tests.test_shared_prefix import batch_of_groups


def poisoned(loss_fn, when):
    """`loss_fn` whose loss becomes NaN on the calls for which `when(call_number)` is true."""
    calls = []

    def loss(*args, **kwargs):
        calls.append(1)
        value, metrics = loss_fn(*args, **kwargs)
        return (value * float("nan") if when(len(calls)) else value), metrics

    return loss


def test_nonfinite_loss_is_never_applied(tiny):
    model, tokenizer = tiny
    policy = copy.deepcopy(model)
    train = TrainConfig(lr=1e-2, warmup_ratio=0.5, schedule="cosine", micro_batch_size=3)
    learner = Learner(policy, tokenizer, AlgorithmConfig(), train, temperature=1.0, autocast_bf16=False, total_steps=10)
    learner.loss_fn = poisoned(learner.loss_fn, lambda call: call == 2)  # the second micro-batch of the first update
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    lr_before = learner.scheduler.get_last_lr()[0]
    metrics = learner.update(batch_of_groups())  # micro-batches [0, 1, 4] and [2, 3] at size 3
    assert metrics["nonfinite_update"] == 1.0 and metrics["nonfinite_updates"] == 1.0
    assert metrics["loss"] != metrics["loss"]  # NaN, written as null with a flag by the sinks
    assert all(torch.equal(before[name], p) for name, p in policy.named_parameters())
    assert all(p.grad is None for p in policy.parameters())
    assert learner.optimizer.state == {} and learner.scheduler.get_last_lr()[0] == lr_before
    assert learner.nonfinite_streak == 1

    metrics = learner.update(batch_of_groups())  # finite again: applied, the streak ends
    assert metrics["nonfinite_update"] == 0.0 and learner.nonfinite_streak == 0 and learner.nonfinite_updates == 1
    assert any(not torch.equal(before[name], p) for name, p in policy.named_parameters())
    assert learner.scheduler.get_last_lr()[0] != lr_before


def test_nonfinite_gradient_norm_is_never_applied(tiny, monkeypatch):
    model, tokenizer = tiny
    policy = copy.deepcopy(model)
    learner = Learner(policy, tokenizer, AlgorithmConfig(), TrainConfig(lr=1e-2), temperature=1.0, autocast_bf16=False)
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *args, **kwargs: torch.tensor(float("inf")))
    metrics = learner.update(batch_of_groups())
    assert metrics["nonfinite_update"] == 1.0 and metrics["grad_norm"] == float("inf")
    assert all(torch.equal(before[name], p) for name, p in policy.named_parameters())


def test_run_stops_after_the_limit_and_keeps_the_last_good_checkpoint(tmp_path):
    config = load_config(
        None,
        [
            "model=tiny-random",
            "env=countdown",
            "sampling.group_size=4",
            "sampling.max_new_tokens=8",
            "train.tasks_per_step=2",
            "train.micro_batch_size=4",
            "eval.size=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "generator.dtype=float32",
            "train.steps=8",
            "train.checkpoint_every=1",
            "train.max_nonfinite_updates=2",
            "train.keep_checkpoints=2",
            "train.skip_zero_advantage=false",
            f"run.dir={tmp_path}",
            "run.name=nan",
        ],
    )
    trainer = Trainer(config)
    learner, update = trainer.learner, trainer.learner.update

    def good_then_poisoned(experiences, **options):  # the first update is good, every later one has a NaN loss
        metrics = update(experiences, **options)
        learner.loss_fn = poisoned(learner.loss_fn, lambda call: True)
        return metrics

    learner.update = good_then_poisoned
    with pytest.raises(RunStopped, match="2 updates in a row had a NaN/inf loss or gradient norm at step 3"):
        trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "nan" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["nonfinite_update"]) for r in rows] == [(1, 0.0), (2, 1.0), (3, 1.0)]
    assert rows[1]["loss"] is None and "loss" in rows[1]["nonfinite"] and rows[2]["nonfinite_updates"] == 2.0
    # a dropped update leaves the weights as they were, so the step-2 checkpoint is good; step 3 is never saved
    latest = (tmp_path / "nan" / "checkpoints" / "latest").resolve()
    assert latest.name == "step_000002"
    weights = load_file(latest / "model" / "model.safetensors")
    step_1 = load_file(tmp_path / "nan" / "checkpoints" / "step_000001" / "model" / "model.safetensors")
    assert all(torch.equal(weights[name], step_1[name]) for name in weights)
