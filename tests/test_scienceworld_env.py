"""ScienceWorld env against the real simulator: held-out task types, admissible and inadmissible actions,
replay, a gold playthrough, failure and the step limit. One Java VM for the whole module."""

import shutil

import pytest

pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs Java on PATH", allow_module_level=True)

from scienceworld.constants import ID2TASK

from r3l.envs import make
from r3l.envs.scienceworld import PAPER_TRAIN_TYPES
from r3l.errors import UserError


@pytest.fixture(scope="module")
def env():
    # find-plant is one of the paper's train types, find-animal one of its held-out test types
    environment = make("scienceworld", task_names=["find-plant", "find-animal"], train_size=4, test_size=2)
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def gold(env):
    task = env.tasks("train")[0]
    return task, env.gold_actions(task)


def test_paper_split_holds_out_task_types():
    assert len(PAPER_TRAIN_TYPES) == 17 and set(PAPER_TRAIN_TYPES) < set(ID2TASK.values())
    paper = make("scienceworld")  # no Java until tasks are asked for
    assert set(paper.types["train"]) == set(PAPER_TRAIN_TYPES) and len(paper.types["test"]) == 13
    assert not set(paper.types["train"]) & set(paper.types["test"])
    with pytest.raises(UserError, match="without task types"):
        make("scienceworld", task_names=["find-plant"])
    with pytest.raises(UserError, match="unknown ScienceWorld task"):
        make("scienceworld", task_names=["find-unicorn"])
    assert make("scienceworld", task_names=["find-plant"], split="variations").types["test"] == ["find-plant"]


def test_tasks_are_deterministic_and_splits_disjoint(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert (len(train), len(test)) == (4, 2)
    assert {task.data["task_name"] for task in train} == {"find-plant"}
    assert {task.data["task_name"] for task in test} == {"find-animal"}
    assert len({task.id for task in train + test}) == 6
    env._tasks.clear()  # rebuild from the simulator: same seed, same tasks
    assert env.tasks("train") == train and env.tasks("test") == test


def test_reset_step_invalid_action_and_replay(env, gold):
    task, actions = gold
    observation = env.reset(task)
    assert observation.startswith("Your task is to find a(n) plant.") and "This room is called" in observation
    assert "look around" in env.admissible_actions and "reset task" not in env.admissible_actions

    first = env.step(actions[0])
    assert first.info["admissible"] is True and not first.done
    assert first.info["moves"] == 1 and first.info["admissible_actions"]

    bad = env.step("fly to the moon")
    assert bad.info["admissible"] is False and bad.reward == 0.0 and not bad.done
    assert bad.observation.startswith("'fly to the moon' is not a valid action here.")
    assert "look around" in bad.observation
    assert env.step("reset task").info["admissible"] is False
    assert env.step("").info["admissible"] is False

    second = env.step(actions[1])
    prefix = [actions[0], "fly to the moon", "reset task", "", actions[1]]
    following = env.step(actions[2])
    assert env.replay(task, prefix) == second.observation
    again = env.step(actions[2])
    assert (again.observation, again.reward, again.info) == (following.observation, following.reward, following.info)


def test_gold_playthrough_succeeds_with_rewards_adding_up_to_one(env, gold):
    task, actions = gold
    assert 0 < len(actions) <= env.max_steps
    env.reset(task)
    results = [env.step(action) for action in actions]
    assert results[-1].done and not any(result.done for result in results[:-1])
    assert results[-1].info["success"] is True and results[-1].info["score"] == 1.0
    assert sum(result.reward for result in results) == pytest.approx(1.0)
    assert results[-1].info["feedback"].startswith("Task completed in")


def test_focusing_on_a_wrong_object_fails_and_ends_the_episode(env, gold):
    task, _ = gold
    env.reset(task)
    results = [env.step("look around"), env.step("focus on agent")]
    assert results[-1].done and results[-1].info["success"] is False and results[-1].info["score"] < 0
    assert sum(result.reward for result in results) == pytest.approx(0.0)
    assert "The task failed at step 2: 'focus on agent'" in results[-1].info["feedback"]


def test_max_steps_ends_the_episode(env, gold, monkeypatch):
    task, _ = gold
    monkeypatch.setattr(env, "max_steps", 2)
    env.reset(task)
    results = [env.step("look around"), env.step("look around")]
    assert [result.done for result in results] == [False, True]
    assert results[-1].info["success"] is False and "ran out of steps (2)" in results[-1].info["feedback"]
    assert sum(result.reward for result in results) == pytest.approx(results[-1].info["score"])  # the starting points
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look around")


def test_a_null_test_size_takes_every_test_variation_of_the_held_out_types():
    """`test_size: null`: the whole held-out set (for find-animal, each of its test variations once)."""
    environment = make("scienceworld", task_names=["find-plant", "find-animal"], train_size=1, test_size=None)
    try:
        tasks = environment.tasks("test")
        environment._simulator().load("find-animal", 0, "")
        assert len(tasks) == len(environment._simulator().get_variations_test()) > 2
        assert len({task.id for task in tasks}) == len(tasks)
    finally:
        environment.close()
    with pytest.raises(UserError, match="test_size must be a whole number >= 0 \\(or null for all\\)"):
        make("scienceworld", test_size=-1)
