"""End-to-end runs of the CLI with the tiny-random model: rollout dump, train, resume, eval, report."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests.conftest import run_cli

RECORD_FIELDS = {
    "group",
    "kind",
    "tokens",
    "loss_mask",
    "logprobs",
    "reward",
    "advantage",
    "turn_spans",
    "pivot",
    "text",
    "meta",
    "objective",
    "segments",
}
TINY = [
    "model=tiny-random",
    "env=countdown",
    "sampling.group_size=4",
    "sampling.max_new_tokens=8",
    "train.tasks_per_step=2",
    "train.micro_batch_size=4",
    "eval.size=4",
    "logging.progress=false",
    "logging.tensorboard=false",
    "generator.dtype=float32",
]


def read_records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_rollout_dump_matches_the_experience_record(tmp_path):
    result = run_cli(
        "rollout", "model=tiny-random", "algorithm=grpo", "env=countdown", "--dump", "out.jsonl", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    records = read_records(tmp_path / "out.jsonl")
    assert records and all(set(r) == RECORD_FIELDS for r in records)
    for record in records:
        n = len(record["tokens"])
        assert len(record["loss_mask"]) == n and len(record["logprobs"]) == n
        ((start, end),) = record["turn_spans"]
        assert end == n and record["loss_mask"] == [0] * start + [1] * (n - start)
        assert all(lp == 0.0 for lp in record["logprobs"][:start])
        assert record["kind"] == "base" and record["pivot"] is None
        assert record["meta"]["task_id"].startswith("countdown-train-")
    groups = {r["group"] for r in records}
    assert len(groups) == 2 and all(sum(r["group"] == g for r in records) == 8 for g in groups)
    for group in groups:  # grpo advantages sum to zero within a group
        assert abs(sum(r["advantage"] for r in records if r["group"] == group)) < 1e-5


def test_train_dump_resume_eval_report(tmp_path):
    run_dir = tmp_path / "runs" / "tiny"
    result = run_cli(
        "train",
        *TINY,
        "train.steps=2",
        "train.checkpoint_every=1",
        f"run.dir={tmp_path / 'runs'}",
        "run.name=tiny",
        "--dump-experiences",
        "train.keep_optimizer=true",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["step"] == 2 and summary["eval_before"]["total"] == 4
    assert sorted(p.name for p in (run_dir / "experiences").iterdir()) == ["step_000001.jsonl", "step_000002.jsonl"]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2]
    assert all(m["forward_positions"] > 0 for m in metrics if "train_tokens_per_s" in m)  # measured work only
    assert all("train_tokens_per_s" not in m for m in metrics if not m.get("forward_positions"))
    assert (run_dir / "checkpoints" / "latest" / "model" / "config.json").exists()
    # one checkpoint by default (train.keep_checkpoints=1), with the optimizer state (asked for: a finished run
    # drops it by default) that training it further needs
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_000002"]
    assert (run_dir / "checkpoints" / "step_000002" / "optimizer.pt").exists()

    # provenance: the code of each session, the tasks of each step, no path of this machine in what is written
    sessions = read_records(run_dir / "provenance.jsonl")
    assert [s["session"] for s in sessions] == ["start"] and len(sessions[0]["source_hash"]) == 12
    assert sessions[0]["machine"]["cores"] >= 1 and sessions[0]["machine"]["torch"]  # wall times need their machine
    steps = read_records(run_dir / "tasks.jsonl")
    assert [s["step"] for s in steps] == [1, 2] and all(len(s["tasks"]) == 2 for s in steps)
    assert all(task.startswith("countdown-train-") and len(prompt) == 12 for s in steps for task, prompt in s["tasks"])
    written = json.loads((run_dir / "summary.json").read_text())
    assert written["run"] == "tiny" and str(tmp_path) not in json.dumps(written)
    assert written["spent"]["generated_tokens"] > 0 and written["code"]["source_hash"] == sessions[0]["source_hash"]
    # the resolved device, dtypes and placement of every process: logged at start-up and kept (issue 35)
    assert written["layout"]["device"] == "cpu" and written["layout"]["learner_ranks"] == ["cpu"]
    assert "trainer: policy on cpu" in result.stdout + result.stderr

    # a resume under other code is refused in one line, unless allowed (and recorded)
    sessions[0]["source_hash"] = "0123456789ab"
    (run_dir / "provenance.jsonl").write_text(json.dumps(sessions[0]) + "\n")
    refused = run_cli("train", "--resume", str(run_dir), "train.steps=3", cwd=tmp_path)
    assert refused.returncode == 2 and "ran other code" in refused.stderr and "--allow-code-change" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    resumed = run_cli("train", "--resume", str(run_dir), "train.steps=3", "--allow-code-change", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["step"] == 3
    assert (run_dir / "checkpoints" / "latest").resolve().name == "step_000003"
    last = read_records(run_dir / "provenance.jsonl")[-1]
    assert last["session"] == "resume" and last["step"] == 2 and last["allowed_code_change"] is True

    evaluated = run_cli(
        "eval",
        "env=countdown",
        "eval.size=3",
        "generator.dtype=float32",
        "--model",
        str(run_dir),
        "--out",
        str(tmp_path / "ev"),
        cwd=tmp_path,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    record = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert record["total"] == 3 and 0 <= record["ci95"][0] <= record["success"] <= record["ci95"][1] <= 1

    report = run_cli("report", str(run_dir), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert (run_dir / "plots" / "loss.png").exists()


def write_dataset(path: Path) -> Path:
    rows = [{"prompt": f"Say something about {word}.", "answer": word} for word in ("cats", "rain", "tea", "maps")]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path):
    """Resume restores weights, optimizer, schedule, data position and RNG: the result is bit-for-bit close."""
    data = write_dataset(tmp_path / "data.jsonl")
    reward_fn = f"{Path(__file__).parent / 'helpers' / 'rewards.py'}:vowel_share_reward"
    common = [
        *TINY,
        "env=dataset",
        f"env.args={{path: '{data}', reward_fn: '{reward_fn}', test_fraction: 0.25}}",
        "eval.size=0",
        "train.lr=1e-3",
        "train.schedule=cosine",
        f"run.dir={tmp_path}",
    ]
    straight = run_cli("train", *common, "train.steps=4", "run.name=straight", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    finished = tmp_path / "straight" / "checkpoints" / "latest"  # a finished run keeps weights, not the optimizer
    assert (finished / "model" / "model.safetensors").exists() and not (finished / "optimizer.pt").exists()

    interrupted = subprocess.Popen(
        [sys.executable, "-m", "r3l.cli", "train", *common, "train.steps=4", "run.name=split"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "split" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.exists() and '"loss"' in metrics.read_text()):
        time.sleep(0.05)
    interrupted.send_signal(signal.SIGINT)  # Ctrl-C: finish the step, checkpoint, stop
    stdout, stderr = interrupted.communicate(timeout=300)
    assert interrupted.returncode == 130, stderr  # told apart from a finished run
    stopped = json.loads(stdout)
    assert stopped["interrupted"] and 1 <= stopped["step"] < 4
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: stopped after step {stopped['step']} of 4; "
        f"continue with: r3l train --resume {tmp_path / 'split'}"
    )
    assert (tmp_path / "split" / "checkpoints" / "latest").resolve().name == f"step_{stopped['step']:06d}"

    second = run_cli("train", "--resume", str(tmp_path / "split"), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["step"] == 4
    a = load_file(str(tmp_path / "straight" / "checkpoints" / "latest" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "checkpoints" / "latest" / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    from r3l.models import load_policy

    initial = load_policy("tiny-random")[0].state_dict()
    assert any(not torch.allclose(initial[k], a[k]) for k in a)  # training really moved the weights


def test_lora_and_gradient_checkpointing_train_and_save_loadable_models(tmp_path):
    data = write_dataset(tmp_path / "data.jsonl")
    reward_fn = f"{Path(__file__).parent / 'helpers' / 'rewards.py'}:vowel_share_reward"
    common = [
        *TINY,
        "env=dataset",
        f"env.args={{path: '{data}', reward_fn: '{reward_fn}', test_fraction: 0.25}}",
        "eval.size=0",
        "train.steps=1",
        f"run.dir={tmp_path}",
    ]
    lora = run_cli("train", *common, "run.name=lora", "model.lora.enabled=true", "model.lora.r=4", cwd=tmp_path)
    assert lora.returncode == 0, lora.stderr
    latest = tmp_path / "lora" / "checkpoints" / "latest"
    assert (latest / "adapter" / "adapter_model.safetensors").exists()
    merged = load_file(str(latest / "model" / "model.safetensors"))
    assert not any("lora_" in name for name in merged)  # the saved model is plain, ready for `r3l eval`
    lora_metrics = json.loads((tmp_path / "lora" / "metrics.jsonl").read_text().splitlines()[0])
    assert lora_metrics["lora/base_changed"] == 0.0  # the guard ran after the step's sync, and the base held

    checkpointed = run_cli("train", *common, "run.name=gc", "model.gradient_checkpointing=true", cwd=tmp_path)
    assert checkpointed.returncode == 0, checkpointed.stderr
    metrics = json.loads((tmp_path / "gc" / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["grad_norm"] > 0
