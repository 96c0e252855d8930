"""R3L end to end on the real simulators with the scripted generator (real tokenizer and model, scripted
text that plays admissible actions and writes reports with a pivot): what the dump holds is checked
against the method's rules."""

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from r3l.algorithms import ADVANTAGES
from r3l.config import load_config
from r3l.trainer import Trainer
from tests.conftest import run_cli

SMALL = [
    "model=tiny-random",
    "generator=scripted",
    "sampling.group_size=4",
    "eval.size=0",
    "logging.tensorboard=false",
    "logging.progress=false",
]


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def decoded(tokens):
    from r3l.models import load_policy

    return load_policy("tiny-random")[1].decode(tokens)


def check_r3l_dump(dump, pivotal_credit=True, alpha=3.0):
    bases = {r["meta"]["run"]: r for r in dump if r["kind"] == "base"}
    retries = [r for r in dump if r["kind"] == "retry"]
    assert retries, "the scripted reports name a pivot, so retries happen"
    for retry in retries:
        base = bases[retry["meta"]["run"]]
        assert retry["group"] == base["group"]
        pivot = retry["pivot"]
        assert base["pivot"] == pivot and retry["meta"]["guidance"]
        shared = retry["turn_spans"][pivot][0]  # everything before the first turn written after the pivot
        assert retry["tokens"][:shared] == base["tokens"][:shared]
        assert retry["turn_spans"][:pivot] == base["turn_spans"][:pivot]
        assert retry["meta"]["guidance"].strip() not in decoded(retry["tokens"])  # distilled: no guidance
        for record in (retry, base):
            spans = record["turn_spans"]
            turns = [record["loss_mask"][a:b] for a, b in spans]
            expected_prefix = 0 if pivotal_credit else 1
            assert all(set(t) == {expected_prefix} for t in turns[:pivot])
            assert all(set(t) == {1} for t in turns[pivot:])
            outside = [m for i, m in enumerate(record["loss_mask"]) if not any(a <= i < b for a, b in spans)]
            assert not any(outside)  # prompts and observations are never trained
    runs = [r["meta"]["run"] for r in retries]
    assert len(runs) == len(set(runs)), "each base episode is retried at most once"
    # advantages: positive amplification over each group's base episodes and retries, from the dumped rewards
    policy = [r for r in dump if r["objective"] == "policy"]
    assert all(r["kind"] != "sft" for r in policy)
    ids = {g: i for i, g in enumerate(dict.fromkeys(r["group"] for r in policy))}
    expected = ADVANTAGES.get("positive_amplified")(
        torch.tensor([r["reward"] for r in policy]), torch.tensor([ids[r["group"]] for r in policy]), alpha=alpha
    )
    assert [r["advantage"] for r in policy] == pytest.approx(expected.tolist(), abs=1e-6)
    # SFT samples exactly where a retry succeeded and beat its base: its reflection and its guided retry; and
    # the reflection of each successful base whose report says "success"
    sft = [r for r in dump if r["objective"] == "sft"]
    improving = [r for r in retries if r["meta"]["improved"]]
    assert all(r["meta"]["success"] and r["reward"] >= 1.0 for r in improving), "only successful retries improve"
    assert len([r for r in sft if r["meta"]["sft_of"] == "guided_retry"]) == len(improving)
    assert len([r for r in sft if r["meta"]["sft_of"] == "reflection"]) == len(improving)
    perfect = [
        b
        for b in bases.values()
        if b["meta"]["success"]
        and b["meta"].get("report", {}).get("trajectory_outcome") == "success"
        and b["meta"]["run"] not in {r["meta"]["run"] for r in improving}
    ]
    assert len([r for r in sft if r["meta"]["sft_of"] == "success_reflection"]) == len(perfect)
    for record in sft:
        assert record["kind"] == "sft" and record["advantage"] == 1.0
        if record["meta"]["sft_of"] != "success_reflection":
            assert record["meta"]["improved"] is True
            assert record["meta"]["run"] in {r["meta"]["run"] for r in improving}
    return retries, sft


