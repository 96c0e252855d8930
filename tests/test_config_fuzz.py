"""Config fuzz: 200 malformed configs and overrides, drawn by a seeded generator, each run in-process through the
`r3l` entry point: exit status 2, one line on stderr that starts with 'error: ', no traceback, no run directory."""

import random
import sys

import pytest

from r3l import cli

CASES = 200
BASE = ["model.name=tiny-random", "eval.size=0", "train.steps=1", "logging.progress=false", "logging.tensorboard=false"]

SECTIONS = [
    "run",
    "model",
    "env",
    "generator",
    "algorithm",
    "sampling",
    "agent",
    "structured",
    "train",
    "eval",
    "logging",
    "distributed",
]
# (key, values its type or range rejects)
BAD_VALUES = [
    ("train.steps", ["abc", "1.5", "[1, 2]", "{a: 1}", "-3", "''"]),
    ("train.lr", ["fast", "0", "-1e-5", "[0.1]", "{x: 1}"]),
    ("train.micro_batch_size", ["0", "-8", "many", "2.5"]),
    ("train.betas", ["0.9", "[a, b]", "{b: 1}"]),
    ("train.schedule", ["sideways", "1", "[constant]"]),
    ("sampling.group_size", ["0", "-1", "eight", "[8]"]),
    ("sampling.temperature", ["-0.5", "hot", "[1]"]),
    ("sampling.top_p", ["0", "1.5", "-1", "most"]),
    ("sampling.max_new_tokens", ["0", "-64", "lots", "1e3x"]),
    ("agent.repeat_limit", ["1", "0", "x"]),
    ("agent.terminate_on", ["[boredom]", "[format_error, nope]", "{a: b}"]),
    ("agent.env_timeout", ["0", "-1", "soon"]),
    ("agent.action_tag", ["''", "[a]"]),
    ("eval.attempts", ["3", "0", "two"]),
    ("eval.size", ["-1", "all"]),
    ("generator.decode", ["turbo", "1"]),
    ("model.lora.dropout", ["1.0", "-0.1", "lots"]),
    ("model.lora.r", ["0", "big"]),
    ("distributed.learner_ranks", ["0", "-2"]),
    ("distributed.placement", ["everywhere"]),
    ("structured.think_chars", ["-1x", "[3]", "lots"]),
    ("algorithm.kl_coef", ["-0.1", "strong"]),
    ("algorithm.sft_loss", ["mse"]),
    ("run.seed", ["zero", "[1]"]),
]
NAME_KEYS = [
    "env",
    "algorithm",
    "model",
    "algorithm.advantage",
    "algorithm.policy_loss",
    "algorithm.aggregation",
    "algorithm.kl_estimator",
    "generator",
    "algorithm.strategy",
]
BROKEN_YAML = [
    "train: [",
    "train: {steps: 3",
    "\tsteps: 3",
    "- just\n- a list",
    "42",
    "'unterminated",
    "train: 5",
    "sampling: [1, 2]",
    "train:\n  steps: 3\n   lr: 1",
    "{{{{",
    ": : :",
    "env:\n  args: 7",
    "train:\n  lr: [1, 2]\n",
    "a: b\nc: d\n",
    "train: {bogus_key: 1}",
    "model: {lora: {r: -1}}",
    "&a [*a]",
    "!!python/object/apply:os.system ['echo pwned']",
]
SYNTAX = ["=3", "train..steps=1", ".steps=1", "train.steps.deeper=1", "train.=1", "=", "train.steps==", "a=b=c"]


def _word(draw: random.Random) -> str:
    return "".join(draw.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(draw.randint(3, 10)))


def malformed_case(draw: random.Random, tmp_path, index: int) -> list[str]:
    """CLI arguments after `train` that must be refused (a config path, if any, first)."""
    kind = draw.choice(
        ["unknown_key"] * 2
        + ["bad_value"] * 4
        + ["unknown_name"] * 2
        + ["broken_yaml"] * 2
        + ["bad_yaml_bytes", "syntax", "missing_file"]
    )
    if kind == "unknown_key":
        return [f"{draw.choice(SECTIONS)}.{_word(draw)}x={draw.randint(0, 9)}"]
    if kind == "bad_value":
        key, values = draw.choice(BAD_VALUES)
        return [f"{key}={draw.choice(values)}"]
    if kind == "unknown_name":
        return [f"{draw.choice(NAME_KEYS)}=no_such_{_word(draw)}"]
    if kind in ("broken_yaml", "bad_yaml_bytes"):
        path = tmp_path / f"case{index}.yaml"
        if kind == "broken_yaml":
            path.write_text(draw.choice(BROKEN_YAML))
        else:
            path.write_bytes(bytes(draw.randrange(256) for _ in range(draw.randint(1, 64))) + b"\xff\xfe: [")
        return [str(path)]
    if kind == "syntax":
        return [draw.choice(SYNTAX)]
    return [str(tmp_path / f"missing_{_word(draw)}.yaml")]


def run_main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["r3l", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    return exit_info.value.code, capsys.readouterr().err


def test_two_hundred_malformed_configs_each_exit_2_with_one_line(tmp_path, monkeypatch, capsys):
    draw = random.Random(0)
    runs = tmp_path / "runs"
    kinds_seen = set()
    for index in range(CASES):
        case = malformed_case(draw, tmp_path, index)
        path_first = case[:1] if not case[0].count("=") else []
        args = ["train", *path_first, *BASE, *case[len(path_first) :], f"run.dir={runs}"]
        code, err = run_main(monkeypatch, capsys, args)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2, (case, err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, err[-2000:])
        assert "Traceback" not in err
        assert not runs.exists() or not any(runs.iterdir()), (case, "left a run directory behind")
        kinds_seen.add(case[0].split("=")[0] if "=" in case[0] else "file")
    assert len(kinds_seen) > 30  # the draw covered many different keys and files
