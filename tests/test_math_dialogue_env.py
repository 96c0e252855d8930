"""The 'math' multi-attempt dialogue over real single-turn sources, on hand-made tasks."""

import json

import pytest

from r3l.envs import make
from r3l.envs.arithmetic import ArithmeticEnv
from r3l.envs.base import Task
from r3l.envs.countdown import CountdownEnv
from r3l.envs.math_dialogue import MathDialogueEnv, check_template, retry_text, source_settings
from r3l.errors import UserError

SIX_BY_SEVEN = Task(id="hand-1", prompt="Calculate 6 * 7. Answer in <answer></answer> tags.", answer="42")


@pytest.fixture(scope="module")
def env():
    return make("math", source="arithmetic", source_args={"train_size": 3, "test_size": 2})


def play(env, task, replies):
    env.reset(task)
    return [env.step(reply) for reply in replies]


def test_capabilities_tasks_and_prompt_come_from_the_source(env):
    assert isinstance(env, MathDialogueEnv) and isinstance(env.source, ArithmeticEnv)
    assert (env.action_format, env.retry_from_pivot, env.max_attempts) == ("whole_reply", False, 3)
    assert env.tasks("test") == env.source.tasks("test") and len(env.tasks("train")) == 3
    assert env.system_prompt == env.source.system_prompt
    assert env.reset(SIX_BY_SEVEN) == SIX_BY_SEVEN.prompt


def test_right_first_time(env):
    [result] = play(env, SIX_BY_SEVEN, ["6 * 7 = 42 <answer>42</answer>"])
    assert (result.reward, result.done) == (1.0, True)
    assert result.info == {
        "attempt": 1,
        "score": 1.0,
        "success": True,
        "feedback": "Correct on attempt 1 of 3: correct",
    }
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>42</answer>")


def test_right_on_the_second_attempt_after_being_told_why(env):
    first, second = play(env, SIX_BY_SEVEN, ["<answer>48</answer>", "<answer>42</answer>"])
    assert (first.reward, first.done, first.info) == (0.0, False, {"attempt": 1, "score": 0.0})
    assert first.observation == (
        "Your answer is incorrect: answered 48, which is not correct. Think again and give "
        "your corrected final answer in the same format (2 attempt(s) left)."
    )
    assert "42" not in first.observation  # the source is built not to reveal the answer
    assert (second.reward, second.done, second.info["attempt"], second.info["success"]) == (1.0, True, 2, True)
    assert second.info["feedback"] == "Correct on attempt 2 of 3: correct"


def test_all_attempts_wrong(env):
    results = play(env, SIX_BY_SEVEN, ["<answer>41</answer>", "forty-two", "<answer>43</answer>"])
    assert [result.done for result in results] == [False, False, True]
    assert [result.info["attempt"] for result in results] == [1, 2, 3]
    assert sum(result.reward for result in results) == 0.0
    assert "no answer found inside <answer></answer> tags" in results[1].observation
    assert "(1 attempt(s) left)" in results[1].observation
    assert results[-1].info["success"] is False
    assert results[-1].info["feedback"] == "All 3 attempts were wrong; the last one: answered 43, which is not correct"


def test_replay_rebuilds_the_dialogue(env):
    assert env.replay(SIX_BY_SEVEN, ["<answer>41</answer>"]).startswith("Your answer is incorrect: answered 41,")
    assert env.step("<answer>42</answer>").info["attempt"] == 2


def test_one_attempt_and_a_custom_message():
    env = make(
        "math",
        source="arithmetic",
        max_attempts=1,
        retry_message="No: {feedback}",
        source_args={"train_size": 1, "test_size": 1},
    )
    [result] = play(env, SIX_BY_SEVEN, ["<answer>1</answer>"])
    assert result.done and result.info["feedback"] == "The answer was wrong: answered 1, which is not correct"
    env = make(
        "math",
        source="arithmetic",
        max_attempts=2,
        retry_message="No: {feedback} ({attempt}/{max_attempts})",
        source_args={"train_size": 1, "test_size": 1, "reveal_answer_in_feedback": True},
    )
    assert play(env, SIX_BY_SEVEN, ["<answer>1</answer>"])[0].observation == (
        "No: answered 1, the correct answer is 42 (1/2)"
    )


def test_countdown_source():
    env = make("math", source="countdown", source_args={"train_size": 1, "test_size": 1})
    task = Task(id="cd", prompt="Make 10 from [2, 5].", answer={"numbers": [2, 5], "target": 10})
    wrong, right = play(env, task, ["<answer>2 + 5</answer>", "<answer>2 * 5</answer>"])
    assert "evaluates to 7, target is 10" in wrong.observation and not wrong.done
    assert right.done and right.info["success"] and right.reward == 1.0


def test_a_failed_last_attempt_keeps_the_sources_partial_credit(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say something {i}."}) + "\n" for i in range(4)))
    env = make(
        "math",
        source="dataset",
        max_attempts=2,
        source_args={"path": str(data), "reward_fn": "tests.helpers.rewards:vowel_share_reward", "test_fraction": 0.25},
    )
    task = env.tasks("train")[0]
    [only] = play(env, task, ["aaaa"])  # vowel share 1.0 reaches the threshold: a success
    assert (only.done, only.reward, only.info["success"]) == (True, 1.0, True)
    first, last = play(env, task, ["abbb", "abab"])
    assert (first.reward, first.info["score"]) == (0.0, 0.25)
    assert (last.reward, last.done, last.info["success"]) == (0.5, True, False)
    assert "reward 0.5 is below the success threshold 1" in last.info["feedback"]


def test_retry_text_and_template_checks():
    assert retry_text("{feedback}|{attempt}|{attempts_left}|{max_attempts}", "wrong sum.", 1, 3) == "wrong sum|1|2|3"
    assert check_template("{feedback}") == "{feedback}"
    for template, problem in [("", "non-empty"), ("{answer}", "unknown placeholder"), ("{feedback", "not a valid")]:
        with pytest.raises(UserError, match=problem):
            check_template(template)


def test_source_settings_hide_the_answer_only_where_the_source_can_show_it():
    assert source_settings(ArithmeticEnv, {"seed": 1}) == {"seed": 1, "reveal_answer_in_feedback": False}
    assert source_settings(ArithmeticEnv, {"reveal_answer_in_feedback": True}) == {"reveal_answer_in_feedback": True}
    assert source_settings(CountdownEnv, {"seed": 1}) == {"seed": 1}


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({"max_attempts": 0}, "max_attempts must be a whole number >= 1"),
        ({"max_attempts": True}, "max_attempts must be a whole number >= 1"),
        ({"max_attempts": "3"}, "max_attempts must be a whole number >= 1"),
        ({"source": "textworld_express"}, "env.args.source must be a single-turn environment"),
        ({"source": "math"}, "env.args.source must be a single-turn environment"),
        ({"source": "chess"}, "unknown environment 'chess'"),
        ({"source_args": ["train_size", 3]}, "source_args must be a mapping"),
        (
            {"source": "countdown", "source_args": {"colour": "red"}},
            "environment 'countdown' has no setting env.args.colour",
        ),
        ({"retry_message": "{oops}"}, "unknown placeholder"),
        ({"attempts": 3}, "environment 'math' has no setting env.args.attempts"),
    ],
)
def test_bad_settings_are_user_errors(settings, problem):
    with pytest.raises(UserError, match=problem):
        make("math", **settings)
