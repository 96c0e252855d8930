"""`r3l compare`: the statistics on hand-computed numbers, the plan, what is read from run folders and drawn
from it, and a real comparison of two presets x two seeds on tiny-random (evaluated during training too) whose
table `--table-only` reproduces from the finished runs."""
import json
import math
from pathlib import Path

import pytest

from r3l.compare.plan import Arm, RunSpec, make_arms
from r3l.compare.plot import curves, dumbbells, figure, wrapped
from r3l.compare.run import parse_seeds
from r3l.compare.stats import estimate, pooled, pooled_before, wilson_interval
from r3l.compare.summary import RunResult, read_run, table
from r3l.errors import UserError
from tests.conftest import run_cli


def test_wilson_interval_on_hand_computed_numbers():
    # 3 of 10, z = 1.959964 (z^2 = 3.841459): centre (0.3 + z^2/20) / (1 + z^2/10) = 0.49207 / 1.38415 = 0.355506,
    # half-width z * sqrt(0.3 * 0.7 / 10 + z^2 / 400) / 1.38415 = 1.959964 * 0.174939 / 1.38415 = 0.247714
    low, high = wilson_interval(3, 10)
    assert low == pytest.approx(0.355506 - 0.247714, abs=1e-5) and high == pytest.approx(0.355506 + 0.247714, abs=1e-5)
    # 10 of 20: centre 0.5, half-width 1.959964 * sqrt(0.0125 + 0.0024009) / 1.192073 = 0.200704
    assert wilson_interval(10, 20) == pytest.approx((0.299296, 0.700704), abs=1e-5)
    # the ends stay inside [0, 1] and are not a point (the normal approximation would give [0, 0])
    assert wilson_interval(0, 10)[0] == 0.0 and 0.2 < wilson_interval(0, 10)[1] < 0.35
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_pooling_over_seeds():
    assert pooled([(3, 10), (7, 10)]) == (0.5, *wilson_interval(10, 20))  # successes and tasks summed
    assert pooled([]) is None
    # before training every seed evaluates the same model: identical evaluations are one, not three
    assert pooled_before([(115, 200)] * 3) == pooled([(115, 200)])
    assert pooled_before([(115, 200), (117, 200)]) == pooled([(115, 200), (117, 200)])
    assert estimate([0.3, 0.7], [(3, 10), (7, 10)]) == pooled([(3, 10), (7, 10)])
    centre, low, high = estimate([0.4, 0.6], [None, (6, 10)])  # a run without counts: no interval is invented
    assert centre == 0.5 and math.isnan(low) and math.isnan(high) and estimate([], []) is None


def test_seeds_and_arms():
    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("0,4,7") == [0, 4, 7] and parse_seeds("5,") == [5]
    for bad in ("x", "1,1", ""):
        with pytest.raises(UserError, match="--seeds"):
            parse_seeds(bad)
    arms = make_arms(["grpo", "r3l_no_pivotal_credit"], None)
    assert [(a.label, a.overrides) for a in arms] == [("grpo", ("algorithm=grpo",)),
                                                      ("r3l_no_pivotal_credit", ("algorithm=r3l_no_pivotal_credit",))]
    with pytest.raises(UserError, match="neither a YAML file nor an algorithm preset"):
        make_arms(["gpro"], None)
    with pytest.raises(UserError, match="share the name"):
        make_arms(["grpo", "grpo"], None)


def test_table_rows():
    results = [RunResult("a", 0, 0.4, 10, 60.0, 100.0, 50.0, final_counts=(4, 10), before=0.2, before_counts=(2, 10)),
               RunResult("a", 1, 0.6, 10, 180.0, 300.0, 150.0, final_counts=(6, 10), before=0.2,
                         before_counts=(2, 10)),
               RunResult("b", 0, None)]
    markdown, csv = table(results)
    rows = markdown.splitlines()
    assert "Wilson" in rows[0] and "before" in rows[0]
    # before: 2 of 10 once (both seeds start from one model): centre (0.2 + 0.192073) / 1.384146 = 0.283255,
    # half-width 1.959964 * sqrt(0.016 + 0.0096037) / 1.384146 = 0.226576; after: 10 of 20 pooled (see above).
    # A t-interval over the two seeds' 0.4 and 0.6 was [-0.771, 1.771]: outside [0, 1].
    assert rows[2] == ("| a | 2 | 0.200 | [0.057, 0.510] | 0.500 | [0.299, 0.701] | 0.40 0.60 | 10 | 2.0 | 200 "
                       "| 100 |")
    assert rows[3].startswith("| b | 0 | - |") and csv.splitlines()[1].startswith('a,2,0.200,"[0.057, 0.510]",0.500,')
    assert "Wilson" in markdown.split("\n\n")[1]  # the note under the table says what the intervals are
    # without the counts of every seed: the mean success, no interval
    markdown, _ = table([RunResult("a", 0, 0.4, 10), RunResult("a", 1, 0.6, 10, final_counts=(6, 10))])
    assert markdown.splitlines()[2].startswith("| a | 2 | - | - | 0.500 | - | 0.40 0.60 |")


