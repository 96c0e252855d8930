"""Paths that first break on a GPU, checked where they run on a CPU (issue 35): learner ranks against the GPUs
there are, bf16 only where it is native, FSDP units per layer under gradient checkpointing, checkpoints loaded
onto the host, and ranks that idle through rank 0's rollouts past the collective timeout."""

from __future__ import annotations

import time

import pytest
import torch

from r3l.config import load_config
from r3l.distributed.learner_group import LearnerGroup
from r3l.distributed.placement import rank_devices
from r3l.errors import UserError
from r3l.learner import checkpoint
from r3l.learner.learner import per_layer_units
from r3l.models.precision import cuda_bf16_native
from tests.test_fsdp_learner import experiences


def test_each_learner_rank_has_a_gpu_of_its_own_or_the_layout_is_refused_in_one_line():
    assert rank_devices("cpu", 3, 0) == ["cpu", "cpu", "cpu"]
    assert rank_devices("cuda", 2, 2) == ["cuda:0", "cuda:1"]
    assert rank_devices("cuda:2", 2, 4) == ["cuda:2", "cuda:3"]  # model.device=cuda:N: the ranks start there
    with pytest.raises(UserError, match=r"learner_ranks=2 needs 2 GPUs from cuda:0, and this machine has 1"):
        rank_devices("cuda:0", 2, 1)  # one GPU: rank 1 would die in set_device(1) while rank 0 waits
    with pytest.raises(UserError, match=r"needs 2 GPUs from cuda:3, and this machine has 4"):
        rank_devices("cuda:3", 2, 4)


def test_bf16_is_native_from_ampere_on_only():
    assert [cuda_bf16_native(c) for c in ((7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0))] == [
        False,  # V100: torch emulates bf16, vLLM refuses it
        False,  # T4
        True,
        True,
        True,
        True,
    ]


def test_fsdp_wraps_each_layer_unless_the_shared_prefix_forward_runs():
    assert per_layer_units(share_prefix=False, gradient_checkpointing=False)
    assert not per_layer_units(share_prefix=True, gradient_checkpointing=False)
    assert per_layer_units(share_prefix=True, gradient_checkpointing=True)  # checkpointing turns the prefix path off


def test_checkpoint_files_load_onto_the_host(tmp_path, monkeypatch):
    path = tmp_path / "optimizer.pt"
    torch.save({"state": {0: {"exp_avg": torch.ones(2)}}}, path)
    seen = {}
    real_load = torch.load

    def recording_load(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    state = checkpoint.read_checkpoint_file(path)
    assert seen["map_location"] == "cpu" and state["state"][0]["exp_avg"].device.type == "cpu"


def test_idle_ranks_outlast_the_collective_timeout_between_commands(tiny):
    """Rank 1 waits for rank 0's next command through a pause longer than `worker_timeout_s` (a rollout, an
    evaluation) and still joins the update: commands go over a group of their own that waits days."""
    model, tokenizer = tiny
    config = load_config(
        None,
        [
            "model=tiny-random",
            "distributed.learner_ranks=2",
            "distributed.worker_timeout_s=15",  # the ranks' start-up broadcast must fit it on a loaded machine
            "train.micro_batch_size=1",
            "model.autocast_bf16=false",
        ],
    )
    group = LearnerGroup(config, model.float(), tokenizer, None, ["cpu", "cpu"])
    try:
        time.sleep(20.0)  # longer than the collective timeout
        batch = experiences(model.config.vocab_size)
        metrics = group.update(batch)
        assert metrics["trained_tokens"] > 0 and metrics["nonfinite_update"] == 0.0
    finally:
        group.close()
    assert all(not process.is_alive() for process in group.processes)


def test_a_lora_checkpoint_merges_on_the_host_as_merge_and_unload_does(tiny):
    """The checkpoint's plain model: each adapted layer's weight plus its delta, out of place (no second model on
    the device, the policy's frozen weights untouched), equal to PEFT's merge_and_unload."""
    import copy

    from r3l.config import LoraConfig
    from r3l.learner.learner import apply_lora

    model, _ = tiny
    policy = apply_lora(copy.deepcopy(model).float(), LoraConfig(enabled=True, r=4, alpha=8, dropout=0.0))
    with torch.no_grad():
        noise = torch.Generator().manual_seed(0)
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapter a delta to merge
                parameter.add_(torch.randn(parameter.shape, generator=noise) * 0.1)
    before = {name: tensor.clone() for name, tensor in policy.state_dict().items()}
    merged = checkpoint.merged_on_host(policy)
    expected = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert merged.keys() == expected.keys() and all(t.device.type == "cpu" for t in merged.values())
    assert all(torch.allclose(merged[key], expected[key], atol=1e-6) for key in expected)
    assert any(not torch.equal(merged[key], model.state_dict()[key]) for key in merged)  # the deltas are in
    assert all(torch.equal(tensor, before[name]) for name, tensor in policy.state_dict().items())
