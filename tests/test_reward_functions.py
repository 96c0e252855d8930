"""reward.functions: reward functions with TRL's signature, from a file, weighted and summed with a single-turn
environment's own reward; a user's broken function stops the run with one line naming it and the row."""

import json
from functools import partial

import pytest

from r3l.envs import Env, StepResult, Task, judge, make
from r3l.envs.reward_functions import RewardFunctions, with_reward_functions
from r3l.errors import UserError
from tests.conftest import run_cli

FUNCTIONS = """
def length_bonus(prompts, completions, **columns):
    return [len(c) / 100 for c in completions]

def answer_echo(prompts, completions, answer, **columns):
    return [1.0 if str(a) in c else 0.0 for a, c in zip(answer, completions)]

def has_keyword(prompts, completions, keyword, **columns):
    return [float(k in c) for k, c in zip(keyword, completions)]

def broken(prompts, completions, **columns):
    raise KeyError("score")

def two_values(prompts, completions, **columns):
    return [0.0, 1.0]
"""


@pytest.fixture
def functions(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(FUNCTIONS)
    return path


def rewarded(file, *names, weights=None, env_weight=1.0, threshold=None, env="arithmetic", **settings):
    specs = tuple(f"{file}:{name}" for name in names)
    chosen = RewardFunctions(specs, tuple(weights or [1.0] * len(names)), env_weight, threshold)
    return with_reward_functions(partial(make, env, **settings), chosen)


def test_functions_add_to_the_environments_reward_with_their_weights(functions):
    env = rewarded(functions, "length_bonus", "answer_echo", weights=[2.0, 0.5])
    task = env.tasks("train")[0]
    right, wrong = f"<answer>{task.answer}</answer>", "<answer>nothing</answer>"
    verdict = judge(env, task, right)
    assert verdict.success  # without a threshold the environment's verdict decides success
    assert verdict.reward == pytest.approx(1.0 + 2.0 * len(right) / 100 + 0.5 * 1.0)
    assert "length_bonus" in verdict.feedback and "answer_echo" in verdict.feedback
    verdict = judge(env, task, wrong)
    assert not verdict.success and verdict.reward == pytest.approx(2.0 * len(wrong) / 100)
    assert env.action_format == "whole_reply" and env.name == "arithmetic"  # the environment's capabilities


def test_a_threshold_decides_success_when_the_functions_alone_reward(functions):
    env = rewarded(functions, "length_bonus", env_weight=0.0, threshold=0.5)
    task = env.tasks("train")[0]
    assert judge(env, task, "x" * 60).success and judge(env, task, "x" * 60).reward == pytest.approx(0.6)
    assert not judge(env, task, f"<answer>{task.answer}</answer>").success  # a right answer no longer counts


def test_a_dataset_rows_columns_reach_the_function(functions, tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [{"prompt": f"Say {word}.", "answer": word, "keyword": word} for word in ["apple", "pear", "fig", "kiwi"]]
    data.write_text("\n".join(json.dumps(row) for row in rows))
    env = rewarded(functions, "has_keyword", env="dataset", path=str(data), verifier="exact", test_fraction=0.0)
    task = env.tasks("train")[0]
    keyword = task.data["columns"]["keyword"]
    assert judge(env, task, f"I say {keyword}").reward == pytest.approx(1.0)  # the exact verifier: 0
    assert judge(env, task, "I say nothing").reward == 0.0


def test_a_broken_function_is_one_line_naming_it_and_the_row(functions, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"prompt": "Say hi.", "answer": "hi"}) + "\n")
    env = rewarded(functions, "broken", env="dataset", path=str(data), test_fraction=0.0)
    with pytest.raises(
        UserError,
        match=r"reward.functions '.*my_rewards.py:broken' failed on task dataset-train-0 "
        r"\(.*data.jsonl line 1\): KeyError: 'score'",
    ):
        judge(env, env.tasks("train")[0], "hi")
    env = rewarded(functions, "two_values")
    with pytest.raises(UserError, match="two_values' returned .* on task arithmetic-train-.*one float per completion"):
        judge(env, env.tasks("train")[0], "hi")


def test_bad_settings_fail_before_the_first_answer(functions):
    with pytest.raises(UserError, match="reward.weights has 2 values for 1 reward.functions"):
        rewarded(functions, "length_bonus", weights=[1.0, 2.0])
    with pytest.raises(UserError, match="set reward.success_threshold"):
        rewarded(functions, "length_bonus", env_weight=0.0)
    with pytest.raises(UserError, match="has no function 'missing'"):
        rewarded(functions, "missing")
    with pytest.raises(UserError, match="cannot import reward.functions"):
        RewardFunctions(("no_such_module_here:f",), (1.0,))


class TwoSteps(Env):
    name = "two_steps"

    def tasks(self, split):
        return [Task(id="t", prompt="go")]

    def reset(self, task):
        return "go"

    def step(self, action):
        return StepResult("again", 0.0, False)


def test_a_multi_turn_environment_is_refused(functions):
    chosen = RewardFunctions((f"{functions}:length_bonus",), (1.0,))
    with pytest.raises(UserError, match="'two_steps' is multi-turn"):
        with_reward_functions(TwoSteps, chosen)


def test_a_rollout_is_rewarded_by_the_users_function(functions, tmp_path):
    from r3l.models import load_policy

    result = run_cli(
        "rollout",
        "model=tiny-random",
        "env=arithmetic",
        "sampling.group_size=2",
        "--tasks",
        "2",
        "--no-show",
        "--dump",
        "out.jsonl",
        f"reward.functions=[{functions}:length_bonus]",
        "reward.weights=[3.0]",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    _, tokenizer = load_policy("tiny-random")
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        reply = tokenizer.decode(
            [t for t, m in zip(record["tokens"], record["loss_mask"]) if m], skip_special_tokens=True
        )
        # the random model never answers right: the environment's reward is 0, the function's is the rest
        assert record["reward"] == pytest.approx(3.0 * len(reply) / 100)
