"""The ALFWorld adapter against a fake three-place game (ALFWorld and its data cannot be installed here),
and the real backend's setup errors and game listing."""

import importlib.util
import json

import pytest

from r3l.envs import make
from r3l.envs.alfworld import ALFWorldEnv, list_games, strip_banner, task_type
from r3l.errors import UserError
from tests.helpers.fake_alfworld import FakeALFWorld, solution
from tests.helpers.replay import check_replay

MUG = "train/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-1/trial_1"


@pytest.fixture
def env():
    return make("alfworld", backend=FakeALFWorld())


def task_of(env, game, split="train"):
    return next(task for task in env.tasks(split) if task.data["game"] == game)


def test_tasks_alternate_task_types_and_splits_use_alfworlds_folders(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert [task.data["task_type"] for task in train] == [
        "pick_and_place_simple",
        "pick_clean_then_place_in_recep",
        "pick_clean_then_place_in_recep",
    ]
    assert [task.data["game"] for task in test] == [
        "valid_seen/pick_clean_then_place_in_recep-Cup-None-Shelf-4/trial_1"
    ]
    assert task_of(env, MUG).id == f"alfworld-{MUG}"
    unseen = make(
        "alfworld", backend=FakeALFWorld(), test_split="valid_unseen", task_types="pick_and_place_simple", train_size=1
    )
    assert [task.data["game"] for task in unseen.tasks("test")] == [
        "valid_unseen/pick_and_place_simple-Book-None-Desk-5/trial_1"
    ]
    assert [task.data["task_type"] for task in unseen.tasks("train")] == ["pick_and_place_simple"]
    with pytest.raises(UserError, match="unknown split 'dev'"):
        env.tasks("dev")


def test_reset_shows_the_task_and_the_admissible_actions(env):
    observation = env.reset(task_of(env, MUG))
    assert observation.startswith("You are in the middle of a room.")  # TextWorld's banner is gone
    assert "Your task is to: put a clean mug in coffeemachine." in observation
    assert observation.endswith(
        "Valid actions: go to coffeemachine 1, go to countertop 1, go to sinkbasin 1, inventory, look"
    )
    assert env.admissible_actions == [
        "go to coffeemachine 1",
        "go to countertop 1",
        "go to sinkbasin 1",
        "inventory",
        "look",
    ]


def test_solving_the_game_pays_one_on_the_winning_step(env):
    task = task_of(env, MUG)
    env.reset(task)
    results = [env.step(action) for action in solution(MUG)]
    assert [result.reward for result in results] == [0, 0, 0, 0, 0, 1.0]
    assert [result.done for result in results] == [False] * 5 + [True]
    assert all(result.info["admissible"] for result in results)
    assert results[-1].info["success"] is True and results[-1].info["score"] == 1.0
    assert results[-1].info["feedback"] == "Task completed in 6 steps (score 1.00)."
    assert results[1].observation.startswith("You pick up the mug 1 from the countertop 1.\n\nValid actions: ")


def test_inadmissible_actions_cost_a_turn_and_never_reach_the_game(env):
    backend = env.backend
    env.reset(task_of(env, MUG))
    for moves, action in enumerate(["take mug 1 from countertop 1", "fly", "", "x" * 5000], start=1):
        result = env.step(action)
        assert (result.info["admissible"], result.reward, result.done) == (False, 0.0, False)
        assert result.info["moves"] == moves
        assert "look" in result.observation and result.info["admissible_actions"] == env.admissible_actions
    assert result.observation.startswith("'xxxx") and "is not a valid action here" in result.observation
    assert backend.played == []
    assert env.step("  Go To Countertop 1. ").info["admissible"] is True  # case, spacing, full stop do not matter
    assert backend.played == ["go to countertop 1"]


def test_max_steps_ends_the_episode_with_feedback():
    env = make("alfworld", backend=FakeALFWorld(), max_steps=3)
    env.reset(task_of(env, MUG))
    results = [env.step(action) for action in ["look", "dance", "look"]]
    assert [result.done for result in results] == [False, False, True]
    assert results[-1].info["success"] is False and sum(result.reward for result in results) == 0.0
    assert results[-1].info["feedback"] == (
        "The episode ran out of steps (3) at score 0.00 before the task was "
        "completed; 1 of the 3 actions were not valid."
    )
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("look")


def test_an_unclean_object_does_not_win(env):
    game = "train/pick_clean_then_place_in_recep-Plate-None-Cabinet-2/trial_1"
    env.reset(task_of(env, game))
    moves = ["go to countertop 1", "take plate 1 from countertop 1", "go to cabinet 1", "move plate 1 to cabinet 1"]
    results = [env.step(action) for action in moves]
    assert not any(result.done for result in results) and results[-1].info["score"] == 0.0


def test_replay_rebuilds_the_state(env):
    check_replay(env, task_of(env, MUG), solution(MUG)[:3] + ["fly"], solution(MUG)[3])


def test_settings_are_checked():
    for settings, problem in [
        ({"test_split": "test"}, "test_split must be one of valid_seen, valid_unseen"),
        ({"task_types": ["pick_banana"]}, "task_types must name ALFWorld task types"),
        ({"task_types": []}, "task_types must name ALFWorld task types"),
        ({"max_steps": 0}, "max_steps must be a whole number >= 1"),
        ({"train_size": -1}, "train_size must be a whole number >= 0"),
    ]:
        with pytest.raises(UserError, match=problem):
            make("alfworld", backend=FakeALFWorld(), **settings)
    env = make("alfworld", backend=FakeALFWorld())
    env.close()
    assert env.backend.closed == 1 and isinstance(env, ALFWorldEnv)


@pytest.mark.skipif(importlib.util.find_spec("alfworld") is not None, reason="ALFWorld is installed")
def test_without_alfworld_the_real_backend_says_what_to_install():
    with pytest.raises(UserError, match="pip install alfworld, then alfworld-download .*ALFWORLD_DATA"):
        make("alfworld")


def test_game_listing_reads_alfworlds_folders(tmp_path):
    base = tmp_path / "json_2.1.1" / "valid_seen"
    for name, solvable in [
        ("pick_and_place_simple-Book-None-Desk-5/trial_b", True),
        ("pick_and_place_simple-Book-None-Desk-5/trial_a", True),
        ("look_at_obj_in_light-Bowl-None-DeskLamp-1/trial_c", False),
        ("pick_clean_then_place_in_recep-AppleSliced-None-Fridge-2/trial_d", True),
    ]:
        (base / name).mkdir(parents=True)
        (base / name / "game.tw-pddl").write_text(json.dumps({"solvable": solvable}))
    (base / "pick_heat_then_place_in_recep-Egg-None-Fridge-3" / "trial_e").mkdir(parents=True)  # no game file
    assert list_games(str(tmp_path), "valid_seen") == (
        "valid_seen/pick_and_place_simple-Book-None-Desk-5/trial_a",
        "valid_seen/pick_and_place_simple-Book-None-Desk-5/trial_b",
    )
    with pytest.raises(UserError, match="no ALFWorld games under .*train; run alfworld-download"):
        list_games(str(tmp_path), "train")


def test_small_pure_helpers():
    assert task_type(MUG) == "pick_clean_then_place_in_recep" and task_type("odd") == ""
    assert strip_banner("-= Welcome to TextWorld, ALFRED! =-\n\nYou are here.") == "You are here."
