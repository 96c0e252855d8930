"""Bring-your-own games on real environments: Gymnasium's FrozenLake (toy text through its ansi render), TextArena's
GuessTheNumber, Mastermind and 2048 (its own registry), and Mastermind under Gymnasium Text spaces
(tests/helpers/gym_text.py): reset, step, termination and the game's reward; exact replay, also with games
interleaved; R3L and GRPO through the CLI."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("textarena")

import gymnasium

import tests.helpers.gym_text  # noqa: F401  (registers R3lTest/Mastermind-v0)
from r3l.config import load_config
from r3l.envs import make
from r3l.envs.games.gymnasium_game import ansi_text
from r3l.errors import UserError
from tests.conftest import run_cli
from tests.helpers.replay import check_replay

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = [str(n) for n in range(1, 21)]
# FrozenLake 4x4:  SFFF / FHFH / FFFH / HFFG
TO_GOAL = ["down", "down", "right", "right", "down", "right"]


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def play(env, task, actions):
    """(first observation, [StepResult ...]) of `actions` from a reset, stopping when the episode ends."""
    first, results = env.reset(task), []
    for action in actions:
        results.append(env.step(action))
        if results[-1].done:
            break
    return first, results


def secret(env):
    """The hidden state of the TextArena game in play (tests only: to play a sure win or a sure loss)."""
    return env.game.env.state.game_state


# --- config --------------------------------------------------------------------------------------------------------


def test_the_shorthand_names_the_env_and_the_game():
    config = load_config(None, ["env=gym:FrozenLake-v1", "env.args.max_steps=5"])
    assert (config.env.name, config.env.args) == ("gym", {"id": "FrozenLake-v1", "max_steps": 5})
    assert load_config(None, ["env=textarena:Mastermind-v0"]).env.args == {"id": "Mastermind-v0"}
    with pytest.raises(UserError, match="give the game once"):
        load_config(None, ["env=gym:FrozenLake-v1", "env.args.id=Taxi-v4"])


# --- Gymnasium: FrozenLake through its ansi render --------------------------------------------------------------


def test_frozen_lake_plays_with_gymnasiums_reward_and_termination():
    env = make("gym", id="FrozenLake-v1", make_args={"is_slippery": False}, fixed_map=True, distinct_games=False)
    task = env.tasks("train")[0]
    first, results = play(env, task, TO_GOAL)
    assert first.startswith("Frozen lake:") and "[S]FFF" in first and first.endswith("left, down, right, up")
    assert [r.reward for r in results] == [0, 0, 0, 0, 0, 1.0] and [r.done for r in results][-2:] == [False, True]
    assert results[-1].info["success"] and results[-1].info["feedback"] == "Task completed in 6 steps (reward 1.00)."
    assert "HFF[G]" in results[-1].observation
    reference = gymnasium.make("FrozenLake-v1", is_slippery=False)  # the same rewards as the game itself
    reference.reset(seed=task.data["seed"])
    assert [reference.step(["left", "down", "right", "up"].index(a))[1] for a in TO_GOAL] == [r.reward for r in results]

    _, results = play(env, task, ["RIGHT.", "jump", "down"])  # a hole at row 2, column 2; 'jump' is refused
    assert [r.info["admissible"] for r in results] == [True, False, True]
    assert "'jump' is not a valid action here" in results[1].observation and results[1].reward == 0
    assert results[-1].done and not results[-1].info["success"] and "[H]" in results[-1].observation
    assert results[-1].info["feedback"] == (
        "The game ended at step 3 without a win (reward 0.00; 1 of the 3 moves were not accepted)."
    )
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("down")


def test_max_steps_ends_an_episode_and_the_splits_do_not_share_seeds():
    env = make("gym", id="FrozenLake-v1", make_args={"is_slippery": False}, max_steps=3, train_size=50, test_size=50)
    _, results = play(env, env.tasks("train")[1], ["left"] * 5)
    assert len(results) == 3 and results[-1].done and not results[-1].info["success"]
    assert results[-1].info["feedback"] == "The episode ran out of steps (3) before a win (reward 0.00)."
    train, test = ({t.data["seed"] for t in env.tasks(split)} for split in ("train", "test"))
    assert len(train) == len(test) == 50 and not train & test
    assert [t.id for t in env.tasks("train")] == [
        t.id for t in make("gym", id="FrozenLake-v1", train_size=50, test_size=50).tasks("train")
    ]


def test_slippery_frozen_lake_replays_exactly():
    """The slippery lake draws from the game's generator on every move: replaying under the task's seed must give
    the same slides."""
    env, other = make("gym", id="FrozenLake-v1"), make("gym", id="FrozenLake-v1")
    moves = random.Random(0)
    for task in env.tasks("train")[:8]:
        actions = [moves.choice(["left", "down", "right", "up"]) for _ in range(12)]
        _, results = play(env, task, actions)
        for pivot in range(len(results)):
            observation = other.replay(task, actions[:pivot])
            assert observation == (env.reset(task) if pivot == 0 else results[pivot - 1].observation)
        if len(results) > 1:
            check_replay(env, task, actions[: len(results) - 1], actions[len(results) - 1])


def test_ansi_colours_become_brackets():
    assert ansi_text("\x1b[41mS\x1b[0mFF\n|\x1b[34;1mB\x1b[0m: |\x1b[2J") == "[S]FF\n|[B]: |"


def test_games_that_do_not_talk_text_are_refused_in_one_line():
    for settings, words in (
        (dict(id="CartPole-v1"), "not text"),
        (dict(id="FrozenLak-v1"), "did you mean FrozenLake-v1"),
        (dict(id="FrozenLake-v1", actions=["a", "b"]), "has 4"),
        (dict(id="TicTacToe-v0", source="textarena"), "single-player"),
        (dict(id="GuessTheNumbr-v0", source="textarena"), "did you mean GuessTheNumber-v0"),
        (dict(id="FrozenLake-v1", source="gymnasium", max_steps=0), "max_steps"),
    ):
        with pytest.raises(UserError, match=words) as error:
            make("gym", **settings)
        assert "\n" not in str(error.value)


# --- TextArena: GuessTheNumber and Mastermind ------------------------------------------------------------------


def test_guess_the_number_pays_textarenas_reward_on_the_last_move():
    env = make("textarena", id="GuessTheNumber-v0", test_size=5)
    task = env.tasks("train")[0]
    first = env.reset(task)
    assert "Guess The Number" in first and "Valid actions" not in first
    low, high, results = 1, 20, []
    while not results or not results[-1].done:  # binary search on the game's hints ("higher" / "lower")
        guess = (low + high) // 2
        results.append(env.step(f"[{guess}]"))
        if "higher" in results[-1].observation:
            low = guess + 1
        elif "lower" in results[-1].observation:
            high = guess - 1
    assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0] and len(results) <= 5
    assert results[-1].info["success"] and results[-1].info["feedback"].startswith(f"Task completed in {len(results)}")

    env.reset(task)  # wrong guesses: the game ends on its own turn limit, paying how close the last guess was
    target = secret(env)["game_number"]
    wrong = [n for n in range(1, 21) if n != target][:11]  # "within 10 turns", but TextArena 0.7.4 takes 11 guesses
    results = [env.step(str(n)) for n in wrong]  # a bare number: TextArena's action wrapper adds the brackets
    assert results[-1].done and not any(r.done for r in results[:-1]) and not results[-1].info["success"]
    assert results[-1].reward == pytest.approx(1 - abs(wrong[-1] - target) / 19)
    assert results[-1].info["feedback"].startswith("The game ended at step 11 without a win")
    assert "Target" not in results[-1].info["feedback"]  # the game's own closing sentence names the target


def test_the_games_closing_sentence_is_there_on_request_and_invalid_moves_are_not_admissible():
    env = make("textarena", id="GuessTheNumber-v0", game_reason=True, test_size=5)
    env.reset(env.tasks("test")[0])
    target = secret(env)["game_number"]
    guess = 1 if target != 1 else 2
    first, again, twice = env.step(f"[{guess}]"), env.step(f"[{guess}]"), env.step(f"[{guess}]")
    assert first.info["admissible"] and not again.info["admissible"] and not twice.info["admissible"]
    assert "already guessed" in again.observation and not again.done  # TextArena forgives one invalid move
    assert twice.done and "Invalid Move" in twice.info["feedback"] and "2 of the 3 moves" in twice.info["feedback"]


def test_a_listed_action_set_gates_what_reaches_the_game():
    env = make("textarena", id="GuessTheNumber-v0", actions=NUMBERS, test_size=5)
    task = env.tasks("train")[2]
    assert env.reset(task).endswith("Valid actions: " + ", ".join(NUMBERS))
    refused = env.step("25")
    assert not refused.info["admissible"] and "'25' is not a valid action here" in refused.observation
    assert env.step("7").info["admissible"] and env.admissible_actions == NUMBERS


def test_mastermind_feedback_after_each_wrong_guess_and_a_win():
    env = make("textarena", id="Mastermind-v0")
    task = env.tasks("train")[3]
    assert "Mastermind" in env.reset(task)
    code = secret(env)["secret_code"]
    wrong = " ".join(map(str, code[1:] + code[:1]))
    step = env.step(wrong)  # brackets added by TextArena's action wrapper
    assert "black peg(s)" in step.observation and step.reward == 0 and not step.done
    win = env.step(f"[{' '.join(map(str, code))}]")
    assert win.done and win.reward == 1.0 and win.info["success"]


MOVES = {
    "GuessTheNumber-v0": lambda draw: f"[{draw.randint(1, 20)}]",
    "Mastermind-v0": lambda draw: f"[{' '.join(map(str, draw.sample(range(1, 7), 4)))}]",
    "R3lTest/Mastermind-v0": lambda draw: f"[{' '.join(map(str, draw.sample(range(1, 7), 4)))}]",
    "2048-v0-ultra-easy": lambda draw: draw.choice(["[up]", "[down]", "[left]", "[right]"]),
}


@pytest.mark.parametrize(
    "settings",
    [
        dict(id="GuessTheNumber-v0", source="textarena", test_size=5),
        dict(id="Mastermind-v0", source="textarena"),
        dict(id="2048-v0-ultra-easy", source="textarena"),
        dict(id="R3lTest/Mastermind-v0", source="gymnasium"),
    ],
)
def test_textarena_games_replay_exactly_even_interleaved(settings):
    """TextArena seeds Python's global `random` and draws from it (2048 places a tile after every move): each game
    keeps its own stream, so games played in turns (as the episode runner plays them) and replays give what each
    game gives alone, and r3l's own stream is untouched."""
    guesses = MOVES[settings["id"]]
    draw = random.Random(1)
    env = make("gym", **settings)
    tasks = env.tasks("train")[:4]
    plans = {task.id: [guesses(draw) for _ in range(8)] for task in tasks}
    alone = {task.id: play(env, task, plans[task.id]) for task in tasks}
    envs = {task.id: make("gym", **settings) for task in tasks}
    random.seed(99)
    ours = random.getstate()
    together = {task.id: (envs[task.id].reset(task), []) for task in tasks}
    for turn in range(8):
        for task in tasks:
            results = together[task.id][1]
            if not results or not results[-1].done:
                results.append(envs[task.id].step(plans[task.id][turn]))
    assert random.getstate() == ours  # the games never moved r3l's generator
    for task in tasks:
        first, results = alone[task.id]
        assert together[task.id][0] == first
        assert [(r.observation, r.reward, r.done, r.info) for r in together[task.id][1]] == [
            (r.observation, r.reward, r.done, r.info) for r in results
        ]
        for pivot in range(1, len(results)):
            assert make("gym", **settings).replay(task, plans[task.id][:pivot]) == results[pivot - 1].observation


