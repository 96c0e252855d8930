"""Every paper recipe resolves with the config loader, names what its header must, runs vLLM, and fits by
`r3l plan` on the GPUs its header names."""

import re
from pathlib import Path

import pytest

from r3l.config import load_config
from r3l.plan.report import make_plan, refusal

RECIPES = sorted((Path(__file__).parent.parent / "examples" / "paper").glob("*.yaml"))


def test_every_experiment_has_a_recipe():
    names = {recipe.stem for recipe in RECIPES}
    for env in ("alfworld", "webshop", "scienceworld", "dapo_math"):
        assert {f"r3l_{env}_qwen1.5b", f"r3l_{env}_qwen7b"} <= names
    assert {"r3_xlam_qwen1.5b", "r3_countdown_qwen1.5b"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.stem)
def test_recipe_resolves_and_fits(recipe):
    header = "".join(line for line in recipe.read_text().splitlines(keepends=True) if line.startswith("#"))
    for field in ("# Paper:", "# GPUs:", "# Data:", "# Layout:"):
        assert field in header, f"{recipe.name}: no '{field}' line"
    config = load_config(str(recipe))
    assert config.generator.name == "vllm"
    gib = float(re.search(r"--gpu-memory (\d+)", header).group(1))
    plan = make_plan(config, gib)
    assert plan.fits and refusal(plan) is None, refusal(plan)


def test_r3l_recipes_follow_the_paper_and_r3l_reference_the_code():
    for recipe in RECIPES:
        if recipe.stem.startswith("r3l_"):
            assert load_config(str(recipe)).algorithm.kl_coef == 0.0
    reference = load_config(None, ["algorithm=r3l_reference"]).algorithm
    assert (reference.kl_coef, reference.kl_estimator) == (0.001, "k2")
