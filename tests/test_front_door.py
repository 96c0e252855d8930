"""What a new user meets first: a license file that says what pyproject declares, a missing local model folder named
as missing (not as a hub failure), no third-party deprecation noise where r3l itself triggers it."""

import warnings
from pathlib import Path

import pytest
import tomllib

from r3l.build import trainable_policy
from r3l.config import load_config
from r3l.errors import UserError
from r3l.models import check_model_name, load_policy

ROOT = Path(__file__).resolve().parents[1]


def test_the_license_file_is_the_license_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "Apache-2.0" and "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.mark.parametrize("name", ["runs/nope", "./nope", "../nope/model"])
def test_a_missing_local_model_folder_is_named_as_missing(name, tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=rf"model folder '{name}' does not exist"):
        check_model_name(name)


def test_a_hub_id_is_still_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_model_name("Qwen/Qwen2.5-7B-Instruct") is None


def test_lora_with_gradient_checkpointing_raises_no_deprecation_warning():
    config = load_config(None, ["model=tiny-random", "model.lora.enabled=true", "model.gradient_checkpointing=true"])
    model, _ = load_policy("tiny-random")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        trainable_policy(config, model)


def test_the_held_out_line_keeps_each_key_with_its_value_on_a_narrow_terminal():
    import io

    from rich.console import Console

    from r3l.trainer import held_out_line

    line = held_out_line("before", {"eval/success": 0.2, "eval/hack/prompt_copies": 0.0, "eval/seconds": 12.25})
    assert line == "held-out before: eval/success=0.200, eval/hack/prompt_copies=0.000, eval/seconds=12.250"
    out = io.StringIO()
    Console(file=out, width=40).print(line, soft_wrap=True, markup=False, highlight=False)
    assert out.getvalue() == line + "\n"  # soft wrap: the terminal folds it, rich inserts no break
