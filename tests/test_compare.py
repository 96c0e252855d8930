"""`r3l compare`: the plan, what is read from run folders (problem by problem, cost over every session) and
drawn from it, the tables and notes, the equal-budget arms, and a real comparison of two presets x two seeds on
tiny-random (evaluated during training too) whose tables `--table-only` reproduces from the finished runs.
The statistics themselves: tests/test_compare_stats.py."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from r3l.compare.budget import arms_under_budget, budget_arm, check_budget, merged_budget, reference_cost
from r3l.compare.notes import code_note, differing_settings, machine_note
from r3l.compare.plan import Arm, Budget, RunSpec, make_arms, plan_runs
from r3l.compare.plot import curves, dumbbells, figure, wrapped
from r3l.compare.run import overlap_note, parse_seeds
from r3l.compare.stats import difference_interval, paired_difference, seed_level_interval
from r3l.compare.summary import Cost, Evaluation, RunResult, evaluation, read_run
from r3l.compare.table import tables
from r3l.envs import Task
from r3l.envs.overlap import overlap_counts
from r3l.errors import UserError
from tests.conftest import run_cli


def test_seeds_and_arms():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("0,4,7") == [0, 4, 7] and parse_seeds("5,") == [5]
    for bad in ("x", "1,1", ""):
        with pytest.raises(UserError, match="--seeds"):
            parse_seeds(bad)
    arms = make_arms(["grpo", "r3l_no_pivotal_credit"], None)
    assert [(a.label, a.overrides) for a in arms] == [
        ("grpo", ("algorithm=grpo",)),
        ("r3l_no_pivotal_credit", ("algorithm=r3l_no_pivotal_credit",)),
    ]
    with pytest.raises(UserError, match="neither a YAML file nor an algorithm preset"):
        make_arms(["gpro"], None)
    with pytest.raises(UserError, match="share the name"):
        make_arms(["grpo", "grpo"], None)


def test_runs_go_seed_by_seed_so_a_stopped_comparison_has_whole_seeds(tmp_path):
    arms = make_arms(["grpo", "r3l"], None)
    order = [(spec.arm.label, spec.seed) for spec in plan_runs(arms, [0, 1], tmp_path)]
    assert order == [("grpo", 0), ("r3l", 0), ("grpo", 1), ("r3l", 1)]
    assert plan_runs(arms, [0], tmp_path)[1].directory == tmp_path / "r3l" / "seed0"


def _samples(outcomes: list[int], prefix: str = "t") -> list[dict]:
    return [
        {"task_id": f"{prefix}{i}", "success": bool(o), "reward": float(o), "completion": "<answer>1</answer>"}
        for i, o in enumerate(outcomes)
    ]


def _write_run(directory: Path, steps: int, evaluations: dict[int, list[int]], step_tokens: float = 10.0) -> RunSpec:
    """A finished run's files as `r3l train` writes them: evaluations before (step 0), during training
    (eval_stepN.json) and after (the last step), problem by problem, each in metrics.jsonl too."""
    directory.mkdir(parents=True)
    rows = []
    for step, outcomes in sorted(evaluations.items()):
        label = "before" if step == 0 else "after" if step == steps else f"step{step}"
        record = {
            "success": sum(outcomes) / len(outcomes),
            "total": len(outcomes),
            "samples": _samples(outcomes),
            "step": step,
        }
        (directory / f"eval_{label}.json").write_text(json.dumps(record))
        rows.append({"step": step, "eval/success": sum(outcomes) / len(outcomes), "eval/seconds": 1.0})
    rows += [
        {"step": s, "reward": 0.5, "step_seconds": 2.0, "generated_tokens": step_tokens} for s in range(1, steps + 1)
    ]
    rows.sort(key=lambda row: (row["step"], "step_seconds" not in row))
    (directory / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (directory / "summary.json").write_text(json.dumps({"step": steps}))
    (directory / "config.yaml").write_text(f"run:\n  seed: 1\ntrain:\n  steps: {steps}\n")
    return RunSpec(Arm(directory.parent.name, None, ()), int(directory.name.removeprefix("seed")), directory)


def _single_x(line) -> bool:
    return len(set(line.get_xdata())) <= 1


BEFORE = [1, 0, 0, 1, 0, 1, 0, 0]


def test_a_run_is_read_problem_by_problem_with_its_whole_cost(tmp_path):
    spec = _write_run(tmp_path / "grpo" / "seed0", 3, {0: BEFORE, 3: [1, 1, 0, 1, 0, 1, 1, 0]})
    with open(spec.directory / "metrics.jsonl", "a") as handle:  # a resume redid step 3 and counted again
        handle.write(json.dumps({"step": 3, "step_seconds": 2.0, "generated_tokens": 10.0}) + "\n")
        handle.write(json.dumps({"step": 0, "setup_seconds": 5.0, "setup_generated_tokens": 100.0}) + "\n")
    run = read_run(spec)
    assert run.finished and run.steps == 3
    assert run.before.outcomes["first"] == {f"t{i}": float(o) for i, o in enumerate(BEFORE)}
    assert run.final() == 5 / 8 and run.after.format_missing["first"] is None  # no format recorded, no rule
    # 4 step records x 2 s + 2 evaluations x 1 s + 5 s setup; tokens 4 x 10 + 100 of setup
    assert (run.cost.step_records, run.cost.seconds, run.cost.generated_tokens) == (4, 15.0, 140.0)
    assert [(p.step, p.tokens) for p in run.curve] == [(0, 0.0), (3, 30.0)]
    assert run.settings["train.steps"] == 3 and run.code == []


def test_two_attempt_evaluations_give_three_measures_and_format_shares():
    record = {
        "step": 5,
        "total": 3,
        "second_try_verdict_only": {},
        "samples": [
            {"task_id": "a", "first_success": True, "first_attempt": "<answer>1</answer>"},
            {
                "task_id": "b",
                "first_success": False,
                "first_attempt": "1",
                "second_success": True,
                "second_attempt": "<answer>2</answer>",
                "verdict_only_success": False,
                "verdict_only_attempt": "2",
            },
            {
                "task_id": "c",
                "first_success": False,
                "first_attempt": "3",
                "second_success": False,
                "second_attempt": "4",
                "verdict_only_success": True,
                "verdict_only_attempt": "<answer>5</answer>",
            },
        ],
    }
    made = evaluation(record, format_rule=lambda reply: "<answer>" not in reply)
    assert made.outcomes["first"] == {"a": 1.0, "b": 0.0, "c": 0.0}
    assert made.outcomes["second"] == {"a": 1.0, "b": 1.0, "c": 0.0}  # a solved at once keeps its first
    assert made.outcomes["verdict_only"] == {"a": 1.0, "b": 0.0, "c": 1.0}
    # the first try: 2 of 3 without tags; second tries (of the two failures): 1 of 2 each
    assert made.format_missing == {"first": 2 / 3, "second": 0.5, "verdict_only": 0.5}


def _results(tmp_path, arm: str, afters: list[list[int]], steps: int = 4, **kwargs) -> list[RunResult]:
    return [
        read_run(_write_run(tmp_path / arm / f"seed{seed}", steps, {0: BEFORE, steps: after}, **kwargs))
        for seed, after in enumerate(afters)
    ]


def test_tables_read_seeds_as_the_unit(tmp_path):
    grpo = _results(tmp_path, "grpo", [[1, 1, 0, 1, 0, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1, 1, 0]])
    r3l = _results(tmp_path, "r3l", [[1, 0, 0, 1, 0, 1, 0, 1], [1, 1, 0, 1, 1, 1, 0, 0]], step_tokens=30.0)
    markdown, csv = tables([*grpo, *r3l], ["a note"])
    rows = markdown.splitlines()
    grpo_after = seed_level_interval([[1, 1, 0, 1, 0, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1, 1, 0]])
    assert rows[2].startswith(
        f"| grpo | 1st try | 3 | 4 | 4 steps | 0.375 | 0.625 [{grpo_after.low:.3f}, {grpo_after.high:.3f}]"
    )
    assert rows[2].endswith("| 0.625 / 0.625 / 0.625 | - | 0.2 | 40 | — |")  # (4 x 2 s + 2 x 1 s) / 60; 4 x 10 tokens
    assert "| r3l | 1st try | 2 | 4 |" in rows[3] and rows[3].endswith("| 120 | — |")
    afters = [[1, 1, 0, 1, 0, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1, 1, 0]]
    change = difference_interval(afters, [BEFORE], second_fixed=True)  # one untrained model, as every seed saw
    assert f"+0.250 [{change.low:+.3f}, {change.high:+.3f}]" in rows[2]
    assert "seed as the unit" in markdown and "a note" in markdown
    assert "| grpo − r3l (1st try) |" in markdown
    assert csv.splitlines()[0].startswith("arm,try,seeds,steps,held equal,before,")


def test_arms_whose_runs_of_a_seed_drew_the_same_tasks_are_compared_seed_by_seed(tmp_path):
    grpo_afters = [[1, 1, 0, 1, 0, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1, 1, 0]]
    r3l_afters = [[1, 1, 0, 1, 0, 1, 0, 0], [1, 1, 0, 1, 0, 1, 0, 0], [1, 0, 1, 1, 0, 0, 1, 0]]
    grpo, r3l = _results(tmp_path, "grpo", grpo_afters), _results(tmp_path, "r3l", r3l_afters)

    def draw(runs, seed_tasks):
        for run, tasks in zip(runs, seed_tasks, strict=True):
            run.draws = {step: [(f"{task}-{step}", "h")] for step, task in enumerate(tasks, 1)}

    draw(grpo, ["a", "b", "c"])
    draw(r3l, ["a", "b", "c"])
    paired = paired_difference(np.array(grpo_afters, float) - np.array(r3l_afters, float))
    assert (
        f"| grpo − r3l (1st try, seeds paired) | {paired.mean:+.3f} [{paired.low:+.3f}, {paired.high:+.3f}]"
        in (tables([*grpo, *r3l])[0])
    )
    draw(r3l, ["a", "x", "c"])  # seed 1 drew other tasks: the seeds are no blocks
    independent = difference_interval(grpo_afters, r3l_afters)
    assert f"| grpo − r3l (1st try) | {independent.mean:+.3f} [{independent.low:+.3f}," in tables([*grpo, *r3l])[0]


def test_one_seed_gets_no_invented_interval(tmp_path):
    markdown, _ = tables(_results(tmp_path, "a", [[1, 1, 0, 1, 0, 1, 1, 0]]))
    assert "0.625 (one seed: no interval)" in markdown.splitlines()[2]


def test_before_and_after_alone_are_markers_not_a_curve(tmp_path):
    results = _results(tmp_path, "grpo", [[1, 1, 0, 1, 0, 1, 1, 0], [1, 1, 1, 1, 0, 1, 0, 0]])
    assert results[0].intermediate() == []
    assert curves(results) == {}  # two evaluations are no learning curve
    bell = dumbbells(results)["grpo"]
    assert bell.before.mean == 0.375 and bell.after.mean == 0.625 and bell.per_seed == [0.625, 0.625]
    fig = figure(results)
    assert len(fig.axes) == 1
    lines = fig.axes[0].get_lines()
    assert lines and all(_single_x(line) for line in lines)  # nothing joins step 0 to step 4


def test_evaluations_during_training_make_the_curve_against_steps_or_cost(tmp_path):
    every = {0: BEFORE, 2: [1, 1, 0, 1, 0, 0, 0, 0], 4: [1, 1, 0, 1, 0, 1, 1, 0]}
    results = [
        read_run(_write_run(tmp_path / "r3l" / "seed0", 4, every)),
        read_run(_write_run(tmp_path / "r3l" / "seed1", 4, {**every, 2: [1, 1, 1, 1, 0, 0, 0, 0]})),
        read_run(_write_run(tmp_path / "grpo" / "seed0", 4, {0: BEFORE, 4: [1] * 8})),
    ]
    assert [p.step for p in results[0].intermediate()] == [2]
    lines = curves(results)
    assert list(lines) == ["r3l"]  # grpo evaluated only before and after: no curve for it
    assert [point[0] for point in lines["r3l"]] == [0, 2, 4]
    x, mean, low, high, seeds = lines["r3l"][1]
    assert (x, mean, seeds) == (2, 0.4375, 2) and low < mean < high
    by_tokens = curves(results, "tokens")["r3l"]
    assert [point[0] for point in by_tokens] == [0.0, 20.0, 40.0]  # 10 tokens a step
    fig = figure(results, "tokens")
    assert len(fig.axes) == 2 and "tokens" in fig.axes[1].get_xlabel()


def test_the_plot_shows_each_try_of_two_attempt_runs():
    def r3_run(seed: int, second: list[int]) -> RunResult:
        outcomes = {"first": {"a": 1.0, "b": 0.0, "c": 0.0}, "second": dict(zip("abc", map(float, second)))}
        run = RunResult("r3", seed, finished=True, steps=3)
        run.evaluations = {0: Evaluation(0, outcomes), 3: Evaluation(3, outcomes)}
        return run

    bells = dumbbells([r3_run(0, [1, 1, 0]), r3_run(1, [1, 0, 1])])
    assert list(bells) == ["r3", "r3, 2nd try after a reflection"]
    runs = [r3_run(0, [1, 1, 0]), r3_run(1, [1, 0, 1])]
    labels = [tick.get_text() for tick in figure(runs).axes[0].get_xticklabels()]
    assert labels[1].startswith("r3, 2nd try")


def test_overlap_counts_exact_and_reordered_problems():
    train = [Task("a", "Calculate 12 + 7."), Task("b", "Calculate 3 * 4.")]
    held_out = [Task("x", "Calculate 12 + 7."), Task("y", "Calculate 7 + 12."), Task("z", "Calculate 5 - 1.")]

    def key(task):
        return tuple(sorted(task.prompt.removeprefix("Calculate ").rstrip(".").split()))

    assert overlap_counts(held_out, train, key) == (1, 2, 3)


def test_the_overlap_line_names_the_environments_own_near_duplicate_rule():
    from r3l.config import load_config

    countdown = overlap_note(load_config("examples/r3_countdown_cpu.yaml", ["eval.size=4"]))
    calls = overlap_note(load_config("examples/r3_function_calling_cpu.yaml", ["eval.size=4"]))
    assert countdown.endswith("(the environment's near-duplicate key: the same numbers and target).")
    assert calls.endswith(
        "(the environment's near-duplicate key: the same request (case and spacing ignored) to the same functions)."
    )
    assert "of 4 held-out problems" in calls


def test_settings_on_which_runs_differ():
    def run(label, seed, **settings):
        return RunResult(label, seed, settings={"run.seed": seed, "train.lr": 1e-6, **settings})

    results = [
        run("grpo", 0, **{"train.micro_batch_size": 32, "algorithm.name": "grpo"}),
        run("r3", 0, **{"train.micro_batch_size": 8, "algorithm.name": "r3", "algorithm.max_samples": 4}),
        run(
            "r3",
            1,
            **{
                "train.micro_batch_size": 8,
                "train.micro_batch_overhead": 64,
                "algorithm.name": "r3",
                "algorithm.max_samples": 4,
            },
        ),
    ]
    assert differing_settings(results) == [
        "- `train.micro_batch_overhead`: grpo absent; r3 seed 0: absent, seed 1: 64",
        "- `train.micro_batch_size`: grpo 32; r3 8",
    ]
    assert differing_settings(results, "algorithm.") == ["- `algorithm.name`: grpo grpo; r3 r3"]


def test_budget_arms_run_on_to_the_reference_cost():
    def run(label, tokens):
        made = RunResult(label, 0, finished=True, steps=30, cost=Cost(generated_tokens=tokens))
        made.evaluations = {30: Evaluation(30, {"first": {"a": 1.0}})}  # finished, evaluated after
        return made

    results = [run("grpo", 18_000), run("r3l", 60_000), run("r3l", 58_000)]
    with pytest.raises(UserError, match="name no arm of this comparison: r3 "):
        check_budget(Budget("tokens", "r3"), ["grpo", "r3l"])
    with pytest.raises(UserError, match="name no arm of this comparison: gpro "):
        check_budget(Budget("tokens", "r3l", arms=("gpro",)), ["grpo", "r3l"])
    with pytest.raises(UserError, match="--budget-for r3l: that is the reference arm"):
        check_budget(Budget("tokens", "r3l", arms=("grpo", "r3l")), ["grpo", "r3l"])
    check_budget(Budget("tokens", "r3l", arms=("grpo",)), ["grpo", "r3l"])
    assert reference_cost(results, Budget("tokens")) == ("r3l", 59_000)
    budget = Budget("tokens", "r3l", 59_000, "r3l")
    arm = budget_arm(Arm("grpo", "examples/x.yaml", ("algorithm=grpo",)), [results[0]], budget, 30, 0)
    # 600 tokens a step: 99 steps predicted, capped at 3x; evaluated every 30 steps (its equal-steps length)
    assert arm == Arm(
        "grpo@tokens",
        "examples/x.yaml",
        ("algorithm=grpo",),
        ("train.budget_tokens=59000", "train.steps=295", "eval.every=30"),
    )
    # every arm cheaper than the reference runs on, or only those --budget-for names
    ablation = run("no_rr", 30_000)
    arms = [Arm("grpo", None, ()), Arm("r3l", None, ()), Arm("no_rr", None, ())]
    steps = {"grpo": (30, 0), "r3l": (30, 0), "no_rr": (30, 0)}
    every = arms_under_budget(arms, [*results, ablation], budget, steps)
    only = arms_under_budget(arms, [*results, ablation], replace(budget, arms=("grpo",)), steps)
    assert [a.label for a in every] == ["grpo@tokens", "no_rr@tokens"] and [a.label for a in only] == ["grpo@tokens"]


def test_a_continued_comparison_keeps_its_budget_and_takes_only_the_flags_given():
    fixed = Budget("tokens", "r3l", 59_000, "r3l", arms=("grpo",))
    assert merged_budget(None, None) is None and merged_budget(fixed, None) == fixed
    assert merged_budget(None, Budget("seconds")) == Budget("seconds")
    assert merged_budget(fixed, Budget("tokens")) == fixed  # no flag but the unit: all kept, the target too
    assert merged_budget(fixed, Budget("tokens", arms=("grpo", "no_rr"))) == replace(fixed, arms=("grpo", "no_rr"))
    assert merged_budget(fixed, Budget("seconds")) == Budget("seconds", "r3l", arms=("grpo",))  # a new reading
    with pytest.raises(UserError, match="--budget-of grpo: this comparison's tokens budget is fixed to r3l's cost"):
        merged_budget(fixed, Budget("tokens", "grpo"))
    unfixed = Budget("tokens", "r3l")
    assert merged_budget(unfixed, Budget("tokens", "grpo")) == Budget("tokens", "grpo")  # nothing run on yet


def test_compare_two_configs_at_equal_steps_and_budget_and_rebuild_the_table(tmp_path):
    out = tmp_path / "cmp"
    for name, group in (("cheap", 2), ("costly", 6)):  # the costly arm samples three times as many completions
        config = f"algorithm: grpo\nsampling: {{group_size: {group}, max_new_tokens: 8}}\n"
        (tmp_path / f"{name}.yaml").write_text(config)
    tiny = [
        "model=tiny-random",
        "train.tasks_per_step=2",
        "train.steps=2",
        "eval.size=4",
        "eval.every=1",
        "logging.tensorboard=false",
    ]
    first = run_cli(
        "compare",
        "cheap.yaml",
        "costly.yaml",
        "--seeds",
        "2",
        "--out",
        "cmp",
        "--match-budget",
        "tokens",
        "--plot-x",
        "tokens",
        *tiny,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["cheap", "cheap@tokens", "costly"]
    assert all((out / arm / f"seed{s}" / "summary.json").exists() for arm in ("cheap", "costly") for s in (0, 1))
    plan = json.loads((out / "compare.json").read_text())
    assert plan["budget"]["by"] == "tokens" and plan["budget"]["reference"] == "costly"
    budget = read_run(RunSpec(Arm("cheap@tokens", None, ()), 0, out / "cheap@tokens" / "seed0"))
    assert budget.cost.generated_tokens >= plan["budget"]["target"] and budget.steps > 2  # ran on past 2 steps
    assert budget.stopped_by_budget and 2 in budget.evaluations  # evaluated where the equal-steps arm ended
    made = (out / "compare.md").read_text()
    assert made.splitlines()[2].startswith("| cheap | 1st try | 2 | 2 |") and (out / "compare.png").stat().st_size
    assert "| cheap@tokens | 1st try | 2 |" in made and "Equal budget: arms marked @tokens" in made
    assert "Held-out/training overlap:" in made and "Code: 1 version(s) of the source across 6 run(s)" in made
    assert "- `sampling.group_size`: cheap 2; costly 6; cheap@tokens 2" in made
    # eval.every=1: an evaluation after step 1 (besides before and after), which makes the curve
    run = read_run(RunSpec(Arm("cheap", None, ()), 0, out / "cheap" / "seed0"))
    assert [p.step for p in run.intermediate()] == [1] and set(run.evaluations) == {0, 1, 2}
    assert len(run.after.outcomes["first"]) == 4
    assert json.loads((out / "cheap" / "seed0" / "summary.json").read_text())["run"] == "seed0"
    assert "cmp/cheap" in (out / "cheap" / "seed0" / "config.yaml").read_text()  # relative, as given
    steps = [json.loads(line)["step"] for line in (out / "cheap" / "seed0" / "tasks.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    again = run_cli("compare", "--out", "cmp", "--table-only", "--plot-x", "tokens", cwd=tmp_path)
    assert again.returncode == 0 and (out / "compare.md").read_text() == made
    rerun = run_cli("compare", "--out", "cmp", "--plot-x", "tokens", cwd=tmp_path)  # finished: nothing runs
    assert rerun.returncode == 0 and "running" not in rerun.stdout and (out / "compare.md").read_text() == made
    clash = run_cli("compare", "grpo", "--seeds", "1", "--out", "cmp", *tiny, cwd=tmp_path)
    assert clash.returncode == 2 and "holds another comparison" in clash.stderr
    bad = run_cli("compare", "--out", "cmp", "--metric", "accuracy", cwd=tmp_path)
    assert bad.returncode == 2 and "--metric accuracy" in bad.stderr
    # --budget-for: checked before anything runs, kept in the plan, named in the note
    stray = run_cli("compare", "--out", "cmp", "--match-budget", "tokens", "--budget-for", "chep", cwd=tmp_path)
    assert stray.returncode == 2 and "name no arm of this comparison: chep (its arms: cheap, costly)" in stray.stderr
    assert json.loads((out / "compare.json").read_text())["budget"]["arms"] == []  # nothing stored
    alone = run_cli("compare", "--out", "cmp", "--budget-for", "cheap", cwd=tmp_path)
    assert alone.returncode == 2 and "give --match-budget" in alone.stderr
    chosen = run_cli("compare", "--out", "cmp", "--match-budget", "tokens", "--budget-for", " cheap,", cwd=tmp_path)
    assert chosen.returncode == 0 and "running" not in chosen.stdout
    assert json.loads((out / "compare.json").read_text())["budget"] == {**plan["budget"], "arms": ["cheap"]}
    assert "arms marked @tokens are cheap (--budget-for) rerun from step 0" in (out / "compare.md").read_text()
    later = run_cli("compare", "--out", "cmp", "--table-only", cwd=tmp_path)  # no flag: the stored choice stays
    assert later.returncode == 0 and json.loads((out / "compare.json").read_text())["budget"]["arms"] == ["cheap"]


def test_long_arm_labels_wrap_after_underscores_and_at_spaces():
    assert wrapped("qwen_arithmetic_2digit_r3, 2nd try", 21) == "qwen_arithmetic_\n2digit_r3, 2nd try"
    assert wrapped("qwen_arithmetic_2digit_r3l", 12) == "qwen_\narithmetic_\n2digit_r3l"
    assert wrapped("grpo", 12) == "grpo"
    assert wrapped("averyveryverylongword", 5) == "averyveryverylongword"  # no place to break: left whole


def test_an_unknown_interval_is_not_invented():
    estimate = seed_level_interval([[1, 0, 1]])
    assert math.isnan(estimate.low)


def test_the_machine_note_names_each_machine_and_the_runs_on_it():
    epyc, xeon = "AMD EPYC (cpu family 26, model 2), 2 cores", "Intel Xeon (cpu family 6, model 143), 2 cores"
    same = [RunResult(arm, s, settings={"run.seed": s}, machines=[epyc]) for arm in ("grpo", "r3l") for s in (0, 1)]
    assert machine_note(same) == f"Machines: every run that recorded one ran on {epyc}."
    old = RunResult("grpo", 2, settings={"run.seed": 2})  # made before provenance.jsonl named the machine
    moved = RunResult("r3l", 2, settings={"run.seed": 2}, machines=[epyc, xeon])  # resumed on another machine
    assert machine_note([*same, old, moved]).splitlines() == [
        "Machines: 2 across the runs (1 run(s) recorded none); wall times compare only between runs on one, and the "
        "same code and seed sample differently on another:",
        f"- {epyc}: grpo seeds 0, 1; r3l seeds 0, 1, 2",
        f"- {xeon}: r3l seed 2",
    ]
    assert machine_note([old]).startswith("Machines: the runs recorded none")


def test_the_code_note_tells_runs_without_a_code_version_from_runs_not_made_yet():
    made = [RunResult("grpo", seed, settings={"run.seed": seed}, code=["abc"]) for seed in (0, 1)]
    old = RunResult("grpo", 2, settings={"run.seed": 2})  # a config, no provenance.jsonl: made before it existed
    missing = RunResult("r3", 0)  # no run directory yet
    assert code_note(made) == "Code: 1 version(s) of the source across 2 run(s) that recorded one."
    assert code_note([*made, old, missing]) == (
        "Code: 1 version(s) of the source across 2 run(s) that recorded one (1 recorded none, 1 not run yet)."
    )
