"""Rollout workers as Ray actors (a real local Ray cluster): the batch split across two workers gives exactly
the experiences one process does, weight syncs reach them, a dead worker stops the run in one line or is
replaced, and `r3l train distributed.rollout_workers=2` runs end to end."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from r3l.config import load_config
from r3l.distributed.sharding import contiguous_shards, merge_shard_metrics
from r3l.errors import RunStopped
from tests.conftest import run_cli

pytestmark = pytest.mark.xdist_group("ray")  # with pytest-xdist: one worker holds every local Ray cluster

QUIET = ["eval.size=0", "logging.tensorboard=false", "logging.progress=false"]
ARITHMETIC = [
    "model=tiny-random",
    "generator.dtype=float32",
    "model.autocast_bf16=false",
    "sampling.group_size=4",
    "sampling.max_new_tokens=12",
    "train.tasks_per_step=5",
    *QUIET,
]
R3L_TWX = [
    "model=tiny-random",
    "generator=scripted",
    "generator.dtype=float32",
    "algorithm=r3l",
    "env=textworld_express",
    "env.args.games=[coin]",
    "env.args.max_steps=4",
    "sampling.group_size=4",
    "sampling.max_new_tokens=32",
    "train.tasks_per_step=3",
    *QUIET,
]


def test_contiguous_shards():
    assert contiguous_shards(5, 2) == [range(3), range(3, 5)]
    assert contiguous_shards(6, 3) == [range(2), range(2, 4), range(4, 6)]
    assert contiguous_shards(2, 4) == [range(1), range(1, 2)]
    assert contiguous_shards(0, 2) == []
    with pytest.raises(ValueError):
        contiguous_shards(3, 0)


def test_merged_metrics_sum_counts_and_weight_means_by_tasks():
    merged = merge_shard_metrics(
        [
            ({"success": 0.5, "generated_tokens": 100.0, "retry_count": 2.0}, 3),
            ({"success": 0.0, "generated_tokens": 40.0, "pivot_mean": 2.0}, 1),
        ]
    )
    assert merged == {"success": pytest.approx(0.375), "generated_tokens": 140.0, "retry_count": 2.0, "pivot_mean": 2.0}
    assert merge_shard_metrics([({"pivot_count/2": 1.0}, 2), ({"pivot_count/2": 3.0}, 1)]) == {"pivot_count/2": 4.0}


@pytest.fixture(scope="module", autouse=True)
def one_local_ray_for_the_module():
    """The in-process tests share one local Ray (started by the first, with a run's own settings) instead of
    starting and stopping one each (~4 s); a pool that finds Ray running leaves it running. Stopped at the end."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def trainer_with_workers(tmp_path, overrides, workers=2, failure="fail"):
    ray = pytest.importorskip("ray")
    from r3l.distributed.rollout_pool import ray_init_options
    from r3l.trainer import Trainer

    if not ray.is_initialized():  # else the module's local Ray, or a test's own cluster
        ray.init(**ray_init_options(None, max(os.cpu_count() or 1, workers), None))

    config = load_config(
        None,
        [
            *overrides,
            f"run.dir={tmp_path}",
            f"distributed.rollout_workers={workers}",
            f"distributed.on_worker_failure={failure}",
            "distributed.worker_timeout_s=300",
        ],
    )
    return Trainer(config)


def same_experiences(ours, theirs):
    assert len(ours) == len(theirs) > 0
    for mine, other in zip(ours, theirs):
        assert (mine.group, mine.kind, mine.tokens, mine.loss_mask, mine.reward, mine.pivot, mine.objective) == (
            other.group,
            other.kind,
            other.tokens,
            other.loss_mask,
            other.reward,
            other.pivot,
            other.objective,
        )
        assert mine.logprobs == pytest.approx(other.logprobs, abs=1e-4)  # fp32: rounding of other batch shapes


@pytest.mark.parametrize("overrides", [ARITHMETIC, R3L_TWX], ids=["grpo-arithmetic", "r3l-textworld-express"])
def test_two_workers_explore_exactly_what_one_process_does(tmp_path, overrides):
    trainer = trainer_with_workers(tmp_path, overrides)
    try:
        tasks = trainer.sampler.next_batch(trainer.config.train.tasks_per_step)
        for step in (0, 1):  # and again after an update has changed the weights
            expected, expected_metrics = trainer.parts.strategy.explore(tasks, step)
            got, metrics = trainer.rollout_pool.explore(tasks, step)
            same_experiences(got, expected)
            assert metrics["generated_tokens"] == expected_metrics["generated_tokens"]
            assert metrics["rollout_workers"] == 2
            if step == 0:
                trainer.train_step()
                assert trainer.rollout_pool.version == 1
        if "algorithm=r3l" in overrides:
            assert any(e.kind == "retry" for e in got)
    finally:
        trainer.close()


def test_a_dead_worker_stops_the_run_in_one_line_or_is_replaced(tmp_path):
    import ray

    for failure in ("fail", "retry"):
        trainer = trainer_with_workers(tmp_path / failure, ARITHMETIC, failure=failure)
        try:
            tasks = trainer.sampler.next_batch(trainer.config.train.tasks_per_step)
            expected, _ = trainer.parts.strategy.explore(tasks, 0)
            ray.kill(trainer.rollout_pool.workers[1], no_restart=True)
            if failure == "fail":
                with pytest.raises(RunStopped, match=r"rollout worker 1 failed at step 1 on tasks .*on_worker_failure"):
                    trainer.rollout_pool.explore(tasks, 0)
            else:
                got, metrics = trainer.rollout_pool.explore(tasks, 0)
                same_experiences(got, expected)
                assert metrics["rollout_worker_restarts"] == 1
        finally:
            trainer.close()


def test_train_with_two_rollout_workers_from_the_command_line(tmp_path):
    pytest.importorskip("ray")
    result = run_cli(
        "train",
        *ARITHMETIC,
        "train.steps=2",
        "distributed.rollout_workers=2",
        f"run.dir={tmp_path}",
        "run.name=workers",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = [json.loads(line) for line in (Path(tmp_path) / "workers" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "rollout_workers" in m]
    assert len(steps) == 2 and all(m["rollout_workers"] == 2 for m in steps)
    assert "Token authentication" not in result.stderr  # Ray's start-up banner about its own default, not the run's


def test_staleness_arithmetic():
    from r3l.distributed.staleness import admissible, batches_in_flight, staleness

    assert [batches_in_flight(0, step, 5) for step in range(5)] == [1, 1, 1, 1, 1]
    assert [batches_in_flight(2, step, 5) for step in range(5)] == [3, 3, 3, 2, 1]
    assert staleness(7, 5) == 2 and admissible(7, 5, 2) and not admissible(7, 4, 2) and not admissible(4, 5, 2)
    assert admissible(3, 3, 0) and not admissible(3, 2, 0)


def test_staleness_needs_rollout_workers(tmp_path):
    from r3l.errors import UserError
    from r3l.trainer import Trainer

    with pytest.raises(UserError, match="max_staleness needs rollout workers"):
        Trainer(load_config(None, [*ARITHMETIC, f"run.dir={tmp_path}", "distributed.max_staleness=1"]))
    assert not list(Path(tmp_path).iterdir())


def test_bounded_staleness_explores_ahead_and_never_trains_older_than_s(tmp_path):
    trainer = trainer_with_workers(tmp_path, [*ARITHMETIC, "train.steps=3", "distributed.max_staleness=1"])
    try:
        lags = []
        for _ in range(3):
            metrics = trainer.train_step()
            lags.append(metrics["staleness"])
            assert metrics["policy_version"] == trainer.rollout_pool.version - 1 - metrics["staleness"]
        # step 0 trains the first batch as explored; each later batch was explored during the update before it
        assert lags == [0.0, 1.0, 1.0] and not trainer.pipeline.in_flight
    finally:
        trainer.close()


def test_a_checkpoint_taken_with_batches_in_flight_redraws_them_on_resume(tmp_path):
    trainer = trainer_with_workers(tmp_path, [*ARITHMETIC, "train.steps=4", "distributed.max_staleness=2"])
    try:
        before_first = trainer.sampler.state_dict()
        trainer.train_step()  # drew batches for steps 0, 1 and 2; trained step 0
        pending = trainer.pipeline.oldest_pending()
        assert pending is not None and trainer._trainer_state()["sampler"] == pending.sampler_state
        assert pending.sampler_state != before_first and pending.sampler_state != trainer.sampler.state_dict()
    finally:
        trainer.close()


def next_sync_fails_fast_without(trainer, worker: int, version: int) -> None:
    """Kill one worker: the next weight sync stops the run in one line, well within a minute."""
    import ray

    ray.kill(trainer.rollout_pool.workers[worker], no_restart=True)
    started = time.perf_counter()
    with pytest.raises(RunStopped, match=rf"a rollout worker failed during its weight sync \(version {version}\)"):
        trainer._sync_generators()
    assert time.perf_counter() - started < 60


def test_a_worker_killed_before_a_weight_sync_fails_it_in_one_line(tmp_path):
    trainer = trainer_with_workers(tmp_path, ARITHMETIC)
    try:
        next_sync_fails_fast_without(trainer, worker=0, version=1)
    finally:
        trainer.close()


def test_workers_are_placed_across_the_nodes_of_a_two_node_cluster(tmp_path):
    """A fake two-node Ray cluster (two raylets on this machine, one CPU each): strict_spread puts one worker on
    each node, and the run explores as in one process."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # the module's local Ray: this test connects to a cluster of its own
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    try:
        trainer = trainer_with_workers(tmp_path, [*ARITHMETIC, "distributed.placement=strict_spread"])
        try:
            nodes = trainer.rollout_pool.nodes()
            assert len(set(nodes)) == 2 and set(nodes) == {node["NodeID"] for node in ray.nodes() if node["Alive"]}
            tasks = trainer.sampler.next_batch(trainer.config.train.tasks_per_step)
            same_experiences(trainer.rollout_pool.explore(tasks, 0)[0], trainer.parts.strategy.explore(tasks, 0)[0])
        finally:
            trainer.close()
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_weights_streamed_by_broadcast_reach_the_workers(tmp_path):
    """distributed.weight_sync=broadcast (buckets over a gloo group of trainer and workers): after an update
    the workers explore exactly what the trainer's own generator does; a dead receiver fails the next sync."""
    trainer = trainer_with_workers(
        tmp_path, [*ARITHMETIC, "distributed.weight_sync=broadcast", "distributed.worker_timeout_s=30"]
    )
    try:
        assert trainer.rollout_pool.stream is not None  # opened by the first sync, at start
        trainer.train_step()
        assert trainer.rollout_pool.version == 1
        tasks = trainer.sampler.next_batch(trainer.config.train.tasks_per_step)
        same_experiences(trainer.rollout_pool.explore(tasks, 1)[0], trainer.parts.strategy.explore(tasks, 1)[0])
        next_sync_fails_fast_without(trainer, worker=1, version=2)
    finally:
        trainer.close()


def test_weight_stream_buckets():
    from r3l.distributed.weight_stream import Entry, plan_buckets

    f32, i64 = torch.float32, torch.int64
    entries = [
        Entry("a", (4,), f32),
        Entry("b", (2,), f32),
        Entry("c", (3,), i64),
        Entry("d", (10,), f32),
        Entry("e", (1,), f32),
    ]
    # 16 + 8 bytes fit a 32-byte bucket; the int64 tensor starts its own; 40 bytes alone exceed it
    assert plan_buckets(entries, bucket_bytes=32) == [[0, 1], [2], [3], [4]]
    assert plan_buckets(entries, bucket_bytes=1 << 20) == [[0, 1], [2], [3, 4]]


def stream_both_ends(devices: tuple[str, str]) -> tuple[int, dict]:
    """A trainer end and a worker end of one weight stream, in two threads: what the worker receives."""
    import threading

    from r3l.distributed.learner_group import free_port
    from r3l.distributed.weight_stream import WeightStream, manifest

    weights = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.tensor([1, 2])}
    entries, port, received = manifest(weights, torch.bfloat16), free_port(), {}

    def worker() -> None:
        stream = WeightStream("127.0.0.1", port, 1, 2, entries, 30.0, device=devices[1])
        received["version"], received["weights"] = stream.receive()

    thread = threading.Thread(target=worker)
    thread.start()
    trainer = WeightStream("127.0.0.1", port, 0, 2, entries, 30.0, device=devices[0])
    trainer.send(7, {name: tensor.to(devices[0]) for name, tensor in weights.items()})
    thread.join(30)
    return received["version"], received["weights"]


def test_the_weight_stream_sends_a_version_and_the_weights_in_the_workers_dtype():
    version, weights = stream_both_ends(("cpu", "cpu"))
    assert version == 7 and weights["w"].dtype == torch.bfloat16 and weights["b"].dtype == torch.int64
    assert torch.equal(weights["w"].float(), torch.arange(6.0).reshape(2, 3)) and weights["b"].tolist() == [1, 2]


def test_the_stream_is_on_gpus_only_where_every_end_is():
    from r3l.distributed.weight_stream import stream_device

    assert stream_device("cuda:1", workers_on_gpus=True) == "cuda:0"  # NCCL, on the worker's own GPU
    assert stream_device("cuda:1", workers_on_gpus=True, shared_gpus=True) == "cpu"  # NCCL refuses a shared GPU
    assert stream_device("cuda:0", workers_on_gpus=False) == "cpu"  # CPU workers: gloo
    assert stream_device("cpu", workers_on_gpus=True) == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU per end: two CUDA devices")
def test_the_weight_stream_over_nccl_between_two_gpus():
    version, weights = stream_both_ends(("cuda:0", "cuda:1"))
    assert version == 7 and weights["w"].device == torch.device("cuda:1")
    assert torch.equal(weights["w"].float().cpu(), torch.arange(6.0).reshape(2, 3))


def test_workers_the_cluster_cannot_hold_are_refused_in_one_line(tmp_path):
    pytest.importorskip("ray")
    result = run_cli(
        "train",
        *ARITHMETIC,
        "distributed.rollout_workers=2",
        "distributed.worker_gpus=1",
        f"run.dir={tmp_path}",
        "run.name=nogpu",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2 and "need 2 GPU(s) and this machine has 0" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (Path(tmp_path) / "nogpu").exists()


def test_with_staleness_a_dead_worker_is_replaced_at_the_sync_and_its_batch_rerun(tmp_path):
    import ray

    trainer = trainer_with_workers(
        tmp_path, [*ARITHMETIC, "train.steps=3", "distributed.max_staleness=1"], failure="retry"
    )
    try:
        trainer.train_step()
        ray.kill(trainer.rollout_pool.workers[1], no_restart=True)
        lags = [trainer.train_step()["staleness"] for _ in range(2)]  # the sync replaces it; the rerun uses it
        assert trainer.rollout_pool.restarts == 1 and trainer.step == 3 and max(lags) <= 1
    finally:
        trainer.close()
