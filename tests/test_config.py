"""Config loading: presets, dotted overrides, and one-line errors with exit status 2."""

import pytest

from r3l.config import load_config
from r3l.errors import UserError
from tests.conftest import run_cli


def test_overrides_reach_typed_fields():
    config = load_config(
        None,
        [
            "model=tiny-random",
            "env=countdown",
            "train.lr=1e-4",
            "algorithm.kl_coef=0.01",
            "env.args.seed=3",
            "sampling.stop=['</answer>']",
        ],
    )
    assert config.model.name == "tiny-random"
    assert config.env.name == "countdown" and config.env.args == {"seed": 3}
    assert config.train.lr == pytest.approx(1e-4)
    assert config.algorithm.kl_coef == pytest.approx(0.01)
    assert config.algorithm.policy_loss == "ppo_clip"  # filled in from the grpo preset
    assert config.sampling.stop == ["</answer>"]


def test_default_preset_loads():
    config = load_config("default")
    assert config.model.name == "smollm2-135m-instruct"
    assert config.env.few_shot[1].role == "assistant"


def test_preset_values_can_be_overridden_in_a_section():
    config = load_config(None, ["algorithm=grpo", "algorithm.loss_args={clip_low: 0.1, clip_high: 0.3}"])
    assert config.algorithm.loss_args == {"clip_low": 0.1, "clip_high": 0.3}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.lrr=1"], "unknown config key 'train.lrr'"),
        (["train.lr=abc"], "train.lr"),
        (["train.steps=-1"], "train.steps"),
        (["algorithm=nope"], "unknown algorithm 'nope'"),
        (["justakey"], "not key=value"),
        (["sampling.temperature=hot"], "sampling.temperature"),
        # settings that need another: refused when the config loads (so `r3l config` refuses them too)
        (["distributed.sharded_checkpoints=true"], "sharded_checkpoints needs distributed.learner_ranks of 2"),
        (["distributed.max_staleness=1"], "max_staleness needs rollout workers"),
    ],
)
def test_bad_overrides_are_one_line_user_errors(overrides, message):
    with pytest.raises(UserError) as error:
        load_config(None, overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {lr: 1\n  steps: [")
    with pytest.raises(UserError, match="invalid YAML"):
        load_config(str(bad))
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="mapping"):
        load_config(str(listing))


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "train.lrr=1"], "unknown config key"),
        (["train", "nonexistent.yaml"], "does not exist"),
        (["train", "env=nope", "model=tiny-random"], "unknown environment 'nope'"),
        (
            ["train", "algorithm.advantage=nope", "model=tiny-random", "env=countdown"],
            "unknown advantage function 'nope'",
        ),
        (["eval", "model=./no/such/dir"], "model folder './no/such/dir' does not exist"),
        (["train", "--resume", "/nonexistent/run"], "not a run directory"),
        (["report", "/nonexistent/run"], "not a directory"),
        # typer's own usage errors, once a box titled "Error", now in r3l's style
        (["train", "--bogus"], "no such option: --bogus"),
        (["eval", "--attempts", "3"], "invalid value for '--attempts'"),
        (["report"], "missing argument"),
        (["nope"], "no such command 'nope'"),
    ],
)
def test_cli_errors_exit_2_with_one_line(args, message, tmp_path):
    result = run_cli(*args, timeout=300, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no half-made run
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1]
    assert len([line for line in lines if line.startswith("error")]) == 1


def test_every_example_and_algorithm_preset_validates():
    from pathlib import Path

    from r3l.config import PRESET_DIR

    for example in sorted(Path(__file__).parent.parent.glob("examples/*.yaml")):
        load_config(str(example))
    for preset in sorted((PRESET_DIR / "algorithms").glob("*.yaml")):
        config = load_config(None, [f"algorithm={preset.stem}"])
        assert config.algorithm.name == preset.stem


def test_presets_extend_and_user_args_merge_into_them():
    config = load_config(None, ["algorithm=reflect_grpo", "algorithm.strategy_args.sft_weight=0.5"])
    args = config.algorithm.strategy_args
    assert args["retry_from"] == "scratch" and args["sft_weight"] == 0.5 and args["base_fraction"] == 0.5
    assert config.algorithm.advantage == "grpo" and config.algorithm.advantage_args == {}
    changed = load_config(None, ["algorithm=r3l", "algorithm.advantage=grpo"])
    assert changed.algorithm.advantage_args == {}  # the old advantage's arguments are dropped
    assert changed.algorithm.loss_args == {"tau": 1.0}


def test_a_config_file_extends_another_and_lies_over_it(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "model: smollm2-135m-instruct\nenv: {name: countdown, args: {test_size: 7}}\ntrain: {steps: 3, lr: 2.0e-5}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "arm.yaml").write_text("extends: ../base.yaml\nalgorithm: r3\ntrain: {steps: 5}\n")
    config = load_config(str(tmp_path / "sub" / "arm.yaml"), ["env.args.test_size=9"])
    assert config.algorithm.name == "r3" and config.env.name == "countdown"
    assert config.train.steps == 5 and config.train.lr == 2.0e-5  # merged key by key
    assert config.env.args["test_size"] == 9  # overrides still come last


def test_a_child_file_that_names_another_algorithm_starts_its_algorithm_afresh(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "algorithm: {name: r3l, kl_coef: 0.0, strategy_args: {retry_from: scratch}, loss_args: {tau: 2.0}}\n"
    )
    (tmp_path / "grpo.yaml").write_text("extends: base.yaml\nalgorithm: grpo\n")
    (tmp_path / "same.yaml").write_text("extends: base.yaml\nalgorithm: {strategy_args: {sft_weight: 0.25}}\n")
    switched = load_config(str(tmp_path / "grpo.yaml")).algorithm
    grpo = load_config(None, ["algorithm=grpo"]).algorithm
    assert switched == grpo  # nothing of r3l's strategy, loss or KL setting carried into GRPO
    kept = load_config(str(tmp_path / "same.yaml")).algorithm
    assert kept.name == "r3l" and kept.kl_coef == 0.0 and kept.loss_args == {"tau": 2.0}
    assert kept.strategy_args["retry_from"] == "scratch" and kept.strategy_args["sft_weight"] == 0.25


def test_extends_loops_and_missing_parents_are_one_line_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(UserError, match="extend each other in a loop"):
        load_config(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(UserError, match="nowhere.yaml does not exist"):
        load_config(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("extends: [a.yaml]\n")
    with pytest.raises(UserError, match="must name one YAML file"):
        load_config(str(tmp_path / "d.yaml"))
