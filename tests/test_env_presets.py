"""An environment brings the settings it needs (r3l/presets/envs/): chosen on the command line over a config made for
another one, its reply length, held-out size and (with the embedded model) structured replies apply, a setting given
after it wins; `env=NAME` naming the config's own environment changes nothing; a reply budget that cannot hold the
environment's shortest valid reply is refused in one line."""

import json

import pytest

from r3l.build import check_reply_budget
from r3l.config import env_preset_note, load_config
from r3l.errors import UserError
from r3l.models import load_policy
from tests.conftest import run_cli


def test_env_naming_the_default_jobs_own_environment_is_the_default_job():
    assert load_config(None, ["env=arithmetic"]) == load_config(None, [])
    assert env_preset_note(None, ["env=arithmetic"]) is None


def test_a_game_chosen_over_the_default_job_brings_its_reply_length_split_and_structured_replies():
    config = load_config(None, ["env=textworld_express"])
    assert config.sampling.max_new_tokens == 96  # the default job's 24 cut every action off
    assert config.eval.size is None  # the whole held-out split: no warning about asking for 100 of 20
    assert config.structured.replies  # the embedded model writes no <action> tags unless decoded to
    note = env_preset_note(None, ["env=textworld_express"])
    assert note is not None and "sampling.max_new_tokens=96" in note and "structured.replies=true" in note


def test_the_structured_replies_come_with_the_embedded_model_only():
    config = load_config(None, ["env=textworld_express", "model=qwen2.5-coder-0.5b-instruct"])
    assert config.sampling.max_new_tokens == 96 and not config.structured.replies


def test_a_setting_given_after_the_environment_wins_and_a_game_id_finds_its_preset():
    config = load_config(None, ["env=gym:FrozenLake-v1", "sampling.max_new_tokens=50", "eval.size=5"])
    assert (config.env.name, config.env.args["id"]) == ("gym", "FrozenLake-v1")
    assert config.sampling.max_new_tokens == 50 and config.eval.size == 5


def test_a_file_for_another_environment_gives_way_to_one_chosen_on_the_command_line(tmp_path):
    arithmetic = tmp_path / "mine.yaml"
    arithmetic.write_text("env: {name: arithmetic}\nsampling: {max_new_tokens: 24, group_size: 4}\n")
    config = load_config(str(arithmetic), ["env=textworld_express"])
    assert config.sampling.max_new_tokens == 96 and config.sampling.group_size == 4  # the rest of the file kept


def test_a_file_naming_the_game_keeps_its_own_settings_over_the_games(tmp_path):
    game = tmp_path / "game.yaml"
    game.write_text("env: {name: textworld_express}\nsampling: {max_new_tokens: 64}\neval: {size: 7}\n")
    config = load_config(str(game), [])
    assert config.sampling.max_new_tokens == 64 and config.eval.size == 7
    assert config.structured.replies  # what the file does not set comes from the environment
    assert env_preset_note(str(game), []) is None


def test_a_reply_budget_shorter_than_the_shortest_valid_reply_is_refused():
    _, tokenizer = load_policy("smollm2-135m-instruct")
    with pytest.raises(UserError, match=r"sampling.max_new_tokens=4 cannot hold textworld_express's shortest"):
        check_reply_budget(load_config(None, ["env=textworld_express", "sampling.max_new_tokens=4"]), tokenizer)
    check_reply_budget(load_config(None, ["env=textworld_express", "sampling.max_new_tokens=7"]), tokenizer)
    check_reply_budget(load_config(None, ["sampling.max_new_tokens=1"]), tokenizer)  # any arithmetic reply plays


def test_a_game_chosen_on_the_command_line_trains_on_well_formed_replies(tmp_path):
    """The issue's case: the default job's settings on TextWorldExpress made every episode a format error."""
    result = run_cli(
        "train",
        "env=textworld_express",
        "env.args={games: [coin], max_steps: 3, train_size: 4, test_size: 2}",
        "train.steps=1",
        "train.tasks_per_step=1",
        "sampling.group_size=2",
        "eval.size=0",
        "logging.progress=false",
        f"run.dir={tmp_path}",
        "run.name=game",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "env textworld_express brings its own settings" in result.stderr
    metrics = json.loads((tmp_path / "game" / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["termination/format_error"] < 1.0
