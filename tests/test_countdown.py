"""Countdown: the binary verifier's verdicts and feedback, and seeded, disjoint splits."""

import random
import sys

import pytest

import r3l.envs
from r3l.envs.arithmetic import clear_task_cache
from r3l.envs.base import Task
from r3l.envs.countdown import CountdownEnv, check_equation, generate_puzzle
from r3l.errors import UserError
from r3l.grading.safe_math import evaluate

NUMBERS = [3, 7, 12]  # 3 * 7 + 12 = 33
TARGET = 33


def reply(equation: str) -> str:
    return f"<think>let me try</think> <answer>{equation}</answer>"


@pytest.fixture(scope="module")
def env():
    return CountdownEnv(seed=0, train_size=30, test_size=10)


def test_correct_answer_gets_reward_one():
    verdict = check_equation(reply("3 * 7 + 12"), NUMBERS, TARGET)
    assert (verdict.reward, verdict.success) == (1.0, True)


def test_any_order_and_trailing_equals_target_accepted():
    assert check_equation(reply(" 12 + (7 * 3) = 33 "), NUMBERS, TARGET).success
    assert check_equation(reply("(12 / 3 + 7) * 3 - 12 + 12"), [3, 7, 12, 3, 12, 12], TARGET).success


def test_a_stated_result_must_be_the_target():
    wrong = check_equation(reply("3 * 7 + 12 = 34"), NUMBERS, TARGET)
    assert not wrong.success and wrong.feedback == "states the result 34, target is 33"
    assert not check_equation(reply("3 * 7 + 11 = 33"), NUMBERS, TARGET).success  # the equation itself is false
    assert check_equation(reply("3 * 7 + 12 = 33.0"), NUMBERS, TARGET).success


def test_last_answer_block_counts():
    text = "example: <answer> (1 + 2) / 3 </answer> ... final: <ANSWER>7*3+12</ANSWER>"
    assert check_equation(text, NUMBERS, TARGET).success


def test_reused_number_fails_with_twice():
    verdict = check_equation(reply("7 * 7 - 12 - 3 - 1"), NUMBERS, TARGET)
    assert verdict.reward == 0.0 and not verdict.success
    assert "uses 7 twice" in verdict.feedback


def test_missing_number_fails():
    verdict = check_equation(reply("3 * 11"), [3, 11, 5], TARGET)
    assert verdict.reward == 0.0
    assert verdict.feedback == "does not use 5"


def test_foreign_number_fails():
    verdict = check_equation(reply("3 * 7 + 12 + 0"), NUMBERS, TARGET)
    assert verdict.reward == 0.0
    assert verdict.feedback == "uses 0, which is not among the numbers"


def test_several_problems_are_all_reported():
    verdict = check_equation(reply("12 + 12 + 2"), NUMBERS, TARGET)
    assert verdict.feedback == (
        "uses 12 twice; uses 2, which is not among the numbers; does not use 3; "
        "does not use 7; evaluates to 26, target is 33"
    )


def test_repeated_given_numbers_are_a_multiset():
    assert check_equation(reply("5 * 5 + 5"), [5, 5, 5], 30).success
    verdict = check_equation(reply("5 * 5"), [5, 5, 5], 25)
    assert verdict.feedback == "uses 5 twice, but it is given 3 times"


def test_wrong_value_feedback_names_both_numbers():
    verdict = check_equation(reply("12 + 7 + 3"), NUMBERS, TARGET)
    assert verdict.reward == 0.0
    assert verdict.feedback == "evaluates to 22, target is 33"


def test_non_integer_value_is_shown_rounded():
    verdict = check_equation(reply("12 / 7 + 3"), NUMBERS, TARGET)
    assert verdict.feedback == "evaluates to 4.7143, target is 33"


def test_division_by_zero_fails_cleanly():
    verdict = check_equation(reply("12 / (7 - 7) + 3"), [12, 7, 7, 3], TARGET)
    assert (verdict.reward, verdict.feedback) == (0.0, "division by zero")


def test_missing_tags():
    verdict = check_equation("3 * 7 + 12 = 33", NUMBERS, TARGET)
    assert (verdict.reward, verdict.feedback) == (0.0, "no answer found inside <answer></answer> tags")


def test_no_format_credit_and_no_code_execution():
    verdict = check_equation(reply("__import__('os').system('echo pwned')"), NUMBERS, TARGET)
    assert verdict.reward == 0.0
    assert verdict.feedback.startswith("not a valid arithmetic expression")


def test_power_is_not_a_basic_operation():
    verdict = check_equation(reply("3 ** 3 + 12 - 7 + 1"), NUMBERS, TARGET)
    assert verdict.reward == 0.0 and "operator ** is not allowed" in verdict.feedback


def test_env_step_reports_success_and_feedback(env):
    task = Task(id="t", prompt="p", answer={"numbers": NUMBERS, "target": TARGET})
    assert env.reset(task) == "p"
    result = env.step(reply("12 + 7 + 3"))
    assert result.done and result.reward == 0.0
    assert result.info == {"success": False, "feedback": "evaluates to 22, target is 33"}


