"""A generator's settings are its own: read from its constructor, checked in one line, shown by `r3l generators`
and `r3l config`; adding a generator is one class with one decorator."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
import torch
from pydantic import Field

from r3l.build import generator_settings, make_generator
from r3l.config import load_config
from r3l.errors import UserError
from r3l.rollout.generator import GENERATORS, Completion, Generator
from r3l.rollout.generator_settings import check_settings, default_settings, describe
from tests.conftest import run_cli


class Echo(Generator):
    """Replies with the prompt's last `repeat` tokens (a generator small enough for a test)."""

    def __init__(
        self,
        model,
        tokenizer,
        dtype: torch.dtype = torch.float32,
        repeat: Annotated[int, Field(gt=0, description="tokens echoed")] = 2,
        mode: Annotated[Literal["last", "first"], Field(description="which end of the prompt")] = "last",
    ):
        self.dtype, self.repeat, self.mode = dtype, repeat, mode

    def generate(self, prompts, params, n=1, constraints=None):
        def echo(prompt):
            tokens = list(prompt[-self.repeat :] if self.mode == "last" else prompt[: self.repeat])
            return Completion(tokens=tokens, logprobs=[0.0] * len(tokens), text="", finish_reason="stop")

        return [[echo(prompt) for _ in range(n)] for prompt in prompts]


@pytest.fixture
def echo_registered():
    GENERATORS.register("echo-test")(Echo)
    yield
    GENERATORS._items.pop("echo-test")


def test_settings_are_read_from_the_constructor_with_their_checks_and_help():
    assert default_settings(Echo) == {"repeat": 2, "mode": "last"}
    assert check_settings("echo", Echo, {"repeat": 3}) == {"repeat": 3, "mode": "last"}
    with pytest.raises(UserError, match=r"generator.repeat=0: Input should be greater than 0 \(generator 'echo'\)"):
        check_settings("echo", Echo, {"repeat": 0})
    with pytest.raises(UserError, match=r"has no setting generator\.decode; its settings: repeat, mode"):
        check_settings("echo", Echo, {"decode": "static"})
    text = describe("echo", Echo)
    assert (
        text.splitlines()[0]
        == "echo: Replies with the prompt's last `repeat` tokens (a generator small enough for a test)."
    )
    assert "repeat" in text and "tokens echoed" in text and "default 'last'" in text


def test_a_registered_generator_is_built_from_the_config_with_its_own_settings(tiny, echo_registered):
    model, tokenizer = tiny
    config = load_config(None, ["generator=echo-test", "generator.repeat=3", "generator.dtype=float32"])
    assert generator_settings(config) == {"repeat": 3, "mode": "last"}
    generator = make_generator(config, model, tokenizer)
    assert isinstance(generator, Echo) and generator.repeat == 3 and generator.dtype == torch.float32
    assert generator.generate([[5, 6, 7, 8]], params=None)[0][0].tokens == [6, 7, 8]
    refused = load_config(None, ["generator=echo-test", "generator.prefill_chunk=8"])
    with pytest.raises(UserError, match=r"generator 'echo-test' has no setting generator\.prefill_chunk"):
        make_generator(refused, model, tokenizer)


def test_the_cli_lists_each_generators_settings_and_train_refuses_a_setting_of_another_in_one_line(tmp_path):
    listed = run_cli("generators")
    assert listed.returncode == 0, listed.stderr
    for line in ("hf: ", "vllm: ", "scripted: ", "  decode ", "  engine_args ", "  success_rate "):
        assert line in listed.stdout
    one = run_cli("generators", "vllm")
    assert one.returncode == 0 and one.stdout.startswith("vllm: ") and "hf: " not in one.stdout
    shown = run_cli("config", "generator=vllm", "generator.sleep=false")
    assert shown.returncode == 0 and "  sleep: false\n" in shown.stdout, shown.stderr
    bad = run_cli("train", "model=tiny-random", "generator.engine_args={}", f"run.dir={tmp_path}", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "generator 'hf' has no setting generator.engine_args" in bad.stderr
    assert not any(tmp_path.iterdir())  # refused before anything was built or written
