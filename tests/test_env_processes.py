"""`agent.env_processes`: environments in spawned processes play the same episodes as in the training process,
and a process that dies, hangs or raises ends only its own episode, as `env_error`, on the real TextWorldExpress."""

import time
from functools import partial

import pytest

from r3l.agent.env_process import EnvironmentProcessDied, ProcessEnv
from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart
from r3l.envs import make
from r3l.errors import UserError
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator
from tests.conftest import run_cli
from tests.helpers.process_faults import FaultyCoin, coin

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=48, stop=("</action>",), seed=0)


@pytest.fixture(scope="module")
def tasks():
    env = coin()
    tasks = list(env.tasks("train")[:4])
    env.close()
    return tasks


def play(tiny, make_env, starts, **limits):
    """Play `starts`, three episodes in flight (`env_workers` environments here, or `env_processes` apart)."""
    model, tokenizer = tiny
    runner = EpisodeRunner(
        make_env, ScriptedGenerator(model, tokenizer), tokenizer, limits=AgentLimits(**{"env_workers": 3, **limits})
    )
    try:
        return runner.run(starts, PARAMS)
    finally:
        runner.close()


def outline(episodes):
    return [
        (
            e.task.id,
            e.actions,
            e.termination,
            e.reward,
            e.success,
            e.feedback,
            e.conversation.tokens,
            e.conversation.loss_mask,
            e.conversation.logprobs,
        )
        for e in episodes
    ]


def test_processes_play_the_same_episodes_and_retries_as_the_training_process(tiny, tasks):
    starts = [EpisodeStart(task) for task in tasks for _ in range(2)]
    here = play(tiny, coin, starts)
    apart = play(tiny, coin, starts, env_processes=3)
    assert outline(apart) == outline(here)
    assert {e.termination for e in here} >= {"done"} and max(e.num_steps for e in here) >= 2
    # retries from a pivot replay the base episode's actions inside the process
    retries = [
        EpisodeStart(e.task, base=e, pivot=1, guidance="Pick up the coin sooner.") for e in here if e.num_steps >= 2
    ]
    assert retries
    assert outline(play(tiny, coin, retries, env_processes=3)) == outline(play(tiny, coin, retries))
    assert all(e.termination != "replay_mismatch" for e in play(tiny, coin, retries, env_processes=3))


@pytest.mark.parametrize(
    "fault, expected",
    [
        ("die", "the environment process exited (exit code 3)"),
        ("raise", "ValueError: the board caught fire"),
    ],
)
def test_a_process_that_dies_or_raises_ends_only_its_episode(tiny, tasks, tmp_path, capsys, fault, expected):
    factory = partial(FaultyCoin, str(tmp_path / "fault"), fault, 2)
    episodes = play(tiny, factory, [EpisodeStart(task) for task in tasks], env_processes=2)
    broken = [e for e in episodes if e.termination == "env_error"]
    assert len(episodes) == 4 and len(broken) == 1
    assert broken[0].feedback == f"The environment failed at step 2: {expected}"
    assert all(e.termination == "done" for e in episodes if e is not broken[0])
    assert f"environment error on task {broken[0].task.id}" in capsys.readouterr().err


def test_a_hung_process_is_killed_after_env_timeout(tiny, tasks, tmp_path):
    factory = partial(FaultyCoin, str(tmp_path / "fault"), "hang", 1)
    started = time.monotonic()
    episodes = play(tiny, factory, [EpisodeStart(task) for task in tasks[:2]], env_processes=2, env_timeout=10.0)
    assert time.monotonic() - started < 60  # the hang is 120 s
    broken = [e for e in episodes if e.termination == "env_error"]
    assert len(broken) == 1 and "env_timeout=10 s" in broken[0].feedback
    assert [e.termination for e in episodes if e is not broken[0]] == ["done"]


def test_the_proxy_relays_attributes_calls_errors_and_death():
    env = ProcessEnv(partial(make, "arithmetic", max_terms=2))
    try:
        assert (env.name, env.action_format, env.light, env.retry_from_pivot) == (
            "arithmetic",
            "whole_reply",
            True,
            False,
        )
        task = env.tasks("test")[0]
        assert env.reset(task) == task.prompt
        result = env.step("<answer>0</answer>")
        assert result.done and "success" in result.info
        env.abort()  # killed: the next call says so in one line, never hangs
        with pytest.raises(EnvironmentProcessDied, match=r"exited \(exit code -9\)"):
            env.reset(task)
    finally:
        env.close()
    with pytest.raises(UserError, match="no_such_setting"):  # a bad setting is the user's error, not the episode's
        _ = ProcessEnv(partial(make, "arithmetic", no_such_setting=1)).name


def test_config_and_cli(tmp_path):
    from r3l.config import load_config

    assert load_config(None, ["agent.env_processes=2"]).agent.env_processes == 2
    with pytest.raises(UserError, match="env_processes"):
        load_config(None, ["agent.env_processes=-1"])
    result = run_cli(
        "eval",
        "model=tiny-random",
        "env=textworld_express",
        "env.args.games=[coin]",
        "env.args.max_steps=4",
        "eval.size=3",
        "eval.max_new_tokens=16",
        "agent.env_processes=2",
        f"run.dir={tmp_path}",
        "logging.progress=false",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "success" in result.stdout.lower()
