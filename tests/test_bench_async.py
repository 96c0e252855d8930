"""The bench's async_pipeline section: the S = 1 arm really trains batches explored one update earlier, the S = 0
arm never, and the overlap bound is read from the lock-step arm's phases."""

import json

import pytest

from r3l.bench import async_pipeline
from r3l.config import load_config


def test_overlap_bound_by_hand():
    lockstep = {"rollout_seconds": {"median": 6.0}, "train_seconds": {"median": 2.0}}
    assert async_pipeline.overlap_bound(lockstep) == pytest.approx(8.0 / 6.0)


@pytest.mark.xdist_group("ray")  # with pytest-xdist: one worker holds every local Ray cluster
def test_section_runs_both_arms_with_a_worker(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    from r3l.bench.run import run_bench

    monkeypatch.setattr(async_pipeline, "WORKLOAD", ["env=arithmetic"])  # the simulator's JVMs are left to r3l bench
    monkeypatch.setattr(async_pipeline, "WORKER_COUNTS", (1,))
    config = load_config(
        None,
        [
            "model=tiny-random",
            "generator.dtype=float32",
            "model.autocast_bf16=false",
            "train.tasks_per_step=2",
            "sampling.group_size=4",
            "sampling.max_new_tokens=6",
            "distributed.worker_timeout_s=300",
            f"run.dir={tmp_path / 'runs'}",
        ],
    )
    out_dir, markdown = run_bench(config, out=tmp_path / "bench", repeats=1, warmup=1, sections="async_pipeline")
    section = json.loads((out_dir / "bench.json").read_text())["sections"]["async_pipeline"]
    arms = section["arms"]
    assert arms["1 worker, S = 0"]["staleness"]["median"] == 0 and arms["1 worker, S = 1"]["staleness"]["median"] == 1
    for arm in arms.values():
        assert arm["step_seconds"]["median"] >= arm["train_seconds"]["median"] > 0
    assert section["speedups"]["1"]["speedup"] > 0 and section["speedups"]["1"]["overlap_bound"] >= 1
    assert "1 worker(s): S = 0 / S = 1 median step" in markdown
