"""Simulator faults on the real TextWorldExpress JVM: one killed (SIGKILL) or frozen (SIGSTOP) in the middle of an
episode ends that episode as `env_error`, with its task id printed; the simulator is replaced, the rest of the batch
and the training step go on, and the broken episode is never trained."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart, termination_metrics
from r3l.config import load_config
from r3l.envs import make
from r3l.envs.games.java_simulator import java_process
from r3l.envs.textworld_express import TextWorldExpressEnv
from r3l.rollout.generator import SamplingParams
from r3l.testing.scripted import ScriptedGenerator
from r3l.trainer import Trainer

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=48, stop=("</action>",), seed=0)


class SimulatorFault:
    """Sends `signum` to the JVM of whichever environment makes the `at`-th simulator step of the test."""

    def __init__(self, monkeypatch, signum: int, at: int):
        self.signum, self.at, self.calls, self.victims = signum, at, 0, []
        original = TextWorldExpressEnv._play

        def play(env, command):
            self.calls += 1
            if self.calls == self.at:
                process = java_process(env._sim)
                self.victims.append(process)
                os.kill(process.pid, signum)
            return original(env, command)

        monkeypatch.setattr(TextWorldExpressEnv, "_play", play)


def make_coin():
    return make("textworld_express", games=["coin"], max_steps=6)


def run_batch(tiny, starts, **limits):
    """Play `starts` two at a time; returns the episodes and how many simulators were made."""
    model, tokenizer = tiny
    made = []

    def counted():
        made.append(make_coin())
        return made[-1]

    runner = EpisodeRunner(
        counted, ScriptedGenerator(model, tokenizer), tokenizer, limits=AgentLimits(env_workers=2, **limits)
    )
    try:
        return runner.run(starts, PARAMS), len(made)
    finally:
        runner.close()


@pytest.fixture(scope="module")
def tasks():
    env = make_coin()
    tasks = list(env.tasks("train")[:4])
    env.close()
    return tasks


def test_a_simulator_killed_mid_episode_ends_that_episode_only(tiny, tasks, monkeypatch, capsys):
    fault = SimulatorFault(monkeypatch, signal.SIGKILL, at=3)
    episodes, made = run_batch(tiny, [EpisodeStart(task) for task in tasks])
    broken = [e for e in episodes if e.termination == "env_error"]
    assert len(episodes) == 4 and len(broken) == 1
    assert "environment failed at step" in broken[0].feedback
    assert all(e.termination == "done" for e in episodes if e is not broken[0])
    assert fault.victims[0].wait(timeout=10) == -signal.SIGKILL
    assert termination_metrics(episodes)["termination/env_error"] == 0.25
    printed = capsys.readouterr().err
    assert f"environment error on task {broken[0].task.id}" in printed and "replaced" in printed
    # the two episodes play in step: the first one's second step (call 3) meets the dead JVM; the third episode
    # then needs a simulator, and the discarded one's place lets a new one be made (2 at a time: 3 in all)
    assert made == 3


def test_a_frozen_simulator_is_killed_after_env_timeout(tiny, tasks, monkeypatch):
    fault = SimulatorFault(monkeypatch, signal.SIGSTOP, at=2)
    started = time.monotonic()
    episodes, _ = run_batch(tiny, [EpisodeStart(task) for task in tasks[:2]], env_timeout=3.0)
    assert time.monotonic() - started < 60
    broken = [e for e in episodes if e.termination == "env_error"]
    assert len(broken) == 1 and "env_timeout=3 s" in broken[0].feedback
    assert fault.victims[0].wait(timeout=10) == -signal.SIGKILL  # the frozen JVM was killed, not left behind
    assert [e.termination for e in episodes if e is not broken[0]] == ["done"]


@pytest.mark.parametrize("algorithm", ["grpo", "r3l"])
def test_the_training_step_goes_on_without_the_broken_episode(tiny, tmp_path, monkeypatch, algorithm):
    SimulatorFault(monkeypatch, signal.SIGKILL, at=4)
    config = load_config(
        None,
        [
            f"algorithm={algorithm}",
            "env=textworld_express",
            "env.args.games=[coin]",
            "env.args.max_steps=4",
            "model=tiny-random",
            "generator=scripted",
            "sampling.group_size=4",
            "sampling.max_new_tokens=32",
            "eval.size=0",
            "train.steps=2",
            "train.tasks_per_step=2",
            "logging.tensorboard=false",
            "logging.progress=false",
            "logging.dump_experiences=true",
            f"run.dir={tmp_path}",
        ],
    )
    summary = Trainer(config).run()
    assert summary["step"] == 2
    run_dir = Path(summary["run_dir"])
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    errors = [
        m.get("termination/env_error", 0.0) + m.get("retry_env_errors", 0.0) for m in metrics if "step_seconds" in m
    ]
    assert len(errors) == 2 and errors[0] > 0 and errors[1] == 0
    for path in sorted((run_dir / "experiences").glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert records and all(r["meta"].get("termination") != "env_error" for r in records)


class Blocking:
    """An environment call that blocks until `abort` releases it, as a frozen simulator's socket read would."""

    def __init__(self):
        import threading

        self.released = threading.Event()
        self.aborts = 0

    def abort(self):
        self.aborts += 1
        self.released.set()

    def step(self, action):
        self.released.wait(30)
        raise ConnectionResetError("the simulator went away")


def test_guarded_call_turns_errors_and_hangs_into_one_line_failures():
    from r3l.agent.env_guard import EnvFailure, guarded_call
    from r3l.errors import UserError

    env = Blocking()
    assert guarded_call(env, 5.0, lambda action: f"played {action}", "look") == "played look"
    with pytest.raises(EnvFailure, match=r"^ConnectionResetError: broken\s*pipe$"):
        guarded_call(env, None, lambda: (_ for _ in ()).throw(ConnectionResetError("broken\n pipe")))
    started = time.monotonic()
    with pytest.raises(EnvFailure, match="no answer within agent.env_timeout=0.5 s"):
        guarded_call(env, 0.5, env.step, "look")
    assert env.aborts == 1 and time.monotonic() - started < 5
    with pytest.raises(UserError):  # a configuration error is not the simulator's fault: it reaches the user
        guarded_call(env, None, lambda: (_ for _ in ()).throw(UserError("bad game parameters")))
