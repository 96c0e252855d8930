"""An eval.size asked for that the test split cannot give is refused in one line (exit 2), not cut; the shipped
default size is an upper bound, and a run's saved config records the size it evaluated."""

import json
from types import SimpleNamespace

import pytest
import yaml

from r3l.config import load_config
from r3l.errors import UserError
from r3l.evaluate import held_out_tasks
from tests.conftest import run_cli

ENV = SimpleNamespace(name="toy", tasks=lambda split: [f"{split}-{i}" for i in range(3)])


def test_held_out_tasks():
    assert held_out_tasks(ENV, 2) == ["test-0", "test-1"]
    assert held_out_tasks(ENV, 3) == ["test-0", "test-1", "test-2"]
    assert held_out_tasks(ENV, 0) == []
    assert held_out_tasks(ENV, 5, asked=False) == ["test-0", "test-1", "test-2"]  # the shipped default: a cap
    with pytest.raises(
        UserError,
        match=r"eval.size=5 asks for more held-out tasks than the test split of 'toy' "
        r"holds \(3\); set eval.size to at most 3",
    ):
        held_out_tasks(ENV, 5)


def test_which_sizes_were_asked_for(tmp_path):
    assert not load_config(None, ["model=tiny-random", "env=countdown"]).eval_size_asked  # default.yaml's 100
    assert load_config(None, ["model=tiny-random", "eval.size=7"]).eval_size_asked
    assert load_config(None, ["model=tiny-random", "eval={size: 7}"]).eval_size_asked
    assert not load_config(None, ["model=tiny-random", "eval.every=2"]).eval_size_asked
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"model": "tiny-random", "eval": {"size": 7}}))
    assert load_config(str(mine)).eval_size_asked
    mine.write_text(yaml.safe_dump({"model": "tiny-random"}))
    assert not load_config(str(mine)).eval_size_asked


def test_eval_refuses_a_size_larger_than_the_split(tmp_path):
    result = run_cli(
        "eval", "model=tiny-random", "env=arithmetic", "env.args.test_size=10", "eval.size=20", cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: eval.size=20 asks for more held-out tasks than the test split of 'arithmetic' holds (10); "
        "set eval.size to at most 10, or give the environment a larger test split"
    ]


def test_a_run_records_the_size_it_evaluated(tmp_path):
    result = run_cli(
        "train",
        "model=tiny-random",
        "env=arithmetic",
        "env.args.test_size=2",
        "train.steps=1",
        "train.tasks_per_step=1",
        "sampling.group_size=2",
        "sampling.max_new_tokens=4",
        "logging.progress=false",
        "logging.tensorboard=false",
        "generator.dtype=float32",
        f"run.dir={tmp_path}",
        "run.name=r",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["eval_before"]["total"] == 2
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["eval"]["size"] == 2
