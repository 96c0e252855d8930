"""Faults: kill -9 at exact points (mid-checkpoint, after the rollout, after the update) and at random times, then
resume until done: the final weights equal an uninterrupted run's; damaged or mismatched checkpoints and a
failing disk stop with one line; every Ctrl-C is one line, exit status 130, and leaves a run that resumes or no
directory at all."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from r3l.learner.checkpoint import latest_checkpoint, load_trainer_state
from tests.conftest import run_cli

TINY = [
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
]
# each kills the process at a named moment on its N-th pass (r3l/faults.py); after the first, every process resumes
FAILPOINTS = [
    "rollout_done@2",
    "update_done@2",
    "checkpoint_model_written@2",
    "checkpoint_written@2",
    "checkpoint_renamed@2",
    "checkpoint_linked@2",
]
RANDOM_KILLS = 1  # and one kill at a random moment: start-up, a rollout, an update or a checkpoint write


def launch(args, cwd, failpoint=None):
    env = {**__import__("os").environ, **({"R3L_FAILPOINT": failpoint} if failpoint else {})}
    return subprocess.Popen(
        [sys.executable, "-m", "r3l.cli", *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )  # never read: a full pipe would stall the run


def final_weights(run_dir: Path) -> dict:
    return load_file(str(latest_checkpoint(run_dir) / "model" / "model.safetensors"))


def test_kill_nine_at_every_failpoint_and_at_random_then_resume_gives_the_uninterrupted_weights(tmp_path):
    reference = run_cli("train", *TINY, f"run.dir={tmp_path}", "run.name=whole", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-2000:]
    run_dir = tmp_path / "killed"
    # the optimizer state kept: a run may finish inside the loop, and each turn loads its latest checkpoint
    first = launch(
        ["train", *TINY, f"run.dir={tmp_path}", "run.name=killed", "train.keep_optimizer=true"], tmp_path, FAILPOINTS[0]
    )
    assert first.wait(timeout=600) == -9
    kills, steps = [FAILPOINTS[0]], [load_trainer_state(latest_checkpoint(run_dir))["step"]]
    draw = random.Random(0)
    plan = FAILPOINTS[1:] + [None] * RANDOM_KILLS
    draw.shuffle(plan)
    for failpoint in plan:
        process = launch(["train", "--resume", str(run_dir)], tmp_path, failpoint)
        if failpoint is None:  # a random moment: start-up, a rollout, an update or a checkpoint write
            time.sleep(draw.uniform(3.0, 12.0))
            process.kill()
        assert process.wait(timeout=600) in (-9, 0)
        kills.append(failpoint or "random")
        checkpoint = latest_checkpoint(run_dir)
        assert not checkpoint.name.startswith(".") and (checkpoint / "state.pt").is_file()
        steps.append(load_trainer_state(checkpoint)["step"])  # every kill leaves a complete checkpoint to load
    assert len(kills) == len(FAILPOINTS) + RANDOM_KILLS
    assert steps == sorted(steps), "a resume never goes back before the last complete checkpoint"
    done = run_cli("train", "--resume", str(run_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    ours, theirs = final_weights(run_dir), final_weights(tmp_path / "whole")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    result = run_cli(
        "train", *TINY[:-2], "train.steps=2", f"run.dir={root}", "run.name=run", "train.keep_optimizer=true", cwd=root
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return root / "run"


def test_a_damaged_checkpoint_file_is_one_line_naming_it(finished_run, tmp_path):
    import shutil

    for name, damage in [
        ("state.pt", b"not a pickle"),
        ("optimizer.pt", b"\x80\x04trunc"),
        ("model/model.safetensors", b"\x00" * 16),
    ]:
        run_dir = tmp_path / name.replace("/", "_")
        shutil.copytree(finished_run, run_dir, symlinks=True)
        (latest_checkpoint(run_dir) / name).write_bytes(damage)
        result = run_cli("train", "--resume", str(run_dir), "train.steps=3", cwd=tmp_path)
        assert result.returncode == 2, result.stderr[-2000:]
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert name.split("/")[-1] in result.stderr


def test_a_checkpoint_of_another_model_is_one_line_and_keeps_the_runs_config(finished_run, tmp_path):
    saved = (finished_run / "config.yaml").read_text()
    result = run_cli(
        "train", "--resume", str(finished_run), "train.steps=3", "model=smollm2-135m-instruct", cwd=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "model.safetensors" in result.stderr and "different model" in result.stderr
    assert (finished_run / "config.yaml").read_text() == saved


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_last_checkpoint(finished_run, tmp_path):
    import resource
    import shutil

    run_dir = tmp_path / "full"
    shutil.copytree(finished_run, run_dir, symlinks=True)
    before = latest_checkpoint(run_dir)
    limit = 64 * 1024  # bytes per file: metrics lines fit, a model file does not (EFBIG, as a full disk's ENOSPC)

    def small_files():
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, "-m", "r3l.cli", "train", "--resume", str(run_dir), "train.steps=3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=small_files,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("stopped: could not write the checkpoint of step 3")
    assert not list((run_dir / "checkpoints").glob(".*partial"))
    assert latest_checkpoint(run_dir) == before and load_trainer_state(before)["step"] == 2


def test_a_full_disk_while_writing_metrics_is_one_line_and_the_run_resumes_after(finished_run, tmp_path):
    import shutil

    run_dir = tmp_path / "full_metrics"
    shutil.copytree(finished_run, run_dir, symlinks=True)
    before = latest_checkpoint(run_dir)
    metrics = run_dir / "metrics.jsonl"
    kept = metrics.read_text()
    metrics.unlink()
    metrics.symlink_to("/dev/full")  # every write fails with ENOSPC, as on a full disk
    result = run_cli("train", "--resume", str(run_dir), "train.steps=3", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: No space left on device") and "--resume" in last
    assert latest_checkpoint(run_dir) == before and load_trainer_state(before)["step"] == 2
    metrics.unlink()
    metrics.write_text(kept)  # space freed: the run goes on from its last checkpoint
    done = run_cli("train", "--resume", str(run_dir), "train.steps=3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert load_trainer_state(latest_checkpoint(run_dir))["step"] == 3


def interrupted(args, cwd, failpoint, inherited=signal.SIG_DFL) -> subprocess.CompletedProcess:
    """`r3l ARGS` with Ctrl-C (SIGINT) at the failpoints named (r3l/faults.py: NAME@N:INT, comma-separated).

    The run starts with SIGINT's disposition `inherited`: the default, as a command started from a terminal
    does, or ignored, as a background job of a non-interactive shell does (`pytest &` passes that on): r3l must
    stop the same way either way."""
    return subprocess.run(
        [sys.executable, "-m", "r3l.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "R3L_FAILPOINT": failpoint},
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),
    )


IGNORED = signal.SIG_IGN


def last_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "failpoint, checkpoint_every, kept, inherited",
    [
        ("evaluation:INT", 1, None, signal.SIG_DFL),  # in the held-out evaluation before training: nothing to resume
        ("evaluation:INT", 1, None, IGNORED),  # the same, started with SIGINT ignored
        ("rollout_done@2:INT,update_done@2:INT", 0, None, signal.SIG_DFL),  # twice in step 2, before any checkpoint
        ("rollout_done@2:INT,update_done@2:INT", 1, "step_000001", signal.SIG_DFL),  # twice, after step 1's checkpoint
        ("rollout_done@2:INT", 0, "step_000002", signal.SIG_DFL),  # once: step 2 finishes and is checkpointed
        ("rollout_done@2:INT", 0, "step_000002", IGNORED),
        ("evaluation@2:INT", 0, "step_000003", signal.SIG_DFL),  # in the evaluation after training
        ("evaluation@2:INT", 0, "step_000003", IGNORED),
    ],
)
def test_every_interrupt_is_one_line_exit_130_and_a_run_that_resumes_or_none(
    tmp_path, failpoint, checkpoint_every, kept, inherited
):
    runs, run_dir = tmp_path / "runs", tmp_path / "runs" / "run"
    result = interrupted(
        [
            "train",
            *TINY[:-2],
            "train.steps=3",
            "eval.size=2",
            f"train.checkpoint_every={checkpoint_every}",
            f"run.dir={runs}",
            "run.name=run",
        ],
        tmp_path,
        failpoint,
        inherited,
    )
    assert result.returncode == 130, result.stderr[-2000:]
    last = last_line(result)
    assert last.startswith("interrupted: ")
    if kept is None:
        assert not run_dir.exists() and f"{run_dir} removed" in last
        return
    assert f"continue with: r3l train --resume {run_dir}" in last
    assert latest_checkpoint(run_dir).name == kept
    resumed = run_cli("train", "--resume", str(run_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["step"] == 3


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, IGNORED], ids=["sigint-default", "sigint-ignored"])
def test_an_interrupted_or_failed_eval_or_bench_leaves_no_directory(tmp_path, inherited):
    runs = tmp_path / "runs"
    small = [
        "model=tiny-random",
        "env=countdown",
        "generator.dtype=float32",
        "logging.progress=false",
        "logging.tensorboard=false",
        f"run.dir={runs}",
    ]
    evaluation = interrupted(["eval", *small, "eval.size=2"], tmp_path, "evaluation:INT", inherited)
    assert evaluation.returncode == 130 and last_line(evaluation) == "interrupted: nothing was written"
    bench = [
        *small,
        "train.tasks_per_step=2",
        "sampling.group_size=4",
        "sampling.max_new_tokens=6",
        "train.micro_batch_size=4",
        "--sections",
        "side_by_side",
        "--repeats",
        "1",
        "--warmup",
        "0",
    ]
    stopped = interrupted(["bench", *bench], tmp_path, "rollout_done:INT", inherited)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert last_line(stopped) == "interrupted: no section had finished; nothing was kept"
    if inherited == IGNORED:
        return
    failed = run_cli("bench", *bench, "--vs", "nope", cwd=tmp_path)
    assert failed.returncode == 2 and last_line(failed).startswith("error: --vs nope")
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.rglob("*"))
