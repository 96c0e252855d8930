"""Metrics sinks, report plots and the progress printer."""

import builtins
import io
import json
import math

import pytest
from rich.console import Console

from r3l.errors import UserError
from r3l.logging import MetricsLogger, TrainProgress, read_metrics, render_report
from r3l.logging.plots import _series, choose_panels
from r3l.logging.progress import summarize


def test_metrics_logger_writes_jsonl_and_tensorboard(tmp_path):
    logger = MetricsLogger(tmp_path)
    logger.log(1, {"reward": 0.5, "loss": float("nan"), "n": 3})
    logger.log(2, {"success": 1.0}, prefix="eval")
    # flushed per line: readable before close
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    logger.close()

    rows = read_metrics(tmp_path)
    assert rows[0]["reward"] == 0.5 and rows[0]["loss"] is None and rows[0]["n"] == 3
    assert rows[0]["nonfinite"] == ["loss"] and "nonfinite" not in rows[1]  # null, and said so
    assert rows[1]["eval/success"] == 1.0
    assert all(isinstance(r["time"], float) for r in rows)
    assert "NaN" not in (tmp_path / "metrics.jsonl").read_text()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_keeps_nonfinite_values(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path) as logger:
        logger.log(1, {"grad_norm": float("inf"), "loss": float("nan"), "reward": 0.25})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Scalars("grad_norm")[0].value == math.inf
    assert math.isnan(events.Scalars("loss")[0].value) and events.Scalars("reward")[0].value == 0.25


def test_progress_line_shows_nonfinite_updates_only_when_there_are_some():
    assert "non-finite" not in summarize({"reward": 0.5, "nonfinite_updates": 0.0})
    assert summarize({"reward": 0.5, "nonfinite_updates": 2.0}) == "reward 0.5 | non-finite updates 2"


