"""Where rollout workers' and engines' GPU work lands (issue 51 #4, #5, #7), planned against fake GPU counts and
fake CUDA calls (no GPU here; torch's own checks of a device's index run on the CPU build)."""

from __future__ import annotations

import pytest
import torch

from r3l.config import load_config
from r3l.distributed.placement import Placement, plan_placement, worker_config
from r3l.distributed.weight_stream import WeightStream, end_device, manifest, stream_device
from r3l.errors import UserError
from r3l.rollout.vllm import engine_visible_devices
from r3l.rollout.vllm_receiver import unpack, weight_chunks


def plan(device, ranks, workers, gpus, count, generator="hf"):
    return plan_placement(device, ranks, workers, gpus, count, local_ray=True, generator=generator)


# --- #4: the NCCL weight stream -------------------------------------------------------------------------------------


def test_the_workers_end_of_an_nccl_stream_names_its_gpu():
    """torch.cuda.set_device refuses a device without an index; a worker sees its own GPU as cuda:0."""
    worker_end = stream_device("cuda:1", workers_on_gpus=True)
    assert torch.device(worker_end).index == 0
    assert stream_device("cuda:0", workers_on_gpus=False) == "cpu" == stream_device("cpu", workers_on_gpus=True)


def test_an_end_given_cuda_alone_takes_the_current_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # fake: no GPU here
    assert end_device("cuda") == torch.device("cuda:3") and end_device("cpu") == torch.device("cpu")


class StopBeforeNccl(Exception):
    pass


def test_a_stream_end_on_cuda_sets_an_indexed_device(monkeypatch):
    """The worker end's first step on a GPU: set_device, with torch's own check of the index (fake beyond it)."""
    from r3l.distributed.learner_group import free_port

    set_to = []

    def set_device(device):
        if torch.device(device).index is None:  # what torch.cuda.set_device raises, before reaching CUDA
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        set_to.append(torch.device(device))
        raise StopBeforeNccl  # NCCL needs GPUs: the fake ends here

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    entries = manifest({"w": torch.zeros(2)})
    with pytest.raises(StopBeforeNccl):
        WeightStream("127.0.0.1", free_port(), 0, 1, entries, 5.0, device=stream_device("cuda:0", True))
    assert set_to == [torch.device("cuda:0")]


@pytest.mark.parametrize(("workers", "gpus", "shared"), [(2, 0.5, True), (1, 0.5, False), (2, 1.0, False)])
def test_workers_sharing_a_gpu_stream_over_gloo_not_nccl(workers, gpus, shared):
    """scripts/gpu_check.sh's layout, two workers on 0.5 GPU each: NCCL refuses two ranks on one GPU."""
    placement = plan("cuda:0", 1, workers, gpus, 3)
    assert placement.workers_may_share_a_gpu is shared
    expected = "cpu" if shared else "cuda:0"
    assert stream_device("cuda:0", placement.worker_device == "cuda", placement.workers_may_share_a_gpu) == expected


# --- #5: a vLLM worker's policy copy and its GPU share ----------------------------------------------------------------


@pytest.mark.parametrize(("gpus", "share"), [(0.5, 0.45), (1.0, 0.9), (0.25, 0.225)])
def test_a_vllm_worker_keeps_its_policy_copy_off_its_gpu_and_asks_for_its_share(gpus, share):
    config = load_config(None, ["model=tiny-random", "generator=vllm", "model.device=cuda:0"])
    worker = worker_config(config, Placement(("cuda:0",), 2, gpus, None))
    assert worker.model.device == "cpu"  # vLLM builds its own copy on the GPU
    assert worker.generator.settings["engine_args"]["gpu_memory_utilization"] == share
    assert worker.generator.dtype == "bfloat16"  # the GPU's dtype, not the one "auto" gives the CPU copy


def test_an_hf_worker_samples_on_its_gpu_and_a_given_vllm_dtype_is_kept():
    hf = load_config(None, ["model=tiny-random", "model.device=cuda:0"])
    assert worker_config(hf, Placement(("cuda:0",), 2, 1.0, None)).model.device == "cuda"
    given = load_config(None, ["model=tiny-random", "generator=vllm", "generator.dtype=float32"])
    assert worker_config(given, Placement(("cuda:0",), 2, 1.0, None)).generator.dtype == "float32"


# --- #7: the training process's engine ------------------------------------------------------------------------------


def test_the_engine_is_planned_on_learner_rank_zeros_device():
    assert plan("cuda:0", 1, 0, 0.0, 1, generator="vllm").engine == "cuda:0"
    assert plan("cuda:1", 2, 0, 0.0, 4, generator="vllm").engine == "cuda:1"
    assert plan("cpu", 2, 0, 0.0, 0, generator="vllm").engine == "cpu"
    assert plan("cuda:0", 1, 0, 0.0, 1).engine is None


def test_an_in_process_engine_off_cuda_0_is_refused_in_one_line():
    with pytest.raises(UserError, match="model.device=cuda:0 and CUDA_VISIBLE_DEVICES=1") as error:
        plan("cuda:1", 1, 0, 0.0, 2, generator="vllm")
    assert "\n" not in str(error.value)


def test_an_engine_in_its_own_process_is_shown_the_policys_gpu_only(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert engine_visible_devices(torch.device("cuda:1"), own_process=True) == {"CUDA_VISIBLE_DEVICES": "1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert engine_visible_devices(torch.device("cuda:1"), own_process=True) == {"CUDA_VISIBLE_DEVICES": "5"}
    assert engine_visible_devices(torch.device("cuda:1"), own_process=False) == {}
    assert engine_visible_devices(torch.device("cpu"), own_process=True) == {}  # a worker's copy on the CPU


def test_weights_travel_to_an_engine_apart_in_chunks_that_rebuild_them():
    weights = [
        ("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
        ("b", torch.ones(4, dtype=torch.bfloat16)),
        ("c", torch.arange(3, dtype=torch.int64)),
        ("big", torch.randn(64)),
    ]
    chunks = list(weight_chunks(weights, chunk_bytes=40))
    assert [names for names, *_ in chunks] == [["a", "b"], ["c"], ["big"]]  # 24 + 8 bytes, then one each
    rebuilt = [pair for chunk in chunks for pair in unpack(*chunk)]
    assert [name for name, _ in rebuilt] == [name for name, _ in weights]
    assert all(torch.equal(x, y) and x.dtype == y.dtype for (_, x), (_, y) in zip(rebuilt, weights))


def test_environment_while_sets_names_inside_and_restores_them_after_an_error(monkeypatch):
    import os

    from r3l.rollout.visible_devices import environment_while

    monkeypatch.setenv("R3L_KEPT", "before")
    monkeypatch.delenv("R3L_NEW", raising=False)
    with pytest.raises(RuntimeError), environment_while({"R3L_KEPT": "during", "R3L_NEW": "1"}):
        assert (os.environ["R3L_KEPT"], os.environ["R3L_NEW"]) == ("during", "1")
        raise RuntimeError("the child failed to start")
    assert os.environ["R3L_KEPT"] == "before" and "R3L_NEW" not in os.environ