def test_the_r3l_rollout_line_on_textworld_express(tmp_path):
    result = run_cli(
        "rollout",
        "model=tiny-random",
        "generator=scripted",
        "algorithm=r3l",
        "env=textworld_express",
        "env.args.games=[coin]",
        "run.seed=2",
        "--tasks",
        "3",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    dump = records(tmp_path / "out.jsonl")
    retries, sft = check_r3l_dump(dump)
    kinds_of_sft = {r["meta"]["sft_of"] for r in sft}
    assert kinds_of_sft == {"reflection", "guided_retry", "success_reflection"}, "with these seeds each rule fires"
    assert metrics["retry_count"] == len(retries) and metrics["invalid_report_rate"] == 0.0
    assert metrics["valid_report_rate"] == 1.0
    assert 0.0 <= metrics["report_outcome_agreement"] <= 1.0
    assert sum(v for k, v in metrics.items() if k.startswith("pivot_count/")) == len(retries)
    shown = result.stdout + result.stderr
    assert "reflection report" in shown and "pivot=" in shown and "guidance" in shown
    from r3l.models import load_policy

    tokenizer = load_policy("tiny-random")[1]
    reflections = [r for r in sft if r["meta"]["sft_of"] in ("reflection", "success_reflection")]
    for record in reflections:  # the reflection read the environment's verdict on the episode it judged
        verdict = "success" if record["meta"]["sft_of"] == "success_reflection" else "failure"
        assert f"Verdict of the environment: {verdict} (reward" in tokenizer.decode(record["tokens"])


def test_r3l_without_pivotal_credit_leaves_masks_whole(tmp_path):
    result = run_cli(
        "rollout",
        "--strategy",
        "r3l_no_pivotal_credit",
        "--env",
        "textworld_express",
        *SMALL[:3],
        "env.args.max_steps=8",
        "--tasks",
        "1",
        "--no-show",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    check_r3l_dump(records(tmp_path / "out.jsonl"), pivotal_credit=False)


def test_r3l_on_scienceworld(tmp_path):
    result = run_cli(
        "rollout",
        "--strategy",
        "r3l",
        "--env",
        "scienceworld",
        *SMALL[:3],
        "env.args.max_steps=6",
        "env.args.task_names=[boil]",
        "env.args.split=variations",
        "--tasks",
        "2",
        "--no-show",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    retries, _ = check_r3l_dump(records(tmp_path / "out.jsonl"))
    assert all(r["meta"]["steps"] >= r["pivot"] for r in retries)


def test_math_retries_restart_from_scratch_and_mask_nothing(tmp_path):
    result = run_cli(
        "rollout",
        "--strategy",
        "r3l",
        "--env",
        "math",
        *SMALL[:3],
        "env.args.source=arithmetic",
        "--tasks",
        "3",
        "--no-show",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    dump = records(tmp_path / "out.jsonl")
    retries = [r for r in dump if r["kind"] == "retry"]
    assert retries and all(r["pivot"] == 0 for r in retries)
    for record in dump:
        if record["kind"] in ("base", "retry"):
            assert all(set(record["loss_mask"][a:b]) == {1} for a, b in record["turn_spans"])


def test_r3_refuses_a_multi_turn_environment_in_one_line(tmp_path):
    result = run_cli("rollout", "model=tiny-random", "algorithm=r3", "env=textworld_express", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "single-turn" in result.stderr


@pytest.mark.parametrize(
    "preset",
    [
        "r3l",
        "grpo",
        "opmd",
        "raft",
        "reflect_grpo",
        "r3l_no_pivotal_credit",
        "r3l_no_amplification",
        "r3l_no_reflect_retry",
    ],
)
def test_every_preset_trains_a_step_on_textworld_express(tmp_path, preset):
    config = load_config(
        None,
        [
            f"algorithm={preset}",
            "env=textworld_express",
            "env.args.max_steps=4",
            "env.args.games=[coin]",
            *SMALL,
            "sampling.max_new_tokens=32",
            "train.steps=1",
            "train.tasks_per_step=2",
            f"run.dir={tmp_path}",
            "logging.dump_experiences=true",
        ],
    )
    summary = Trainer(config).run()
    assert summary["step"] == 1
    run_dir = Path(summary["run_dir"])
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in m or "trained_tokens" in m for m in metrics)
    kinds = {r["kind"] for r in records(run_dir / "experiences" / "step_000001.jsonl")}
    assert ("retry" in kinds) == (preset in ("r3l", "reflect_grpo", "r3l_no_pivotal_credit", "r3l_no_amplification"))


def test_unused_retry_slots_can_be_filled_with_fresh_episodes(tmp_path):
    result = run_cli(
        "rollout",
        "--strategy",
        "r3l",
        "--env",
        "textworld_express",
        *SMALL[:3],
        "env.args.games=[coin]",
        "env.args.max_steps=6",
        "algorithm.strategy_args.fill_unused_slots=fresh",
        "--tasks",
        "3",
        "--no-show",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    dump = records(tmp_path / "out.jsonl")
    check_r3l_dump(dump)
    sizes = defaultdict(int)
    for record in dump:
        sizes[record["group"]] += record["objective"] == "policy"
    assert set(sizes.values()) == {4}  # 2 base episodes + 2 retry slots, every slot used
    fills = [r for r in dump if r["meta"]["run"].rsplit("/", 1)[-1].startswith("fill")]
    assert len(fills) == metrics["filled_slots"] > 0
    assert all(r["kind"] == "base" and r["pivot"] is None and "guidance" not in r["meta"] for r in fills)
