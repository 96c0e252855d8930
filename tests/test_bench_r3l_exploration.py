"""The bench's R3L exploration-cost section: pivot and scratch arms on the same tasks, cost arithmetic."""

import json

from r3l.bench.r3l_exploration import cost_per_success, exploration_config, table
from r3l.config import load_config
from tests.conftest import run_cli


def test_cost_per_success_and_arms_config():
    assert cost_per_success(900, 3) == 300
    assert cost_per_success(900, 0) is None
    config = exploration_config(load_config(None, ["model=tiny-random"]), "scratch")
    assert config.env.name == "textworld_express"  # the default job is single-turn: no pivot to retry from
    assert config.algorithm.strategy == "r3l" and config.algorithm.strategy_args["retry_from"] == "scratch"
    assert config.model.name == "tiny-random"
    kept = exploration_config(load_config(None, ["env=scienceworld"]), "pivot")
    assert kept.env.name == "scienceworld"


def test_table_says_when_no_retry_succeeded():
    arm = {
        "retries": 4,
        "retry_successes": 0,
        "retry_tokens": 100,
        "reflection_tokens": 50,
        "tokens_per_successful_retry": None,
        "env": "textworld_express",
    }
    markdown = table(
        {
            "arms": {"pivot": arm, "scratch": arm},
            "steps": 1,
            "tasks": 4,
            "tokens_per_success_ratio_scratch_over_pivot": None,
        }
    )
    assert "n/a (no successful retry)" in markdown and "| pivot | 4 | 0 | 150 |" in markdown


def test_section_runs_both_arms_on_the_same_base_episodes(tmp_path):
    result = run_cli(
        "bench",
        "--sections",
        "r3l_exploration",
        "model=tiny-random",
        "generator=scripted",
        "env=textworld_express",
        "env.args.max_steps=4",
        "env.args.games=[coin]",
        "--repeats",
        "1",
        "--out",
        str(tmp_path),
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    arms = json.loads((tmp_path / "bench.json").read_text())["sections"]["r3l_exploration"]["arms"]
    assert arms["pivot"]["base_tokens"] == arms["scratch"]["base_tokens"] > 0  # same seeds, same base episodes
    assert arms["pivot"]["reflection_tokens"] == arms["scratch"]["reflection_tokens"]
    assert arms["pivot"]["retries"] == arms["scratch"]["retries"] > 0