def test_generated_tasks_are_solvable_and_well_formed(env):
    for task in env.tasks("test"):
        assert "Using the numbers" in task.prompt and "<answer>" in task.prompt
        assert str(task.answer["target"]) in task.prompt
        assert env.verify(task, reply(task.data["solution"])).success, task


def test_splits_disjoint_deterministic_and_sized(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (30, 10)

    def puzzles(tasks):
        return {(tuple(sorted(t.answer["numbers"])), t.answer["target"]) for t in tasks}

    assert not puzzles(train) & puzzles(test)
    assert [t.id for t in test] == [f"countdown-test-{i}" for i in range(10)]
    clear_task_cache()
    again = CountdownEnv(seed=0, train_size=30, test_size=10)
    assert again.tasks("train") is not train
    assert list(again.tasks("train")) == list(train) and list(again.tasks("test")) == list(test)
    other = CountdownEnv(seed=1, train_size=30, test_size=10)
    assert puzzles(other.tasks("test")) != puzzles(test)


def test_remaking_the_env_reuses_its_tasks():
    first = CountdownEnv(seed=7, train_size=3, test_size=3)
    assert CountdownEnv(seed=7, train_size=3, test_size=3).tasks("test")[2] is first.tasks("test")[2]


def test_test_split_does_not_depend_on_train_size(env):
    bigger = CountdownEnv(seed=0, train_size=50, test_size=10)
    assert list(bigger.tasks("test")) == list(env.tasks("test"))


def test_difficulty_settings_reach_reasoning_gym():
    env = CountdownEnv(seed=3, train_size=5, test_size=5, min_numbers=5, max_numbers=5, min_target=100, max_target=999)
    for task in env.tasks("train"):
        assert len(task.answer["numbers"]) == 5
        assert 100 <= task.answer["target"] <= 999


def test_unknown_split_and_bad_settings_are_user_errors(env):
    with pytest.raises(UserError, match="unknown split 'dev'"):
        env.tasks("dev")
    with pytest.raises(UserError, match="max_numbers"):
        CountdownEnv(min_numbers=5, max_numbers=3, train_size=1, test_size=1)
    with pytest.raises(UserError, match="train_size"):
        CountdownEnv(train_size=-1)


def test_builtin_generator_makes_solvable_puzzles():
    rng = random.Random(0)
    for _ in range(50):
        numbers, target, expression = generate_puzzle(
            rng, min_numbers=3, max_numbers=4, min_value=1, max_value=100, min_target=10, max_target=100
        )
        value, used = evaluate(expression)
        assert value == target and sorted(used) == sorted(numbers) and 10 <= target <= 100


def test_falls_back_to_builtin_generator_without_reasoning_gym(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` fail
    with pytest.warns(UserWarning, match="built-in"):
        env = CountdownEnv(seed=0, train_size=5, test_size=5)
    task = env.tasks("train")[0]
    assert task.data["source"] == "builtin"
    assert env.verify(task, reply(task.data["solution"])).success


def test_make_by_name_and_unknown_name():
    env = r3l.envs.make("countdown", train_size=3, test_size=2)
    assert isinstance(env, CountdownEnv) and len(env.tasks("test")) == 2
    with pytest.raises(UserError, match="unknown environment 'nope'"):
        r3l.envs.make("nope")
    with pytest.raises(UserError, match="environment 'countdown' has no setting env.args.colour"):
        r3l.envs.make("countdown", colour="red")


def test_drawn_items_kept_on_disk_give_the_same_tasks_and_are_not_redrawn(tmp_path, monkeypatch):
    """Countdown's draws cost milliseconds each, so they are kept between processes (r3l/envs/task_store.py):
    a second process loads the same tasks without drawing, a store for other settings is another file, and a
    damaged file is drawn again."""
    import r3l.envs.arithmetic as arithmetic

    monkeypatch.setenv("R3L_CACHE", str(tmp_path))
    clear_task_cache()
    drawn = CountdownEnv(seed=3, train_size=12, test_size=4)
    first = list(drawn.tasks("test")) + list(drawn.tasks("train"))
    (stored,) = (tmp_path / "tasks").iterdir()
    clear_task_cache()  # a second process, as far as the draws are concerned
    monkeypatch.setattr(arithmetic, "create_reasoning_gym_dataset", lambda *a: pytest.fail("drew instead of loading"))
    loaded = CountdownEnv(seed=3, train_size=12, test_size=4)
    assert list(loaded.tasks("test")) + list(loaded.tasks("train")) == first
    monkeypatch.undo()
    monkeypatch.setenv("R3L_CACHE", str(tmp_path))
    clear_task_cache()
    stored.write_text("{not json")
    again = CountdownEnv(seed=3, train_size=12, test_size=4)
    assert list(again.tasks("test")) + list(again.tasks("train")) == first
    CountdownEnv(seed=4, train_size=12, test_size=4).tasks("test")[0]
    assert len(list((tmp_path / "tasks").glob("*.json"))) == 2
    clear_task_cache()
