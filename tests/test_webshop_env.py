"""The WebShop adapter against a fake three-product shop (WebShop and its data cannot be installed here),
and the real backend's setup errors."""

import importlib.util

import pytest

from r3l.envs import make
from r3l.envs.webshop import Page, WebShopEnv, admit_action, goal_splits, page_actions
from r3l.errors import UserError
from tests.helpers.fake_webshop import FakeWebShop, solution
from tests.helpers.replay import check_replay

RESULTS = Page("results", False, ("back to search", "b001", "Large"))


@pytest.fixture
def env():
    return make("webshop", backend=FakeWebShop(), test_size=4)


def task_of(env, goal, split="test"):
    return next(task for task in env.tasks(split) if task.data["goal"] == goal)


def play(env, task, actions):
    env.reset(task)
    return [env.step(action) for action in actions]


def test_splits_are_webshops_goal_ranges(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert sorted(task.data["goal"] for task in train) == [1500, 1501]
    assert len(test) == 4 and all(0 <= task.data["goal"] < 500 for task in test)
    assert len({task.id for task in test}) == 4 and test[0].id == f"webshop-{test[0].data['goal']}"
    assert [task.data["goal"] for task in make("webshop", backend=FakeWebShop(), test_size=4).tasks("test")] == [
        task.data["goal"] for task in test
    ]  # same seed, same tasks
    assert len(make("webshop", backend=FakeWebShop()).tasks("test")) == 500


def test_the_papers_split_and_sizes_larger_than_a_split_are_refused(monkeypatch):
    assert goal_splits(12087, "paper") == {"train": range(4096), "test": range(4096, 4196)}
    with pytest.raises(UserError, match="too few for the paper's split"):
        goal_splits(4195, "paper")
    monkeypatch.setattr("tests.helpers.fake_webshop.GOALS", 5000)
    env = make("webshop", backend=FakeWebShop(), split="paper", train_size=5)
    assert sorted(task.data["goal"] for task in env.tasks("test")) == list(range(4096, 4196))
    assert all(task.data["goal"] < 4096 for task in env.tasks("train")) and len(env.tasks("train")) == 5
    with pytest.raises(UserError) as error:
        make("webshop", backend=FakeWebShop(), test_size=501).tasks("test")
    assert str(error.value) == (
        "env.args.test_size=501 asks for more goals than the split has (500); lower it, or set it to null for all 500"
    )
    with pytest.raises(UserError, match="env.args.split must be one of webshop, paper"):
        make("webshop", backend=FakeWebShop(), split="r3l")


def test_goal_splits():
    assert goal_splits(12087) == {"test": range(500), "train": range(1500, 12087)}
    assert goal_splits(1501) == {"test": range(500), "train": range(1500, 1501)}
    with pytest.raises(UserError, match="only 1000 goals, too few for its train split"):
        goal_splits(1000)


def test_page_actions_and_admission():
    assert page_actions(Page("", True, ())) == ("search[<keywords>]",)
    assert page_actions(RESULTS) == ("click[back to search]", "click[b001]", "click[Large]")
    assert admit_action("click[large]", RESULTS) == "click[Large]"  # the page's own spelling goes to the store
    assert admit_action("click [ back  to search ]", RESULTS) == "click[back to search]"
    for action in ["click[b002]", "search[shirt]", "click[]", "buy b001", "b001", ""]:
        assert admit_action(action, RESULTS) is None, action
    assert admit_action("search[ red  shirt ]", Page("", True, ())) == "search[red shirt]"
    assert admit_action("search[ ]", Page("", True, ())) is None


def test_buying_the_right_item_pays_one(env):
    task = task_of(env, env.tasks("test")[0].data["goal"])
    first = env.reset(task)
    assert "Instruction: [SEP] i need a" in first and first.endswith("Valid actions: search[<keywords>]")
    results = [env.step(action) for action in solution(task.data["goal"])]
    assert all(result.info["admissible"] for result in results)
    assert [result.done for result in results] == [False] * (len(results) - 1) + [True]
    assert [result.reward for result in results] == [0.0] * (len(results) - 1) + [1.0]
    assert results[-1].info["success"] is True
    assert results[-1].info["feedback"] == f"Task completed in {len(results)} steps (score 1.00)."


def test_buying_the_wrong_size_ends_with_part_credit():
    env = make("webshop", backend=FakeWebShop())
    task = task_of(env, 0)  # product b001 in size small
    results = play(env, task, ["search[red cotton t-shirt]", "click[b001]", "click[Large]", "click[buy now]"])
    assert results[-1].done and results[-1].info["success"] is False
    assert sum(result.reward for result in results) == 0.5
    assert results[-1].info["feedback"] == (
        "The task failed at step 4: 'click[buy now]' made it impossible to finish "
        "(score 0.50; the item bought matches the instruction only in part)."
    )


def test_actions_a_page_does_not_offer_cost_a_turn_and_never_reach_the_store(env):
    task = env.tasks("test")[0]
    env.reset(task)
    for moves, action in enumerate(["click[buy now]", "search[]", "look around", "<action>search[x]</action>"], 1):
        result = env.step(action)
        assert (result.info["admissible"], result.reward, result.done) == (False, 0.0, False)
        assert result.info["moves"] == moves
        assert result.info["admissible_actions"] == ["search[<keywords>]"]
        assert "for example: search[<keywords>]" in result.observation
    assert env.backend.played == []
    assert env.step("Search[Red Scarf].").info["admissible"] is True
    assert env.backend.played == ["search[red scarf]"]
    assert env.step("search[again]").info["admissible"] is False  # no search box on the results page


def test_max_steps_ends_the_episode():
    env = make("webshop", backend=FakeWebShop(), max_steps=2, test_size=1)
    results = play(env, env.tasks("test")[0], ["search[wool]", "click[back to search]"])
    assert [result.done for result in results] == [False, True] and results[-1].info["success"] is False
    assert results[-1].info["feedback"] == (
        "The episode ran out of steps (2) at score 0.00 before the task was completed."
    )


def test_replay_rebuilds_the_state(env):
    task = env.tasks("test")[1]
    actions = solution(task.data["goal"])
    check_replay(env, task, actions[:2] + ["click[nothing]"], actions[2])


def test_settings_are_checked_and_close_reaches_the_backend():
    for settings, problem in [
        ({"observation_mode": "html"}, "observation_mode must be one of text, text_rich"),
        ({"num_products": 0}, "num_products must be a whole number >= 1"),
        ({"test_size": 1.5}, "test_size must be a whole number >= 0"),
        ({"max_steps": -1}, "max_steps must be a whole number >= 1"),
    ]:
        with pytest.raises(UserError, match=problem):
            make("webshop", backend=FakeWebShop(), **settings)
    env = make("webshop", backend=FakeWebShop())
    env.close()
    assert env.backend.closed == 1 and isinstance(env, WebShopEnv)


@pytest.mark.skipif(importlib.util.find_spec("web_agent_site") is not None, reason="WebShop is installed")
def test_without_webshop_the_real_backend_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_PATH", raising=False)
    with pytest.raises(UserError, match="clone github.com/princeton-nlp/WebShop, run ./setup.sh -d all"):
        make("webshop")
    with pytest.raises(UserError, match=f"no web_agent_site folder in {tmp_path}"):
        make("webshop", webshop_path=str(tmp_path))
    monkeypatch.setenv("WEBSHOP_PATH", str(tmp_path))
    with pytest.raises(UserError, match="WEBSHOP_PATH"):
        make("webshop")