def test_read_metrics_tolerates_truncated_last_line(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(1, {"reward": 1.0})
        logger.log(2, {"reward": 0.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "time": 1.0, "rew')
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert not (tmp_path / "tensorboard").exists()


def test_wandb_missing_is_a_user_error(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(UserError, match="pip install 'r3l\\[wandb\\]'"):
        MetricsLogger(tmp_path, tensorboard=False, wandb={"project": "p", "mode": "offline"})


def _write_rows(run_dir, rows):
    with open(run_dir / "metrics.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_render_report_writes_panels(tmp_path):
    rows = []
    for step in range(1, 6):
        rows.append(
            {
                "step": step,
                "time": 100.0 + step,
                "reward_mean": step / 5,
                "success_rate": step / 10,
                "policy_loss": 1 / step,
                "kl": 0.001 * step,
                "entropy": 1.0,
                "rollout/tokens_per_s": 900.0,
                "train/tokens_per_s": 2000.0,
                "grad_norm": None if step == 3 else 0.5,
                "lr": 1e-6,
                "response_length": 120 + step,
            }
        )
        if step % 2 == 0:
            rows.append({"step": step, "time": 100.0 + step, "eval/success": 0.3})
    _write_rows(tmp_path, rows)
    (tmp_path / "bench.json").write_text(
        json.dumps(
            {
                "hf": {"tokens_per_s": 100.0},
                "vllm": {"tokens_per_s": 900.0, "note": "x"},
                "speedup_ratio": 9.0,
                "flag": True,
                "runs": [{"ratio": 1.5}],
            }
        )
    )

    paths = render_report(tmp_path)

    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "reward.png",
            "success.png",
            "loss.png",
            "kl.png",
            "entropy.png",
            "tokens_per_s.png",
            "grad_norm.png",
            "lr.png",
            "response_length.png",
            "overview.png",
            "bench.png",
            "held_out.png",
        ]
    )
    for p in paths:
        assert p.parent == tmp_path / "plots"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_panels_label_axes_keep_held_out_points_apart_and_skip_flat_zero(tmp_path):
    from matplotlib.figure import Figure

    from r3l.logging.panels import PANELS
    from r3l.logging.plots import _draw, _series

    rows = [
        {"step": s, "success": s / 10, "approx_kl": 0.0, "train_tokens_per_s": 20000.0 if s == 4 else 900.0 + s}
        for s in range(1, 11)
    ]
    rows += [{"step": 0, "eval/success": 0.2}, {"step": 10, "eval/success": 0.4}]
    series = _series(rows)
    panels = {panel.name: panel for panel in PANELS}
    assert not panels["success"].matches("eval/success") and panels["held_out"].matches("eval/success")
    ax = Figure().add_subplot()
    _draw(ax, series, ["eval/success"], panels["held_out"])
    assert ax.get_ylabel() == "held-out success" and ax.get_lines()[0].get_linestyle() == "None"
    ax = Figure().add_subplot()
    _draw(ax, series, ["train_tokens_per_s"], panels["tokens_per_s"])
    assert ax.get_ylim()[1] < 5000  # the one spike does not flatten the other nine steps
    _write_rows(tmp_path, rows)
    names = {p.name for p in render_report(tmp_path)}
    assert "kl.png" not in names and {"success.png", "held_out.png", "tokens_per_s.png"} <= names


def test_render_report_skips_absent_panels(tmp_path):
    _write_rows(tmp_path, [{"step": 1, "time": 1.0, "reward": 0.1}, {"step": 2, "time": 2.0, "reward": 0.2}])
    (tmp_path / "bench.json").write_text("{not json")
    with pytest.warns(UserWarning, match="bench.json"):
        names = sorted(p.name for p in render_report(tmp_path))
    assert names == ["overview.png", "reward.png"]


def test_render_report_without_metrics_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no metrics.jsonl in"):
        render_report(tmp_path)


def test_train_progress_disabled_prints_step_lines():
    out = io.StringIO()
    con = Console(file=out, force_terminal=True, width=200)
    with TrainProgress(total_steps=4, start_step=1, enabled=False, console=con) as progress:
        progress.update(2, {"reward": 0.25, "success_rate": 0.5, "rollout/tokens_per_s": 1534.2})
        progress.update(3, {"loss": math.nan})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("step 2/4 | reward 0.25 | success 0.5 | tok/s 1,534 | eta ")
    assert lines[1].startswith("step 3/4 | eta ")


def test_train_progress_not_a_tty_prints_to_stderr(capsys):
    with TrainProgress(total_steps=2) as progress:  # shared console; capsys is not a TTY
        progress.update(1, {"reward": 1.0, "eval/success": 0.75})
    err = capsys.readouterr().err
    assert "step 1/2 | reward 1 | eval success 0.75 | eta" in err


def test_summarize_prefers_train_metrics_over_eval():
    assert summarize({"eval/reward": 0.9, "train/reward": 0.1}) == "reward 0.1"


def test_train_progress_live_bar_runs():
    out = io.StringIO()
    con = Console(file=out, force_terminal=True, width=120)
    with TrainProgress(total_steps=3, console=con) as progress:
        for step in range(1, 4):
            progress.update(step, {"reward": 0.5, "tokens_per_s": 10.0})
    assert "3/3" in out.getvalue()


def test_r3l_reflection_panel_and_pivot_histogram(tmp_path):
    from r3l.logging.plots import _series, pivot_histogram

    rows = [
        {"step": 1, "valid_report_rate": 0.5, "retry_success": 0.25, "pivot_count/0": 2.0, "pivot_count/3": 1.0},
        {"step": 2, "valid_report_rate": 0.75, "retry_success": 0.5, "pivot_count/3": 2.0, "pivot_count/12": 1.0},
    ]
    _write_rows(tmp_path, rows)
    assert pivot_histogram(_series(rows)) == {0: 2.0, 3: 3.0, 12: 1.0}
    names = {p.name for p in render_report(tmp_path)}
    assert {"reflection.png", "pivots.png"} <= names


def test_the_guards_have_panels_of_their_own_in_the_report(tmp_path):
    """An update that changed almost nothing, a log-prob gap on one kind of token and a drifted LoRA base each
    show in a panel of their own (update/lr_over_weight_rms is not a learning rate)."""
    rows = [
        {
            "step": step,
            "time": 100.0 + step,
            "lr": 1e-6,
            "update/changed_share": 0.02,
            "update/relative_rms": 1e-5,
            "update/lr_over_weight_rms": 5e-5,
            "generator_logprob_gap/base": 0.0004,
            "generator_logprob_gap/reflection": 0.02 if step > 2 else 0.0004,
            "lora/base_changed": 0.0,
        }
        for step in range(1, 5)
    ]
    _write_rows(tmp_path, rows)
    names = {p.name for p in render_report(tmp_path)}
    assert {"update_changed.png", "update_rms.png", "logprob_gap.png", "lora_base.png", "lr.png"} <= names
    chosen = {panel.name: keys for panel, keys in choose_panels(_series(read_metrics(tmp_path)))[0]}
    assert chosen["lr"] == ["lr"]
    assert chosen["logprob_gap"] == ["generator_logprob_gap/base", "generator_logprob_gap/reflection"]
