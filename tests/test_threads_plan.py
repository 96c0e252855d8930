"""Per-phase thread counts: sampling a small model on one thread, the update on every thread given."""

import pytest
import torch

from r3l.threads import (
    PARALLEL_SAMPLING_MIN_PARAMETERS,
    ThreadPlan,
    phase_threads,
    thread_plan,
    using_threads,
)

EMBEDDED = 134_515_008  # SmolLM2-135M-Instruct
QWEN_05B = 630_167_424  # Qwen2.5-Coder-0.5B-Instruct as loaded (its embedding and output untied)


def test_a_small_model_samples_on_one_thread_and_learns_on_all():
    assert thread_plan(2, EMBEDDED) == ThreadPlan(generate=1, learn=2)
    assert thread_plan(16, EMBEDDED) == ThreadPlan(generate=1, learn=16)


def test_qwen_05b_samples_on_one_thread_and_a_larger_model_on_every_thread():
    assert thread_plan(2, QWEN_05B) == ThreadPlan(generate=1, learn=2)
    assert thread_plan(16, 7_000_000_000) == ThreadPlan(generate=16, learn=16)
    assert thread_plan(2, PARALLEL_SAMPLING_MIN_PARAMETERS) == ThreadPlan(generate=2, learn=2)
    assert thread_plan(2, PARALLEL_SAMPLING_MIN_PARAMETERS - 1) == ThreadPlan(generate=1, learn=2)


def test_one_thread_given_is_one_thread_everywhere():
    assert thread_plan(1, 7_000_000_000) == ThreadPlan(generate=1, learn=1)
    assert thread_plan(0, QWEN_05B) == ThreadPlan(generate=1, learn=1)


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
    with using_threads(2), phase_threads("generate", EMBEDDED, metrics):
        assert torch.get_num_threads() == 1
    assert metrics == {"threads/generate": 1.0}
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="phase"), phase_threads("rollout", EMBEDDED):
        pass
