"""What budget each arm of `r3l compare` holds: steps, generated tokens and the positions its learner trained, and
the arms read at equal tokens named as what they are (reruns from step 0, not continuations)."""

from __future__ import annotations

import json

from r3l.compare.budget import budget_note, divergence_text, rerun_divergence
from r3l.compare.plan import Budget
from r3l.compare.summary import Cost, Evaluation, RunResult, read_run, trained_positions
from r3l.compare.table import held_budget, mean_positions, span, tables
from tests.test_compare import BEFORE, _write_run


def _run(label: str, seed: int = 0, steps: int = 20, positions: float | None = None, **settings) -> RunResult:
    return RunResult(
        label, seed, finished=True, steps=steps, cost=Cost(trained_positions=positions), settings=dict(settings)
    )


def test_trained_positions_add_up_step_by_step_and_stay_unknown_until_a_step_records_them():
    assert trained_positions(None, {"step": 1}) is None  # a run made before the learner counted them
    assert trained_positions(None, {"step": 1, "forward_positions": 120}) == 120.0
    assert trained_positions(120.0, {"step": 2}) == 120.0  # every sample skipped: this step trained none
    assert trained_positions(120.0, {"step": 3, "forward_positions": 30.0}) == 150.0


def _with_positions(spec, per_step: dict[int, float]) -> None:
    """The run's step records with the learner's forward_positions of the steps given (none on the others)."""
    path = spec.directory / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if "step_seconds" in record and record["step"] in per_step:
            record["forward_positions"] = per_step[record["step"]]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def test_a_run_reads_its_trained_positions_over_every_step_record(tmp_path):
    spec = _write_run(tmp_path / "grpo" / "seed0", 3, {0: BEFORE, 3: BEFORE})
    _with_positions(spec, {1: 100.0, 3: 300.0})  # step 2 skipped every sample
    with open(spec.directory / "metrics.jsonl", "a") as handle:  # a resume redid step 3: trained again
        handle.write(json.dumps({"step": 3, "step_seconds": 2.0, "forward_positions": 300.0}) + "\n")
        handle.write(json.dumps({"step": 3, "forward_positions": 999.0}) + "\n")  # no step record: not a step
    assert read_run(spec).cost.trained_positions == 100.0 + 300.0 + 300.0
    old = _write_run(tmp_path / "grpo" / "seed1", 3, {0: BEFORE, 3: BEFORE})  # no step records them
    assert read_run(old).cost.trained_positions is None


def test_each_arm_says_what_it_was_held_to():
    assert span([20.0, 20.0]) == "20" and span([62.0, 64.0, 65.0]) == "62-65"
    assert held_budget([_run("grpo", steps=20), _run("grpo", 1, steps=20)]) == "20 steps"
    budget = {"train.budget_tokens": 182334, "train.budget_seconds": None}
    reruns = [_run("grpo@tokens", s, steps=n, **budget) for s, n in enumerate((65, 62, 64))]
    assert held_budget(reruns) == "182334 tokens"  # not the steps each rerun took to spend it
    assert held_budget([_run("a", steps=30, **{"train.budget_tokens": None})]) == "30 steps"
    assert mean_positions([_run("a", positions=100.0), _run("a", 1, positions=150.0)]) == 125.0
    assert mean_positions([_run("a", positions=100.0), _run("a", 1)]) is None  # no mean of some runs


def test_the_table_gives_every_arm_its_steps_tokens_and_trained_positions(tmp_path):
    runs = []
    for seed, positions in enumerate(((40.0, 50.0), (60.0, 50.0))):
        spec = _write_run(tmp_path / "grpo" / f"seed{seed}", 4, {0: BEFORE, 4: BEFORE})
        _with_positions(spec, {1: positions[0], 3: positions[1]})
        runs.append(read_run(spec))
    old = read_run(_write_run(tmp_path / "old" / "seed0", 4, {0: BEFORE, 4: BEFORE}))
    markdown, csv = tables([*runs, old])
    header, _, grpo, older = markdown.splitlines()[:4]
    assert "| steps | held equal | before |" in header and header.endswith("| trained positions / run |")
    assert grpo.startswith("| grpo | 1st try | 2 | 4 | 4 steps | 0.375 |")
    assert grpo.endswith("| 40 | 100 |")  # 4 steps x 10 tokens; (90 + 110) / 2 positions
    assert older.endswith("| 40 | — |")
    assert "Equal generated tokens are not equal trained positions." in markdown
    assert "—: a run recorded no trained positions (made before the learner counted them)." in markdown
    assert csv.splitlines()[0].endswith(",generated tokens / run,trained positions / run")
    assert "| grpo | 0 | 1st try | 0.375 |" in markdown and "| 40 | 90 |" in markdown  # per seed
    assert "—: a run" not in tables(runs)[0]  # said only where a cell is empty


def _evaluated(label: str, seed: int, steps: int, outcomes: dict[int, list[int]]) -> RunResult:
    run = _run(label, seed, steps)
    run.evaluations = {
        step: Evaluation(step, {"first": {f"t{i}": float(o) for i, o in enumerate(values)}})
        for step, values in outcomes.items()
    }
    return run


def test_a_rerun_to_a_budget_is_named_a_rerun_and_measured_against_the_equal_steps_run():
    grpo = [_evaluated("grpo", 0, 20, {20: [1, 1, 0, 0]}), _evaluated("grpo", 1, 20, {20: [1, 0, 1, 0]})]
    reruns = [
        _evaluated("grpo@tokens", 0, 64, {20: [1, 0, 0, 1], 64: [1, 1, 1, 1]}),  # t1 and t3 differ at step 20
        _evaluated("grpo@tokens", 1, 62, {20: [1, 0, 1, 0], 62: [1, 1, 1, 0]}),  # the same at step 20
    ]
    assert rerun_divergence(grpo[0], reruns[0]) == (2, 4) and rerun_divergence(grpo[1], reruns[1]) == (0, 4)
    assert rerun_divergence(grpo[0], _evaluated("grpo@tokens", 0, 64, {64: [1, 1, 1, 1]})) is None  # none there
    assert divergence_text([*grpo, *reruns], "tokens") == (
        "grpo@tokens at step 20, seeds 0, 1: 2/4, 0/4 problems answered otherwise"
    )
    note = budget_note(Budget("tokens", "r3", 182333.3, "r3", arms=("grpo",)), [*grpo, *reruns])
    assert note.startswith("Equal budget: arms marked @tokens are grpo (--budget-for) rerun from step 0")
    assert "not continuations of their equal-steps runs" in note and "spent 182333 generated tokens" in note
    assert "(grpo@tokens at step 20, seeds 0, 1: 2/4, 0/4 problems answered otherwise than by" in note
    assert note.endswith("Equal generated tokens are not equal trained positions (the table's last column).")
