"""A built-in model's preset, an environment's preset, and the step-size check (issue 25: the default job's lr
collapsed Qwen2.5)."""

import pytest
import torch

from r3l.config import load_config, merge_trees
from r3l.learner.step_size import median_weight_rms, relative_step, step_size_warning, suggested_lr

QWEN = "qwen2.5-coder-0.5b-instruct"


def test_the_qwen_alias_gets_its_own_learning_rate_over_the_shipped_default():
    assert load_config(None, []).train.lr == 1e-5
    assert load_config(None, [f"model={QWEN}"]).train.lr == 1e-6
    assert load_config("default", [f"model.name={QWEN}"]).train.lr == 1e-6


def test_an_override_or_a_users_file_keeps_its_own_learning_rate(tmp_path):
    assert load_config(None, [f"model={QWEN}", "train.lr=3e-6"]).train.lr == 3e-6
    assert load_config(None, ["train.lr=3e-6", f"model={QWEN}"]).train.lr == 3e-6
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"model: {QWEN}\ntrain:\n  lr: 2.0e-6\n  steps: 3\n")
    config = load_config(str(mine), [])
    assert (config.train.lr, config.train.steps) == (2e-6, 3)
    bare = tmp_path / "bare.yaml"
    bare.write_text("train:\n  steps: 3\n")
    assert load_config(str(bare), [f"model={QWEN}"]).train.lr == 1e-6


def test_models_without_a_preset_are_untouched():
    assert load_config(None, ["model=tiny-random"]).train.lr == 1e-5


def test_an_environment_gets_replies_long_enough_for_its_answers_unless_told_otherwise(tmp_path):
    # the default job's 24 tokens cut a BFCL call short (`r3l eval model=... env=function_calling` scored 0 on it)
    assert load_config(None, []).sampling.max_new_tokens == 24
    assert load_config(None, ["env=function_calling"]).sampling.max_new_tokens == 128
    assert load_config(None, ["env=gsm"]).sampling.max_new_tokens == 512
    assert load_config(None, ["env=countdown"]).sampling.max_new_tokens == 64  # its answer after a little working
    assert load_config(None, ["env=dataset"]).sampling.max_new_tokens == 24  # no preset: the shipped file's
    both = load_config(None, [f"model={QWEN}", "env=function_calling"])
    assert (both.sampling.max_new_tokens, both.train.lr) == (128, 1e-6)
    assert load_config(None, ["env=function_calling", "sampling.max_new_tokens=40"]).sampling.max_new_tokens == 40
    assert load_config(None, ["sampling.max_new_tokens=40", "env=function_calling"]).sampling.max_new_tokens == 40
    mine = tmp_path / "mine.yaml"
    mine.write_text("env: function_calling\nsampling:\n  max_new_tokens: 90\n")
    assert load_config(str(mine), []).sampling.max_new_tokens == 90
    bare = tmp_path / "bare.yaml"
    bare.write_text("env: function_calling\n")
    assert load_config(str(bare), []).sampling.max_new_tokens == 128  # over the field's default of 64


def test_a_path_in_place_of_a_name_reads_no_preset():
    from r3l.config import env_preset, model_preset

    assert env_preset("function_calling") == {"sampling": {"max_new_tokens": 128}}
    assert env_preset("../models/qwen2.5-coder-0.5b-instruct") == {} and model_preset("../envs/gsm") == {}
    assert env_preset("textarena:Sokoban-v0") == {} and env_preset(None) == {}


def test_merge_trees_merges_sections_and_reads_the_name_shorthand():
    assert merge_trees(
        {"model": "a", "train": {"lr": 1, "steps": 2}}, {"model": {"lora": {"r": 4}}, "train": {"lr": 3}}
    ) == {"model": {"name": "a", "lora": {"r": 4}}, "train": {"lr": 3, "steps": 2}}


def test_merge_trees_returns_a_new_tree():
    base, top = {"env": {"args": {"seed": 1}}}, {"train": {"lr": 2}}
    merged = merge_trees(base, top)
    merged["env"]["args"]["seed"] = 5
    merged["train"]["lr"] = 3
    assert base == {"env": {"args": {"seed": 1}}} and top == {"train": {"lr": 2}}


def test_relative_step_on_hand_numbers():
    # SmolLM2's median weight RMS 0.190 at the default 1e-5; Qwen2.5-Coder-0.5B's 0.0162 at 1e-5 and 1e-6
    assert relative_step(1e-5, 0.19) == pytest.approx(5.263e-5, rel=1e-3)
    assert relative_step(1e-5, 0.0162) == pytest.approx(6.173e-4, rel=1e-3)
    assert step_size_warning(1e-5, 0.19) is None
    assert step_size_warning(1e-6, 0.0162) is None
    warning = step_size_warning(1e-5, 0.0162)
    assert "6.2e-04" in warning and "train.lr=8e-07" in warning and "\n" not in warning
    assert suggested_lr(0.19) == 1e-5
    assert step_size_warning(1e-5, None) is None


def test_median_weight_rms_reads_trainable_matrices_only():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(0.1)
        model[1].weight.fill_(-0.3)
        model[2].weight.fill_(5.0)
        for layer in model:
            layer.bias.fill_(100.0)  # vectors are not counted
    model[2].weight.requires_grad_(False)
    assert median_weight_rms(model) == pytest.approx(0.2)


def test_training_with_weights_too_small_for_the_lr_warns_once(tmp_path):
    from r3l.logging import console
    from r3l.trainer import Trainer

    config = load_config(
        None,
        [
            "model=tiny-random",
            "generator=scripted",
            "train.steps=0",
            "eval.size=0",
            f"run.dir={tmp_path}",
            "logging.progress=false",
            "logging.tensorboard=false",
        ],
    )
    trainer = Trainer(config)
    try:
        rms = median_weight_rms(trainer.model)
        assert trainer.relative_step == pytest.approx(1e-5 / rms)
    finally:
        trainer.close()
    shrunk = config.model_copy(deep=True)
    shrunk.train.lr = 1.0  # a step of the order of the weights themselves
    with console.capture() as captured:
        Trainer(shrunk).close()
    assert captured.get().count("is a large step for this model") == 1