def test_a_game_whose_reset_takes_no_seed_is_not_replayed():
    env = make("gym", id="R3lTest/MastermindUnseeded-v0")
    assert env.deterministic is False and env.not_replayable == "its reset takes no seed"
    with pytest.raises(RuntimeError, match="retry_from=scratch"):
        env.replay(env.tasks("train")[0], [])


# --- through the CLI ------------------------------------------------------------------------------------------------

SMALL = ["model=tiny-random", "generator=scripted", "algorithm=r3l", "sampling.group_size=4", "--no-show"]


def test_r3l_rollout_on_guess_the_number(tmp_path):
    from tests.test_r3l import check_r3l_dump

    result = run_cli(
        "rollout",
        *SMALL,
        "env=textarena:GuessTheNumber-v0",
        f"env.args.actions=[{','.join(NUMBERS)}]",
        "env.args.test_size=5",
        "run.seed=1",
        "--tasks",
        "3",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    dump = records(tmp_path / "out.jsonl")
    retries, _ = check_r3l_dump(dump)
    assert metrics["retry_count"] == len(retries) and metrics["termination/replay_mismatch"] == 0.0
    assert {r["meta"]["termination"] for r in dump if r["kind"] in ("base", "retry")} <= {"done", "inadmissible"}
    assert any(r["meta"]["success"] for r in dump if r["kind"] in ("base", "retry"))


def test_r3l_rollout_on_frozen_lake(tmp_path):
    from tests.test_r3l import check_r3l_dump

    result = run_cli(
        "rollout",
        *SMALL,
        "env=gym:FrozenLake-v1",
        "env.args.max_steps=8",
        "run.seed=3",
        "--tasks",
        "2",
        "--dump",
        "out.jsonl",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout[result.stdout.index("{\n") :])
    check_r3l_dump(records(tmp_path / "out.jsonl"))
    assert metrics["termination/replay_mismatch"] == 0.0


def test_r3l_refuses_a_game_it_cannot_replay_in_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "r3l.cli",
            "rollout",
            *SMALL,
            "env=gym:tests.helpers.gym_text:R3lTest/MastermindUnseeded-v0",
            "--tasks",
            "1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "not deterministic" in last and "retry_from=scratch" in last


def test_grpo_trains_two_steps_on_guess_the_number(tmp_path):
    """The scripted generator plays listed guesses, so episodes reach the game's end and its (partial) rewards give
    GRPO a gradient; the embedded model trains the same way (2 steps took 2:20 and 5.2 GB here, too much for CI's
    share of this test)."""
    result = run_cli(
        "train",
        "model=tiny-random",
        "generator=scripted",
        "algorithm=grpo",
        "env=textarena:GuessTheNumber-v0",
        f"env.args.actions=[{','.join(NUMBERS)}]",
        "env.args.test_size=5",
        "sampling.group_size=4",
        "train.tasks_per_step=2",
        "train.steps=2",
        "sampling.max_new_tokens=32",
        "eval.size=2",
        "logging.tensorboard=false",
        "logging.progress=false",
        f"run.dir={tmp_path}",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    run_dir = next(tmp_path.glob("textarena-grpo-*"))
    steps = [m for m in records(run_dir / "metrics.jsonl") if "loss" in m]
    assert len(steps) == 2 and any(m["loss"] != 0 for m in steps) and all(m["trained_tokens"] > 0 for m in steps)
    assert any(m["reward"] > 0 for m in steps) and (run_dir / "checkpoints" / "step_000002").is_dir()
    saved = load_config(str(run_dir / "config.yaml"))
    assert (saved.env.name, saved.env.args["id"]) == ("textarena", "GuessTheNumber-v0")
    assert json.loads((run_dir / "eval_after.json").read_text())["total"] == 2
