"""`r3l report`'s plots: the maths on hand-computed numbers (smoothing, gaps, intervals, clip range) and what
the drawn axes hold: held-out success alone on a [0, 1] axis with its intervals, one panel for a reward equal to
success, steps without an update as gaps, thresholds from the run's config, the run's name in the titles."""

import json
import math

import pytest
import yaml

from r3l.logging.panels import PANELS
from r3l.logging.plots import (
    RunInfo,
    _draw,
    _series,
    choose_panels,
    clip_range,
    held_out_intervals,
    no_update_steps,
    render_report,
    run_name,
    smooth,
    smoothing_window,
)

nan = math.nan
PANEL = {panel.name: panel for panel in PANELS}


def _write(run_dir, rows, config=None, evaluations=()):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if config is not None:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    for label, record in evaluations:
        (run_dir / f"eval_{label}.json").write_text(json.dumps(record))


def _same(a, b):
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in zip(a, b))


def test_smoothing_on_hand_computed_numbers():
    # window 3: the mean of the finite values one step either side; a gap stays a gap
    assert _same(smooth([1.0, 2.0, nan, 4.0, 5.0], 3), [1.5, 1.5, nan, 4.5, 4.5])
    assert _same(smooth([0.0, 3.0, 6.0, 9.0, 12.0], 5), [3.0, 4.5, 6.0, 7.5, 9.0])  # (0+3+6)/3, (0+3+6+9)/4, ...
    assert smooth([2.0, 4.0], 1) == [2.0, 4.0]
    assert [smoothing_window(n) for n in (9, 10, 30, 70, 1000)] == [1, 5, 5, 11, 25]


def test_steps_without_an_update_are_gaps_not_zeros():
    rows = [
        {"step": 0, "eval/success": 0.2, "eval/seconds": 137.0},
        {"step": 1, "reward": 0.5, "loss": 0.1, "grad_norm": 2.0, "entropy": 0.3, "trained_tokens": 60.0},
        # every advantage 0: the learner logs a loss and gradient norm of exactly 0, and no entropy
        {
            "step": 2,
            "reward": 1.0,
            "loss": 0.0,
            "grad_norm": 0.0,
            "trained_tokens": 60.0,
            "skipped_zero_advantage": 8.0,
        },
        # a non-finite update: written as null, its keys listed under "nonfinite"
        {
            "step": 3,
            "reward": 0.25,
            "loss": None,
            "grad_norm": None,
            "entropy": 0.4,
            "nonfinite_update": 1.0,
            "nonfinite": ["grad_norm", "loss"],
        },
        {"step": 4, "reward": 0.0, "trained_tokens": 0.0},  # nothing to train on
        {"step": 5, "reward": 0.75, "loss": 0.2, "grad_norm": 1.0, "entropy": 0.5},
        {"step": 5, "eval/success": 0.4, "eval/seconds": 39.0},
    ]
    assert no_update_steps(rows) == {2.0: "no signal", 3.0: "dropped", 4.0: "no signal"}
    series = _series(rows)
    assert series["loss"][0] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert _same(series["loss"][1], [0.1, nan, nan, nan, 0.2])  # not 0 at step 2, not joined from 1 to 5
    assert _same(series["grad_norm"][1], [2.0, nan, nan, nan, 1.0])
    assert _same(series["entropy"][1], [0.3, nan, 0.4, nan, 0.5])  # absent: a gap; measured (step 3): kept
    assert _same(series["reward"][1], [0.5, 1.0, 0.25, 0.0, 0.75])  # the rollout happened: kept
    assert series["eval/success"] == ([0.0, 5.0], [0.2, 0.4])
    # a resumed run logs the steps since its checkpoint again: one point per step, the later value
    again = _series(rows[:3] + [{"step": 1, "reward": 0.6}] + rows[3:])
    assert again["reward"][0] == [1.0, 2.0, 3.0, 4.0, 5.0] and again["reward"][1][0] == 0.6


def test_held_out_success_has_its_own_axis_and_intervals():
    series = _series(
        [
            {"step": 0, "eval/success": 0.21, "eval/reward": 0.21, "eval/seconds": 137.0},
            {"step": 30, "eval/success": 0.39, "eval/reward": 0.39, "eval/seconds": 39.0},
            *({"step": s, "reward": 0.5, "success": 0.5, "step_seconds": 10.0} for s in range(1, 31)),
        ]
    )
    panels = dict(choose_panels(series)[0])
    assert panels[PANEL["held_out"]] == ["eval/success"]  # seconds are never on a success axis
    assert "eval/seconds" in panels[PANEL["seconds"]] and PANEL["held_out_reward"] not in panels
    intervals = held_out_intervals(
        [
            {"step": 0, "success": 0.21, "ci95": [0.16, 0.27], "total": 200},
            {"step": 30, "first_try": {"success": 0.39, "ci95": [0.32, 0.46]}, "second_try": {"ci95": [0.4, 0.55]}},
            {"success": 0.5, "ci95": [0.4, 0.6]},
        ]
    )  # no step: not placed
    assert intervals == {
        "eval/success": {0.0: (0.16, 0.27), 30.0: (0.32, 0.46)},
        "eval/second_try_success": {30.0: (0.4, 0.55)},
    }
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    _draw(ax, series, ["eval/success"], PANEL["held_out"], info=RunInfo(name="grpo/seed0", intervals=intervals))
    low, high = ax.get_ylim()
    assert low >= -0.05 and high <= 1.05  # 0.21 -> 0.39 is not squashed against an axis reaching 137
    bars = ax.containers[0]
    assert bars.has_yerr
    segments = bars.lines[2][0].get_segments()
    assert [tuple(segment[:, 1]) for segment in segments] == [pytest.approx((0.16, 0.27)), pytest.approx((0.32, 0.46))]
    assert ax.get_title().startswith("grpo/seed0: held-out success") and ax.get_ylabel() == "held-out success"


