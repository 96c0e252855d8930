"""OpenEnv environments (openenv-core's server-side `Environment` classes) played in this process: the guessing game
of tests/helpers/openenv_guess.py, written on OpenEnv's own base classes; its observations, reward and termination,
the Action model gating replies, replay under a seed, refusals in one line, and an R3L rollout through the CLI, with
the environments in this process and in processes of their own."""

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server.interfaces")

from r3l.config import load_config
from r3l.envs import make
from r3l.errors import UserError
from tests.conftest import run_cli
from tests.helpers.replay import check_replay

ROOT = Path(__file__).resolve().parents[1]
GAME = "tests/helpers/openenv_guess.py:GuessEnvironment"
NUMBERS = ",".join(str(n) for n in range(1, 21))
SMALL = ["algorithm=r3l", "model=tiny-random", "generator=scripted", "sampling.group_size=4", "--no-show"]


def test_the_shorthand_names_the_class():
    env = load_config(None, [f"env=openenv:{GAME}"]).env
    assert env.name == "openenv" and env.args["id"] == GAME


def test_the_game_plays_with_its_reward_termination_and_action_model():
    env = make("openenv", id=GAME, max_steps=30)
    task = env.tasks("train")[0]
    assert env.reset(task) == "I am thinking of a number from 1 to 20. Guess it."
    refused = env.step("twelve")  # the Action model's pattern refuses it: it never reaches the game
    assert not refused.done and refused.info["admissible"] is False and refused.reward == 0.0
    low, high, results = 1, 20, []
    while True:  # bisect on the game's hints
        guess = (low + high) // 2
        result = env.step(str(guess))
        results.append(result)
        if result.done:
            break
        low, high = (guess + 1, high) if "higher" in result.observation else (low, guess - 1)
    assert result.reward == 1.0 and result.info["success"] is True
    assert result.info["feedback"].startswith("Task completed in")
    assert all(r.reward == 0.0 and not r.done for r in results[:-1])
    check_replay(env, task, ["10", "5"], "7")
    assert env.deterministic and not env.light


def test_max_steps_ends_an_unfinished_game_as_a_failure():
    env = make("openenv", id=GAME, max_steps=2, make_args={"high": 1000})
    env.reset(env.tasks("test")[0])
    env.step("1")
    last = env.step("2")
    assert last.done and last.info["success"] is False and "ran out of steps (2)" in last.info["feedback"]


@pytest.mark.parametrize(
    "game_id, message",
    [
        ("tests/helpers/openenv_guess.py:GuessAction", "is not an OpenEnv Environment subclass"),
        ("tests/helpers/openenv_guess.py:TwoFieldEnvironment", "has 2 (first, second)"),
        ("tests/helpers/openenv_guess.py:NoSuchClass", "has no function 'NoSuchClass'"),
    ],
)
def test_what_cannot_be_played_is_refused_in_one_line(game_id, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make("openenv", id=game_id)
    with pytest.raises(UserError, match="make_args"):
        make("openenv", id=GAME, make_args={"no_such_argument": 1})


@pytest.mark.parametrize("processes", [0, 2])
def test_r3l_rollout_on_the_openenv_game(tmp_path, processes):
    from tests.test_r3l import check_r3l_dump

    result = run_cli(
        "rollout",
        *SMALL,
        f"env=openenv:{ROOT / GAME}",
        f"env.args.actions=[{NUMBERS}]",
        f"agent.env_processes={processes}",
        "run.seed=1",
        "--tasks",
        "3",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    dump = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    retries, _ = check_r3l_dump(dump)
    assert metrics["termination/env_error"] == 0.0 and metrics.get("replay_mismatches", 0.0) == 0.0
    assert metrics["retry_count"] == len(retries) > 0
    assert {r["meta"]["termination"] for r in dump if r["kind"] in ("base", "retry")} <= {"done", "inadmissible"}
    assert any(r["meta"]["success"] for r in dump if r["kind"] in ("base", "retry"))
