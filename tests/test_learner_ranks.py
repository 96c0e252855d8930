"""`r3l train distributed.learner_ranks=2` (FSDP2 over gloo, CPU processes): trains to the weights one process
reaches, and a 2-rank run stopped and resumed ends where an uninterrupted one does."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import run_cli
from tests.test_train_e2e import TINY, write_dataset


def common(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl")
    reward_fn = f"{Path(__file__).parent / 'helpers' / 'rewards.py'}:vowel_share_reward"
    return [
        *TINY,
        "env=dataset",
        f"env.args={{path: '{data}', reward_fn: '{reward_fn}', test_fraction: 0.25}}",
        "eval.size=0",
        "train.lr=1e-3",
        "model.autocast_bf16=false",
        "train.micro_batch_size=2",
        f"run.dir={tmp_path}",
    ]


def final_weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "checkpoints" / "latest" / "model" / "model.safetensors"))


def test_two_learner_ranks_train_like_one_process(tmp_path):
    args = common(tmp_path)
    one = run_cli("train", *args, "train.steps=2", "run.name=one", cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    two = run_cli("train", *args, "train.steps=2", "run.name=two", "distributed.learner_ranks=2", cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    from r3l.models import load_policy

    initial = load_policy("tiny-random")[0].state_dict()
    assert any(not torch.allclose(initial[k], a[k]) for k in a)  # the updates were real
    metrics = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [m["skipped_zero_advantage"] for m in metrics if "loss" in m] == [
        json.loads(line)["skipped_zero_advantage"]
        for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()
        if "loss" in json.loads(line)
    ]


TWO_RANKS_FOUR_STEPS = ["distributed.learner_ranks=2", "train.steps=4", "train.keep_optimizer=true"]


@pytest.fixture(scope="module")
def straight_two_rank_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """An uninterrupted 2-rank run (checkpoints gathered), the reference both resume tests end at: the
    checkpoints' layout does not change what is trained."""
    root = tmp_path_factory.mktemp("learner-ranks")
    args = [*common(root), *TWO_RANKS_FOUR_STEPS]
    straight = run_cli("train", *args, "run.name=straight", cwd=root)
    assert straight.returncode == 0, straight.stderr[-2000:]
    return root / "straight", args


@pytest.mark.xdist_group("two-rank-resume")  # with pytest-xdist: one worker, so the reference run is made once
@pytest.mark.parametrize("sharded", [False, True], ids=["gathered", "sharded-checkpoints"])
def test_a_two_rank_run_resumes_exactly(tmp_path, sharded, straight_two_rank_run):
    straight, reference_args = straight_two_rank_run
    args = [*reference_args, f"run.dir={tmp_path}", f"distributed.sharded_checkpoints={str(sharded).lower()}"]
    interrupted = subprocess.Popen(
        [sys.executable, "-m", "r3l.cli", "train", *args, "run.name=split"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "split" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and '"loss"' in metrics.read_text()):
        time.sleep(0.05)
    interrupted.send_signal(signal.SIGINT)
    stdout, stderr = interrupted.communicate(timeout=300)
    assert interrupted.returncode == 130, stderr[-2000:]  # an interrupted run is told apart from a finished one
    assert 1 <= json.loads(stdout)["step"] < 4
    resumed = run_cli("train", "--resume", str(tmp_path / "split"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = final_weights(straight), final_weights(tmp_path / "split")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    latest = tmp_path / "split" / "checkpoints" / "latest"
    assert (latest / "sharded").is_dir() == sharded and (latest / "optimizer.pt").exists() != sharded
