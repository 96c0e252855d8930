"""Each paper recipe (examples/paper/) trains 2 steps as written, its model replaced by Qwen2.5's architecture at
tiny width (random weights), the HF generator in place of vLLM (not installed here), one learner rank, small
groups; its data by small files in the same layouts where the data cannot be had here (xLAM, DAPO), and ALFWorld's
and WebShop's stores by the tests' fakes (neither can be installed here)."""

import inspect
import json
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest

from r3l.config import load_config
from r3l.envs import ENVS
from r3l.envs.alfworld import ALFWorldEnv
from r3l.envs.webshop import WebShopEnv
from tests.helpers.fake_alfworld import FakeALFWorld
from tests.helpers.fake_webshop import FakeWebShop

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "examples" / "paper").glob("*.yaml"))
SMALL = [
    "model.name=random:qwen2.5-tiny",
    "generator=hf",
    "distributed.learner_ranks=1",
    "train.steps=2",
    "train.tasks_per_step=2",
    "sampling.group_size=2",
    "sampling.max_new_tokens=12",
    "algorithm.strategy_args.reflection_max_new_tokens=16",
    "eval.size=0",
    "agent.env_workers=2",
    "agent.max_turns=3",
    "logging.progress=false",
    "logging.tensorboard=false",
]
PER_ENV = {
    "countdown": ["env.args.train_size=8", "env.args.test_size=2"],
    "scienceworld": ["env.args.train_size=4", "env.args.test_size=2"],
}


class StoreALFWorld(ALFWorldEnv):
    def __init__(self, **kwargs):
        super().__init__(backend=FakeALFWorld(), **kwargs)


class StoreWebShop(WebShopEnv):
    def __init__(self, **kwargs):
        super().__init__(backend=FakeWebShop(), **kwargs)


for store, real in ((StoreALFWorld, ALFWorldEnv), (StoreWebShop, WebShopEnv)):
    store.__init__.__signature__ = inspect.signature(real.__init__)  # the settings checked are the real env's


def xlam_file(path: Path) -> str:
    tools = json.dumps([{"name": "add", "description": "Add.", "parameters": {"a": {"type": "int"}}}])
    rows = [
        {"id": i, "query": f"Add {i}.", "tools": tools, "answers": json.dumps([{"name": "add", "arguments": {"a": i}}])}
        for i in range(100)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return f"env.args.path={path}"


def dapo_file(path: Path) -> str:
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": f"What is {a} + 2? Answer in \\\\boxed{{}}."}],
            "reward_model": {"ground_truth": str(a + 2), "style": "rule-lighteval/MATH_v2"},
        }
        for a in range(100)
    ]
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return f"env.args.source_args.path={path}"


@pytest.mark.parametrize("recipe", RECIPES, ids=[path.stem for path in RECIPES])
def test_each_recipe_trains_two_steps_at_tiny_width(recipe, tmp_path, monkeypatch):
    from r3l.trainer import Trainer

    monkeypatch.setitem(ENVS._items, "alfworld", StoreALFWorld)
    monkeypatch.setitem(ENVS._items, "webshop", StoreWebShop)
    monkeypatch.setattr("tests.helpers.fake_webshop.GOALS", 4200)  # the paper's split reaches goal 4195
    name = load_config(str(recipe)).env.name
    data = {
        "function_calling": lambda: [xlam_file(tmp_path / "xlam.jsonl")],
        "math": lambda: [dapo_file(tmp_path / "dapo.parquet")],
    }.get(name, list)()
    config = load_config(str(recipe), [*SMALL, *PER_ENV.get(name, []), *data, f"run.dir={tmp_path}", "run.name=r"])
    summary = Trainer(config).run()
    assert summary["step"] == 2, summary
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "loss" in row]
    assert trained and all(row.get("nonfinite_update", 0.0) == 0.0 for row in trained), trained
