"""TextWorldExpress env against the real simulator: splits, admissible and inadmissible actions, replay,
gold playthroughs, failure and the step limit. One Java VM for the whole module."""

import shutil

import pytest

pytest.importorskip("textworld_express")
if shutil.which("java") is None:
    pytest.skip("TextWorldExpress needs Java on PATH", allow_module_level=True)

from r3l.envs import make
from r3l.envs.games.text_game import normalise_action
from r3l.envs.textworld_express import TextWorldExpressEnv, game_settings
from r3l.errors import UserError
from tests.helpers.replay import check_replay


@pytest.fixture(scope="module")
def env():
    environment = make("textworld_express", train_size=8, test_size=4)
    yield environment
    environment.close()


def by_game(env, game, split="train"):
    return next(task for task in env.tasks(split) if task.data["game"] == game)


def test_tasks_are_deterministic_interleaved_and_splits_disjoint(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert [task.data["game"] for task in train[:4]] == ["cookingworld", "coin", "mapreader", "twc"]
    assert (len(train), len(test)) == (8, 4)
    assert {task.data["fold"] for task in train} == {"train"} and {task.data["fold"] for task in test} == {"test"}
    assert not {task.data["seed"] for task in train} & {task.data["seed"] for task in test}
    assert len({task.id for task in train + test}) == 12
    env._tasks.clear()  # rebuild from the simulator: same seed, same tasks
    assert env.tasks("train") == train and env.tasks("test") == test
    with pytest.raises(UserError):
        env.tasks("dev")


def test_settings_fail_early_without_starting_java():
    assert isinstance(make("textworld_express", games="coin"), TextWorldExpressEnv)
    with pytest.raises(UserError, match="unknown TextWorldExpress game"):
        make("textworld_express", games=("coin", "chess"))
    with pytest.raises(UserError, match="game_params"):
        make("textworld_express", game_params="numLocations")
    params = game_settings(("coin", "twc"), {"coin": "numLocations=5"})
    assert "numLocations=5" in params["coin"] and "numItemsToPutAway=2" in params["twc"]


def test_reset_then_admissible_step(env):
    task = by_game(env, "coin")
    observation = env.reset(task)
    assert observation.startswith("Your task is to search the environment and find the coin")
    assert "look around" in env.admissible_actions
    result = env.step("  Look   Around. ")  # case, spacing and a final full stop do not matter
    assert result.info["admissible"] is True and result.reward == 0.0 and not result.done
    assert result.info["moves"] == 1 and result.info["score"] == 0.0
    assert "look around" in result.info["admissible_actions"] and result.observation.startswith("You are in")


def test_observations_list_the_valid_actions_unless_turned_off(env):
    task = by_game(env, "coin")
    observation = env.reset(task)
    listed = observation.rsplit("\n\nValid actions: ", 1)[1].split(", ")
    assert listed == env.admissible_actions and "look around" in listed
    after = env.step("look around").observation
    assert after.rsplit("\n\nValid actions: ", 1)[1].split(", ") == env.admissible_actions
    env.show_actions = False
    try:
        assert "Valid actions:" not in env.reset(task) and "Valid actions:" not in env.step("look around").observation
    finally:
        env.show_actions = True


def test_inadmissible_actions_cost_a_turn_but_never_crash(env):
    env.reset(by_game(env, "mapreader"))
    for moves, action in enumerate(["fly to the moon", "", "take the coin " * 500], start=1):
        result = env.step(action)
        assert result.info["admissible"] is False and result.reward == 0.0 and not result.done
        assert result.info["moves"] == moves and result.info["admissible_actions"]
        assert "for example: " in result.observation and "look around" in result.observation
    assert result.observation.startswith("'take the coin take")
    assert env.step("fly to the moon").observation.startswith("'fly to the moon' is not a valid action here.")


def test_replay_rebuilds_the_state_reached_by_stepping(env):
    task = by_game(env, "cookingworld")
    gold = env.gold_actions(task)
    check_replay(env, task, gold[:3] + ["fly to the moon"] + gold[3:5], gold[5])


def test_gold_playthroughs_succeed_with_rewards_adding_up_to_one(env):
    for game in env.games:
        task = by_game(env, game)
        gold = env.gold_actions(task)
        assert 0 < len(gold) <= env.max_steps
        env.reset(task)
        results = [env.step(action) for action in gold]
        assert results[-1].done and not any(result.done for result in results[:-1])
        assert results[-1].info["success"] is True, game
        assert sum(result.reward for result in results) == pytest.approx(1.0)
        assert results[-1].info["feedback"].startswith("Task completed in")


def test_game_failure_ends_the_episode(env):
    task = by_game(env, "cookingworld")
    gold = env.gold_actions(task)
    env.reset(task)
    for action in gold:
        eat = [a for a in env.admissible_actions if a.startswith("eat ") and a != "eat meal"]
        if eat:
            break
        env.step(action)
    result = env.step(eat[0])  # eating an ingredient spoils the recipe
    assert result.done and result.info["success"] is False
    assert result.info["feedback"].startswith(f"The task failed at step {result.info['moves']}: '{eat[0]}'")


def test_max_steps_ends_the_episode(env, monkeypatch):
    monkeypatch.setattr(env, "max_steps", 2)
    env.reset(by_game(env, "twc"))
    assert not env.step("look around").done
    result = env.step("dance")
    assert result.done and result.info["success"] is False
    assert "ran out of steps (2)" in result.info["feedback"]
    assert "1 of the 2 actions were not valid" in result.info["feedback"]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look around")


def test_normalise_action():
    assert normalise_action("  `Take  Coin.` ") == "take coin"
    assert normalise_action('"open fridge"') == "open fridge"
