"""Every paper recipe (examples/paper/) resolves and fits, by `r3l plan`, on the 80 GiB GPUs its header names; and
docs/REPRODUCE.md has a section for each."""

from pathlib import Path

import pytest

from r3l.config import load_config
from r3l.plan import plan_table

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "examples" / "paper").glob("*.yaml"))


def test_there_is_a_recipe_per_paper_experiment():
    names = {path.stem for path in RECIPES}
    for experiment in ("alfworld", "webshop", "scienceworld", "dapo_math", "r3_xlam", "r3_countdown"):
        assert any(experiment in name for name in names), experiment
    assert any("7b" in name for name in names)


@pytest.mark.parametrize("recipe", RECIPES, ids=[path.stem for path in RECIPES])
def test_each_recipe_resolves_and_fits_on_80_gib(recipe):
    config = load_config(str(recipe))
    assert config.generator.name == "vllm" and config.model.name.startswith("Qwen/")
    table, fits, change = plan_table(config, 80.0)
    assert fits, f"{recipe.name}: {change}\n{table}"
    header = recipe.read_text().split("\nmodel:")[0]
    assert "Paper" in header and "Data:" in header and "GPUs" in header
    assert recipe.name in (ROOT / "docs" / "REPRODUCE.md").read_text()
