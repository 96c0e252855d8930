"""Per-phase thread counts: sampling a small model on one thread, the update on every thread given."""

import json
import os
import subprocess
import sys

import pytest
import torch

from r3l.threads import (
    PARALLEL_MIN_PARAMETERS,
    ThreadPlan,
    phase_threads,
    thread_plan,
    using_threads,
)
from tests.conftest import one_step_config

EMBEDDED = 134_515_008  # SmolLM2-135M-Instruct
QWEN_05B = 630_167_424  # Qwen2.5-Coder-0.5B-Instruct as loaded (its embedding and output untied)
BF16 = True


def test_a_small_model_steps_on_one_thread():
    assert thread_plan(2, EMBEDDED, BF16) == ThreadPlan(generate=1, learn=1)
    assert thread_plan(16, EMBEDDED, BF16) == ThreadPlan(generate=1, learn=1)
    assert thread_plan(2, PARALLEL_MIN_PARAMETERS - 1, BF16) == ThreadPlan(generate=1, learn=1)


def test_qwen_05b_and_larger_models_step_on_every_thread():
    assert thread_plan(2, QWEN_05B, BF16) == ThreadPlan(generate=2, learn=2)
    assert thread_plan(16, 7_000_000_000, BF16) == ThreadPlan(generate=16, learn=16)
    assert thread_plan(2, PARALLEL_MIN_PARAMETERS, BF16) == ThreadPlan(generate=2, learn=2)


def test_a_small_model_in_fp32_steps_on_every_thread():
    assert thread_plan(2, EMBEDDED, bf16=False) == ThreadPlan(generate=2, learn=2)
    assert thread_plan(2, EMBEDDED, bf16=False, sampling_threads=1) == ThreadPlan(generate=1, learn=2)


def test_one_thread_given_is_one_thread_everywhere():
    assert thread_plan(1, 7_000_000_000, BF16) == ThreadPlan(generate=1, learn=1)
    assert thread_plan(0, QWEN_05B, BF16) == ThreadPlan(generate=1, learn=1)


def test_using_threads_restores_the_count_after_the_block_and_after_an_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with using_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), using_threads(target):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_a_phase_runs_on_its_plan_and_records_the_count():
    before = torch.get_num_threads()
    metrics: dict[str, float] = {}
    with using_threads(2), phase_threads("generate", EMBEDDED, BF16, metrics):
        assert torch.get_num_threads() == 1
    assert metrics == {"threads/generate": 1.0}
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="phase"), phase_threads("rollout", EMBEDDED, BF16):
        pass


def test_the_users_sampling_threads_win_but_never_exceed_the_threads_given():
    assert thread_plan(2, EMBEDDED, BF16, sampling_threads=2) == ThreadPlan(generate=2, learn=1)
    assert thread_plan(16, 7_000_000_000, BF16, sampling_threads=4) == ThreadPlan(generate=4, learn=16)
    assert thread_plan(2, QWEN_05B, BF16, sampling_threads=8) == ThreadPlan(generate=2, learn=2)


def test_a_training_step_samples_and_learns_on_the_plans_counts(tmp_path):
    from r3l.trainer import Trainer

    # the plan for a small bf16 model on any CPU (autocast and the generator's dtype resolve per machine)
    config = one_step_config(tmp_path, "model.autocast_bf16=true", "generator.dtype=bfloat16")
    trainer = Trainer(config)
    seen: list[tuple[str, int]] = []
    explore, update = trainer.parts.strategy.explore, trainer.learner.update

    def counted(name, call):
        def wrapped(*args, **kwargs):
            seen.append((name, torch.get_num_threads()))
            return call(*args, **kwargs)

        return wrapped

    trainer.parts.strategy.explore = counted("generate", explore)
    trainer.learner.update = counted("learn", update)
    try:
        with using_threads(2):
            metrics = trainer.train_step()
            assert torch.get_num_threads() == 2
            config.train.sampling_threads = 2
            trainer.train_step()
    finally:
        trainer.close()
    assert metrics["threads/generate"] == 1.0 and metrics["threads/learn"] == 1.0  # a tiny model: one thread
    assert seen == [("generate", 1), ("learn", 1), ("generate", 2), ("learn", 1)]  # then train.sampling_threads=2


def sampling_command_threads(tmp_path, command: str, *args: str) -> float:
    """threads/generate as `r3l COMMAND` prints it, run on 2 threads with a small bf16 policy (the plan: 1 thread)."""
    environ = {**os.environ, "OMP_NUM_THREADS": "2"}
    base = ["model=tiny-random", "generator=scripted", "env=countdown", "model.autocast_bf16=true"]
    done = subprocess.run(
        [sys.executable, "-m", "r3l.cli", command, *base, "generator.dtype=bfloat16", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=environ,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout[done.stdout.index("{") :])["threads/generate"]


def test_rollout_and_eval_sample_on_the_plans_count(tmp_path):
    assert sampling_command_threads(tmp_path, "rollout", "--no-show", "--tasks", "1") == 1.0
    # (train.sampling_threads reaches them through the same plan: test_the_users_sampling_threads_win_...)
    assert sampling_command_threads(tmp_path, "eval", "eval.size=2", "--out", "eval_run") == 1.0