def _write_run(directory: Path, steps: int, evaluations: dict[int, tuple[int, int]]) -> RunSpec:
    """A finished run's files as `r3l train` writes them: evaluations before (step 0), during training
    (eval_stepN.json) and after (the last step), each in metrics.jsonl too."""
    directory.mkdir(parents=True)
    rows = []
    for step, (successes, total) in sorted(evaluations.items()):
        label = "before" if step == 0 else "after" if step == steps else f"step{step}"
        record = {"success": successes / total, "ci95": list(wilson_interval(successes, total)),
                  "successes": successes, "total": total, "samples": [], "step": step}
        (directory / f"eval_{label}.json").write_text(json.dumps(record))
        rows.append({"step": step, "eval/success": successes / total, "eval/seconds": 1.0})
    rows += [{"step": s, "reward": 0.5, "step_seconds": 2.0} for s in range(1, steps + 1)]
    rows.sort(key=lambda row: (row["step"], "step_seconds" not in row))
    (directory / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = {name: {"success": c[0] / c[1], "successes": c[0], "total": c[1]}
               for name, c in (("eval_before", evaluations[0]), ("eval_after", evaluations[steps]))}
    (directory / "summary.json").write_text(json.dumps({"step": steps, **summary}))
    return RunSpec(Arm(directory.parent.name, None, ()), int(directory.name.removeprefix("seed")), directory)


def _single_x(line) -> bool:
    return len(set(line.get_xdata())) <= 1


def test_before_and_after_alone_are_markers_not_a_curve(tmp_path):
    results = [read_run(_write_run(tmp_path / "grpo" / f"seed{seed}", 30, {0: (115, 200), 30: (after, 200)}))
               for seed, after in ((0, 131), (1, 128), (2, 133))]
    assert results[0].final_counts == (131, 200) and results[0].before_counts == (115, 200)
    assert results[0].intermediate() == []
    assert curves(results) == {}  # two evaluations are no learning curve
    bell = dumbbells(results)["grpo"]
    assert bell.before == pooled([(115, 200)]) and bell.after == pooled([(131, 200), (128, 200), (133, 200)])
    assert bell.per_seed == [0.655, 0.64, 0.665] and bell.steps == 30
    fig = figure(results)
    assert len(fig.axes) == 1
    lines = fig.axes[0].get_lines()
    assert lines and all(_single_x(line) for line in lines)  # nothing joins step 0 to step 30
    assert fig.axes[0].get_ylim()[0] >= -0.05 and fig.axes[0].get_ylim()[1] <= 1.05


def test_evaluations_during_training_make_the_curve(tmp_path):
    every = {0: (60, 200), 10: (70, 200), 20: (84, 200), 30: (90, 200)}
    results = [read_run(_write_run(tmp_path / "r3l" / "seed0", 30, every)),
               read_run(_write_run(tmp_path / "r3l" / "seed1", 30, {**every, 10: (74, 200)})),
               read_run(_write_run(tmp_path / "grpo" / "seed0", 30, {0: (60, 200), 30: (80, 200)}))]
    assert results[0].intermediate() == [(10, 0.35), (20, 0.42)] and results[0].counts[10] == (70, 200)
    lines = curves(results)
    assert list(lines) == ["r3l"]  # grpo evaluated only before and after: no curve for it
    assert [point[0] for point in lines["r3l"]] == [0, 10, 20, 30]
    step, success, low, high, seeds = lines["r3l"][1]
    assert (step, success, seeds) == (10, 0.36, 2) and (low, high) == pytest.approx(wilson_interval(144, 400))
    assert lines["r3l"][0][1:4] == pooled([(60, 200)])  # the shared start counted once
    fig = figure(results)
    assert len(fig.axes) == 2
    curve = [line for line in fig.axes[1].get_lines() if not _single_x(line)]
    assert len(curve) == 1 and list(curve[0].get_xdata()) == [0, 10, 20, 30]
    assert all(_single_x(line) for line in fig.axes[0].get_lines())


def test_an_unknown_interval_is_not_invented(tmp_path):
    result = RunResult("a", 0, 0.5, 10, curve=[(0, 0.25), (5, 0.4), (10, 0.5)], before=0.25)
    bell = dumbbells([result])["a"]
    assert bell.after[0] == 0.5 and math.isnan(bell.after[1])  # no counts: the point, no interval
    assert curves([result])["a"][1][:2] == (5, 0.4)


def test_compare_two_presets_and_rebuild_the_table(tmp_path):
    out = tmp_path / "cmp"
    tiny = ["model=tiny-random", "sampling.group_size=4", "sampling.max_new_tokens=8", "train.tasks_per_step=2",
            "train.steps=2", "eval.size=4", "eval.every=1", "logging.tensorboard=false"]
    first = run_cli("compare", "grpo", "opmd", "--seeds", "2", "--out", str(out), *tiny, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["grpo", "opmd"]
    assert all((out / arm / f"seed{s}" / "summary.json").exists() for arm in ("grpo", "opmd") for s in (0, 1))
    made = (out / "compare.md").read_text()
    assert made.splitlines()[2].startswith("| grpo | 2 |") and (out / "compare.png").stat().st_size > 0
    # eval.every=1: an evaluation after step 1 (besides before and after), which makes the curve
    assert (out / "grpo" / "seed0" / "eval_step1.json").exists()
    run = read_run(RunSpec(Arm("grpo", None, ()), 0, out / "grpo" / "seed0"))
    assert [step for step, _ in run.intermediate()] == [1] and set(run.counts) == {0, 1, 2}
    assert run.final_counts is not None and run.final_counts[1] == 4
    again = run_cli("compare", "--out", str(out), "--table-only", cwd=tmp_path)
    assert again.returncode == 0 and (out / "compare.md").read_text() == made
    rerun = run_cli("compare", "--out", str(out), cwd=tmp_path)  # everything finished: nothing runs again
    assert rerun.returncode == 0 and "running" not in rerun.stdout and (out / "compare.md").read_text() == made
    clash = run_cli("compare", "grpo", "--seeds", "1", "--out", str(out), *tiny, cwd=tmp_path)
    assert clash.returncode == 2 and "holds another comparison" in clash.stderr


def test_runs_that_try_twice_get_second_try_columns():
    # R3's evaluations (eval.attempts=2): the second try after a reflection, before and after, pooled over seeds;
    # an arm that tried once shows '-' there
    r3 = [RunResult("r3", seed, 0.55, 30, final_counts=(11, 20), before=0.6, before_counts=(12, 20),
                    second_before=0.6, second_before_counts=(12, 20), second_final=final / 20,
                    second_final_counts=(final, 20)) for seed, final in ((0, 13), (1, 14))]
    grpo = [RunResult("grpo", 0, 0.7, 30, final_counts=(14, 20), before=0.6, before_counts=(12, 20))]
    markdown, csv = table([*r3, *grpo])
    rows = markdown.splitlines()
    assert "| before: 2nd try | after: 2nd try (seeds pooled) | after: 2nd try, 95% Wilson |" in rows[0]
    # 27 of 40 pooled: p 0.675, z 1.959964: centre (0.675 + 3.841459 / 80) / 1.096036 = 0.659665,
    # half-width 1.959964 * sqrt(0.675 * 0.325 / 40 + 3.841459 / 6400) / 1.096036 = 0.139489; the first try,
    # 22 of 40: centre 0.598018 / 1.096036 = 0.545620, half-width 1.959964 * 0.082388 / 1.096036 = 0.147328
    assert rows[2].startswith("| r3 | 2 | 0.600 | [0.387, 0.781] | 0.550 | [0.398, 0.693] | 0.600 | 0.675 | "
                              "[0.520, 0.799] | 0.55 0.55 |")
    assert rows[3].startswith("| grpo | 1 | 0.600 | [0.387, 0.781] | 0.700 | [0.481, 0.855] | - | - | - | 0.70 |")
    import csv as csv_module

    assert [len(row) for row in csv_module.reader(csv.splitlines())] == [14, 14, 14]
    # without a second try anywhere the table keeps its shape
    assert "2nd try" not in table(grpo)[0]


def test_the_plot_shows_a_second_try_beside_the_first():
    r3 = [RunResult("r3", seed, 0.55, 30, final_counts=(11, 20), before=0.6, before_counts=(12, 20),
                    second_before=0.6, second_before_counts=(12, 20), second_final=final / 20,
                    second_final_counts=(final, 20)) for seed, final in ((0, 13), (1, 14))]
    grpo = [RunResult("grpo", 0, 0.7, 30, final_counts=(14, 20), before=0.6, before_counts=(12, 20))]
    bells = dumbbells([*r3, *grpo])
    assert list(bells) == ["r3", "r3, 2nd try", "grpo"]
    second = bells["r3, 2nd try"]
    assert second.before == pooled_before([(12, 20), (12, 20)]) and second.after == pooled([(13, 20), (14, 20)])
    assert second.per_seed == [0.65, 0.7] and second.steps == 30
    assert bells["r3"].after == pooled([(11, 20), (11, 20)])
    labels = [tick.get_text() for tick in figure([*r3, *grpo]).axes[0].get_xticklabels()]
    assert labels[1].startswith("r3, 2nd try\n(2 seeds, 30 steps)")


def test_long_arm_labels_wrap_after_underscores_and_at_spaces():
    assert wrapped("qwen_arithmetic_2digit_r3, 2nd try", 21) == "qwen_arithmetic_\n2digit_r3, 2nd try"
    assert wrapped("qwen_arithmetic_2digit_r3l", 12) == "qwen_\narithmetic_\n2digit_r3l"
    assert wrapped("grpo", 12) == "grpo"
    assert wrapped("averyveryverylongword", 5) == "averyveryverylongword"  # no place to break: left whole
