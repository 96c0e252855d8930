"""env=verifiers: a Prime Intellect verifiers (v1) taskset as a single-turn r3l environment, graded by its own
weighted @vf.reward functions (the tasksets are in tests/helpers/verifiers_toy.py)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

import r3l.envs
from r3l.envs.base import judge
from r3l.errors import UserError
from tests.conftest import run_cli
from tests.helpers.verifiers_toy import SYSTEM, WEIGHTS

HELPERS = Path(__file__).parent / "helpers" / "verifiers_toy.py"
SUMS = "tests.helpers.verifiers_toy:SumTaskset"


def expected_reward(reply: str, answer: str) -> float:
    """The toy taskset's rubric written out: exact answer (0.75) plus brevity (0.25)."""
    reply = reply.strip()
    return WEIGHTS["correct"] * float(reply == answer) + WEIGHTS["brief"] / (1.0 + len(reply) / 10)


def test_tasks_prompts_and_split():
    env = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 10}, test_fraction=0.2, seed=3)
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (8, 2)
    assert env.system_prompt == SYSTEM  # every task has the same one: the environment's own
    numbers = sorted(int(task.prompt.split()[2]) for task in (*train, *test))
    assert numbers == list(range(10))  # each task once, in one of the splits
    task = train[0]
    assert task.prompt == f"What is {int(task.answer) - 1} + 1?"
    assert task.data["columns"] == {"answer": task.answer, "a": int(task.answer) - 1}
    again = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 10}, test_fraction=0.2, seed=3)
    assert [t.prompt for t in again.tasks("train")] == [t.prompt for t in train]  # the split is seeded


def test_the_verdict_is_the_taskset_own_weighted_score():
    env = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 4})
    task = env.tasks("train")[0]
    right, wrong = task.answer, f"I think it is {int(task.answer) + 7}"
    for reply in (right, wrong):
        trace = env.score(task, reply)  # verifiers' own Task.score over the trace of this reply
        assert {name: (r.score, r.weight) for name, r in trace.rewards.items()}.keys() == WEIGHTS.keys()
        assert all(trace.rewards[name].weight == weight for name, weight in WEIGHTS.items())
        verdict = env.verify(task, reply)
        assert verdict.reward == pytest.approx(trace.reward) == pytest.approx(expected_reward(reply, task.answer))
        assert "correct scored" in verdict.feedback and "brief scored" in verdict.feedback
    good, bad = env.verify(task, right), env.verify(task, wrong)
    assert bad.reward < good.reward
    assert not good.success and not bad.success  # the brevity score keeps 0.975 below the default threshold 1
    lenient = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 4}, success_threshold=0.9)
    assert judge(lenient, task, right).success and not judge(lenient, task, wrong).success


def test_few_shot_messages_and_test_args():
    env = r3l.envs.make(
        "verifiers", id=SUMS, taskset_args={"num_tasks": 3, "few_shot": True}, test_args={"offset": 100, "num_tasks": 2}
    )
    assert len(env.tasks("train")) == 3 and len(env.tasks("test")) == 2
    assert env.system_prompt == f"{SYSTEM}\n\nBe brief."
    first = env.tasks("test")[0]
    assert first.prompt == "User: What is 1 + 1?\n\nAssistant: 2\n\nWhat is 100 + 1?"
    assert env.verify(first, "101").reward == pytest.approx(expected_reward("101", "101"))


def test_system_prompts_that_differ_go_before_each_prompt():
    env = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 3, "vary_system": True}, test_fraction=0)
    assert env.system_prompt is None
    assert sorted(task.prompt for task in env.tasks("train")) == [
        f"Task {i}: answer with the number only.\n\nWhat is {i} + 1?" for i in range(3)
    ]


def test_a_taskset_id_through_verifiers_own_loader(tmp_path, monkeypatch):
    pytest.importorskip("mcp")  # verifiers' loader imports its built-in tasksets, which need mcp
    (tmp_path / "toy_sums.py").write_text(
        "from tests.helpers.verifiers_toy import SumTaskset\n__all__ = ['SumTaskset']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env = r3l.envs.make("verifiers", id="toy_sums", taskset_args={"num_tasks": 5}, max_tasks=3)
    assert len(env.tasks("train")) + len(env.tasks("test")) == 3


def test_what_is_not_single_turn_or_not_a_taskset_is_refused_in_one_line():
    with pytest.raises(UserError, match="setup/finalize hooks.*multi-turn verifiers environments") as refused:
        r3l.envs.make("verifiers", id="tests.helpers.verifiers_toy:SandboxTaskset")
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match="not a verifiers Taskset subclass"):
        r3l.envs.make("verifiers", id="tests.helpers.verifiers_toy:SumTask")
    with pytest.raises(UserError, match="refused env.args.taskset_args"):
        r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": "many"})
    with pytest.raises(UserError, match="cannot load verifiers taskset 'no_such_taskset_here'"):
        r3l.envs.make("verifiers", id="no_such_taskset_here")


def test_cli_rollout_end_to_end(tmp_path):
    result = run_cli(
        "rollout",
        "model=tiny-random",
        f"env=verifiers:{HELPERS}:SumTaskset",
        "env.args.taskset_args={num_tasks: 6}",
        "sampling.group_size=2",
        "sampling.max_new_tokens=8",
        "--tasks",
        "2",
        "--dump",
        "out.jsonl",
        "--no-show",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    assert metrics["experiences"] == 4 and metrics["termination/env_error"] == 0.0
    dump = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(dump) == 4
    env = r3l.envs.make("verifiers", id=SUMS, taskset_args={"num_tasks": 6})  # the same tasks, the same split
    tasks = {task.id: task for task in env.tasks("train")}
    for record in dump:
        task = tasks[record["meta"]["task_id"]]
        assert "correct scored" in record["meta"]["feedback"]
        assert record["reward"] == pytest.approx(expected_reward(record["text"], task.answer))