def test_a_reward_equal_to_success_is_drawn_once(tmp_path):
    rows = [{"step": s, "reward": s / 10, "success": s / 10, "loss": 0.1} for s in range(1, 6)]
    panels, notes = choose_panels(_series(rows))
    names = [panel.name for panel, _ in panels]
    assert "reward" not in names and "success" in names and notes["success"] == "the reward is the same curve"
    rows[2]["reward"] = 0.35  # a partial reward: both panels
    assert {"reward", "success"} <= {panel.name for panel, _ in choose_panels(_series(rows))[0]}
    _write(tmp_path, rows)
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "reward.png").write_bytes(b"stale")
    rows[2]["reward"] = 0.3
    _write(tmp_path, rows)
    names = {path.name for path in render_report(tmp_path)}
    assert "reward.png" not in names and not (tmp_path / "plots" / "reward.png").exists()  # no stale duplicate


def test_clip_range_from_the_config():
    assert clip_range(
        {"algorithm": {"policy_loss": "ppo_clip", "loss_args": {"clip_low": 0.2, "clip_high": 0.28}}}
    ) == pytest.approx((0.8, 1.28))
    assert clip_range({"algorithm": {"policy_loss": "ppo_clip"}}) == pytest.approx((0.8, 1.2))  # ppo_clip's default
    assert clip_range({"algorithm": {"policy_loss": "opmd", "loss_args": {"tau": 1.0}}}) is None
    assert clip_range({}) is None


def test_run_panels_thresholds_smoothing_and_names(tmp_path):
    from matplotlib.figure import Figure

    rows = [
        {
            "step": s,
            "success": (s % 4) / 4,
            "zero_variance_groups": 0.5,
            "clip_fraction": 0.01 * (s % 3),
            "ratio_mean": 1.0 + 0.01 * (s % 3 - 1),
            "kl": 0.001 * s,
            "approx_kl": 0.0,
            "rss_mib": 1000.0 + s,
            "peak_rss_mib": 1200.0,
            "grad_norm": 3.0,
            "loss": 0.1,
        }
        for s in range(1, 31)
    ]
    config = {
        "run": {"name": "seed3"},
        "algorithm": {"policy_loss": "ppo_clip", "loss_args": {"clip_low": 0.2}},
        "train": {"grad_clip": 1.0},
    }
    run_dir = tmp_path / "grpo" / "seed3"
    _write(run_dir, rows, config)
    names = {path.name for path in render_report(run_dir)}
    assert {"zero_variance.png", "kl.png", "clip_fraction.png", "ratio.png", "memory.png"} <= names
    assert run_name(run_dir) == "grpo/seed3" and run_name(tmp_path / "my-run") == "my-run"

    from r3l.logging.plots import _read_run_info

    info = _read_run_info(run_dir, rows)
    assert info.clip == pytest.approx((0.8, 1.2)) and info.grad_clip == 1.0 and info.name == "grpo/seed3"
    series = _series(rows)
    ax = Figure().add_subplot()
    _draw(ax, series, ["ratio_mean"], PANEL["ratio"], info=info)
    flat = sorted(line.get_ydata()[0] for line in ax.get_lines() if len(set(line.get_ydata())) == 1)
    assert flat == pytest.approx([0.8, 1.2])  # the clip range, dashed
    assert ax.get_title() == "grpo/seed3: importance ratio (new / old policy)"
    ax = Figure().add_subplot()
    _draw(ax, series, ["clip_fraction"], PANEL["clip_fraction"], info=info)
    assert "[0.80, 1.20]" in ax.get_title()
    ax = Figure().add_subplot()
    _draw(ax, series, ["success"], PANEL["success"], info=info)
    raw, smoothed = ax.get_lines()  # the per-step points, and over them the moving average
    assert list(raw.get_ydata()) == series["success"][1] and raw.get_alpha() < 1
    assert _same(list(smoothed.get_ydata()), smooth(series["success"][1], smoothing_window(30)))
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    # flat at a value that says nothing (on-policy: no clipping, ratio 1; approx_kl 0): no panel
    flat_rows = [{**row, "clip_fraction": 0.0, "ratio_mean": 1.0} for row in rows]
    chosen = dict(choose_panels(_series(flat_rows))[0])
    assert PANEL["clip_fraction"] not in chosen and PANEL["ratio"] not in chosen and chosen[PANEL["kl"]] == ["kl"]


def test_no_update_steps_are_shaded_on_update_panels():
    from matplotlib.figure import Figure

    rows = [
        {"step": s, "loss": 0.0 if s == 2 else 0.1, "grad_norm": 0.0 if s == 2 else 1.0, "success": 0.5}
        for s in range(1, 4)
    ]
    series = _series(rows)
    info = RunInfo(no_update=no_update_steps(rows))
    ax = Figure().add_subplot()
    _draw(ax, series, ["loss"], PANEL["loss"], info=info)
    assert len(ax.patches) == 1 and ax.patches[0].get_x() == pytest.approx(1.5)  # step 2, shaded
    assert any("no learning signal" in text.get_text() for text in ax.get_legend().get_texts())
    ax = Figure().add_subplot()
    _draw(ax, series, ["success"], PANEL["success"], info=info)
    assert not ax.patches  # the rollout of step 2 happened
