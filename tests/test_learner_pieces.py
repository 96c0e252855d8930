"""Pure learner helpers: batching alignment, micro-batches, schedules, task sampling, Wilson intervals."""

import pytest
import torch

from r3l.algorithms import assign_advantages
from r3l.envs import Task
from r3l.evaluate import wilson_interval
from r3l.experience import Experience
from r3l.learner.batching import collate, micro_batches
from r3l.learner.schedule import lr_factor
from r3l.task_sampler import TaskSampler


def experience(tokens, mask, logprobs=None, group="g", reward=0.0):
    return Experience(
        group=group, kind="base", tokens=tokens, loss_mask=mask, logprobs=logprobs or [0.0] * len(tokens), reward=reward
    )


def test_collate_shifts_targets_and_keeps_loss_mask_apart_from_attention():
    batch = collate(
        [experience([5, 6, 7, 8], [0, 0, 1, 1], [0, 0, -0.5, -0.25]), experience([9, 10], [0, 1], [0, -1.0])], pad_id=0
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    # position t predicts token t+1: targets and everything aligned to them drop the first token
    assert batch["targets"].tolist() == [[6, 7, 8], [10, 0, 0]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch["gen_logprobs"].tolist() == [[0, -0.5, -0.25], [-1.0, 0, 0]]


def test_collate_spreads_each_experience_advantage_over_its_row():
    first, second = experience([1, 2, 3], [0, 1, 1]), experience([4, 5], [0, 1])
    first.advantage, second.advantage = 0.5, -2.0
    assert collate([first, second], pad_id=0)["advantages"].tolist() == [[0.5, 0.5], [-2.0, 0.0]]  # padding stays 0


def test_micro_batches_sort_by_length_and_cut_where_padding_costs_most():
    lengths = [10, 11, 40, 41, 13]
    # sorted 10 11 13 | 40 41: 3 x 13 + 2 x 41 + 2 x 5 = 131 (each alone: 115 + 25; 10 11 | 13 | 40 41: 132)
    assert micro_batches(lengths, 3, overhead=5) == [[0, 1, 4], [2, 3]]
    assert micro_batches(lengths, 3, overhead=0) == [[0], [1], [4], [2], [3]]  # no padding at all
    # at most 2 rows, 3 passes at least: 10 11 | 13 | 40 41 pads 117, 10 | 11 13 | 40 41 118, 10 11 | 13 40 | 41 143
    assert micro_batches(lengths, 2, overhead=1000) == [[0, 1], [4], [2, 3]]


def test_micro_batches_keep_under_a_positions_cap_and_a_longer_one_goes_alone():
    lengths = [10, 11, 40, 41, 13]
    # 40 41 together pad to 82 positions: over a cap of 60 they split, whatever one more pass costs
    assert micro_batches(lengths, 3, overhead=5, max_positions=60) == [[0, 1, 4], [2], [3]]
    # a cap of 30: 10 11 (22) fits, 10 11 13 (39) does not; 40 and 41 are each over it, so alone
    assert micro_batches(lengths, 3, overhead=1000, max_positions=30) == [[0, 1], [4], [2], [3]]
    assert micro_batches(lengths, 3, overhead=5, max_positions=None) == [[0, 1, 4], [2, 3]]


def test_assign_advantages_uses_groups():
    items = [experience([1, 2], [0, 1], group="a", reward=r) for r in (1.0, 0.0)]
    items += [experience([1, 2], [0, 1], group="b", reward=r) for r in (1.0, 1.0)]
    assign_advantages(items, "grpo_no_std", {})
    assert [e.advantage for e in items] == [0.5, -0.5, 0.0, 0.0]


def test_lr_schedule_hand_values():
    assert lr_factor(0, 10, 2, "constant") == 0.5
    assert lr_factor(1, 10, 2, "constant") == 1.0
    assert lr_factor(2, 10, 2, "cosine") == pytest.approx(1.0)
    assert lr_factor(6, 10, 2, "cosine") == pytest.approx(0.5)  # halfway through 8 decay steps
    assert lr_factor(10, 10, 2, "cosine") == pytest.approx(0.0)


def test_task_sampler_is_deterministic_and_resumable():
    tasks = [Task(id=str(i), prompt=str(i)) for i in range(5)]
    straight = TaskSampler(tasks, seed=3)
    expected = [t.id for t in straight.next_batch(4) + straight.next_batch(4)]
    first = TaskSampler(tasks, seed=3)
    head = [t.id for t in first.next_batch(4)]
    resumed = TaskSampler(tasks, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert head + [t.id for t in resumed.next_batch(4)] == expected
    assert sorted(expected[:5]) == sorted(t.id for t in tasks)  # one epoch covers every task once


def test_wilson_interval_hand_values():
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_most_common_completion_share():
    from r3l.evaluate import most_common_completion

    assert most_common_completion(["<answer>2</answer>", " <answer>2</answer>\n", "<answer>5</answer>", "x"]) == (
        "<answer>2</answer>",
        0.5,
    )
    assert most_common_completion([]) == (None, 0.0)


def test_older_checkpoints_keep_weights_but_not_the_optimizer_state(tiny, tmp_path):
    from r3l.errors import UserError
    from r3l.learner.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint

    model, tokenizer = tiny
    state = {"optimizer": {"state": {}, "param_groups": []}, "scheduler": {}, "sampler": {}}
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tokenizer, state, keep=2)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert kept == ["step_000002", "step_000003"] and latest_checkpoint(tmp_path).name == "step_000003"
    assert not (tmp_path / "checkpoints" / "step_000002" / "optimizer.pt").exists()
    assert (tmp_path / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()
    assert load_trainer_state(latest_checkpoint(tmp_path))["optimizer"] == state["optimizer"]
    with pytest.raises(UserError, match="has no optimizer.pt"):
        load_trainer_state(tmp_path / "checkpoints" / "step_000002")


def test_host_floats_reads_tensors_in_place_and_keeps_floats():
    from r3l.learner.device_sums import host_floats, sums_on_host

    values = [1.5, torch.tensor(2.0), torch.tensor(3, dtype=torch.int64), 0.0, torch.tensor(-1.0, dtype=torch.bfloat16)]
    assert host_floats(values) == [1.5, 2.0, 3.0, 0.0, -1.0]
    assert host_floats([]) == [] and host_floats([4.0]) == [4.0]
    assert sums_on_host({"a": torch.tensor(0.25), "b": 2.0}) == {"a": 0.25, "b": 2.0}
