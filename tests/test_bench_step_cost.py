"""The bench's step_cost section: R3L and GRPO train on the same tasks, the phases and the learner's work are
read from the real train step, and padding-aware micro-batches never pad more than one pass per micro-batch."""

import json

from r3l.bench import step_cost
from r3l.config import load_config


def test_section_measures_r3l_and_grpo_on_the_same_tasks(tmp_path, monkeypatch):
    from r3l.bench.run import run_bench

    capped = "algorithm.strategy_args.reflection_max_new_tokens=48"
    arms = {label: [*overrides, capped] if "r3l" in label else overrides for label, overrides in step_cost.ARMS.items()}
    monkeypatch.setattr(step_cost, "ARMS", arms)
    config = load_config(
        None,
        [
            "model=tiny-random",
            "train.tasks_per_step=2",
            "sampling.group_size=4",
            "sampling.max_new_tokens=6",
            "train.micro_batch_size=4",
            "structured.reports=true",
            "structured.report_field_chars=8",
            f"run.dir={tmp_path / 'runs'}",
        ],
    )
    out_dir, markdown = run_bench(config, out=tmp_path / "bench", repeats=1, warmup=0, sections="step_cost")
    section = json.loads((out_dir / "bench.json").read_text())["sections"]["step_cost"]
    figures = section["arms"]
    assert set(figures) == set(arms)
    for label, arm in figures.items():
        assert arm["step_seconds"]["median"] >= arm["train_seconds"]["median"] > 0
        assert arm["generated_tokens"]["median"] > 0
        reflected = arm["phase_seconds/reflect"]["median"]
        assert reflected > 0 if "r3l" in label else reflected == 0
    for algorithm in ("grpo", "r3l"):  # the first step explores the same episodes with the same weights
        default, one_pass = figures[algorithm], figures[f"{algorithm}, one pass per micro-batch"]
        assert default["generated_tokens"] == one_pass["generated_tokens"]
        assert default["forward_positions"] == one_pass["forward_positions"]
        assert default["forward_padded_positions"]["median"] <= one_pass["forward_padded_positions"]["median"]
    assert section["r3l_over_grpo"] > 0
    assert "R3L / GRPO median step" in markdown and "| r3l, one pass per micro-batch |" in markdown


def test_the_table_reads_without_the_one_pass_arms():
    cell = {"min": 1.0, "median": 2.0, "max": 3.0}
    figures = dict.fromkeys(step_cost.FIGURES, cell)
    data = {"tasks_per_step": 4, "group_size": 4, "warmup": 1, "repeats": 3, "r3l_over_grpo": 1.5}
    markdown = step_cost.table({**data, "arms": {"grpo": figures, "r3l": figures}})
    assert "| r3l | 2.0 [1.0, 3.0] |" in markdown and "R3L / GRPO median step: **1.50x**." in markdown
