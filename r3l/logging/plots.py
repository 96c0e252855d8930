"""Render a run directory's metrics.jsonl (and bench.json, if any) as PNG plots under run_dir/plots/.

One panel per kind of quantity (which key goes where: r3l/logging/panels.py), each on its own axis (held-out
success with its Wilson intervals from the run's eval_*.json, never beside seconds or counts); per-step values
faint with a moving average over them; a step without an update (dropped as non-finite, or without a learning
signal) a gap and a shaded band, not a 0; the clip thresholds of the run's config.yaml drawn where they apply; the
run's name in the titles. The maths are small pure functions (smooth, no_update_steps, held_out_intervals,
clip_range, choose_panels); drawing is _draw."""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r3l.errors import UserError
from r3l.logging.panels import PANELS, Panel, held_out, held_out_success, success_rate, update_key
from r3l.logging.sinks import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

BENCH_FILE = "bench.json"
PLOTS_DIR = "plots"


Series = dict[str, tuple[list[float], list[float]]]  # key -> (steps, values)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _eval_row(row: dict) -> bool:
    """A held-out evaluation's row: every metric in it is an eval/ one."""
    keys = [k for k in row if k not in ("step", "time", "nonfinite")]
    return bool(keys) and all(held_out(k) for k in keys)


def merged_rows(rows: list[dict]) -> list[dict]:
    """One row per (step, training or evaluation), in step order: a resume after a crash logs the steps since
    its checkpoint again, and the later value of a key wins."""
    merged: dict[tuple[float, bool], dict] = {}
    for row in rows:
        step = _number(row.get("step"))
        if step is None:
            continue
        merged.setdefault((step, _eval_row(row)), {}).update(row)
    return [row for _, row in sorted(merged.items(), key=lambda item: item[0])]


def no_update_steps(rows: list[dict]) -> dict[float, str]:
    """Training steps whose optimizer step measured nothing, with why: "dropped" (a non-finite loss or
    gradient norm, logged as null; nothing was applied) or "no signal" (no token trained, or every advantage 0:
    the loss and gradient norm are 0 by construction)."""
    out: dict[float, str] = {}
    for row in rows:
        if _eval_row(row) or _number(row.get("step")) is None:
            continue
        nonfinite = set(row.get("nonfinite") or [])
        if (
            row.get("nonfinite_update")
            or nonfinite & {"loss", "grad_norm"}
            or any(key in row and row[key] is None for key in ("loss", "grad_norm"))
        ):
            out[float(row["step"])] = "dropped"
        elif row.get("skipped") or row.get("trained_tokens") == 0 or row.get("grad_norm") == 0:
            out[float(row["step"])] = "no signal"
    return out


def _series(rows: list[dict]) -> Series:
    """Per metric key, its (step, value) pairs. A training metric has a value at every training step: NaN (a
    gap in the line) where it is null, absent, or measured an update that did not happen. A held-out metric
    has its evaluations' steps only."""
    rows = merged_rows(rows)
    skipped = no_update_steps(rows)
    training = [row for row in rows if not _eval_row(row)]
    out: Series = {}
    for row in rows:
        for key, value in row.items():
            if key in ("step", "time") or (value is not None and _number(value) is None):
                continue
            if held_out(key):
                steps, values = out.setdefault(key, ([], []))
                steps.append(float(row["step"]))
                values.append(math.nan if value is None else float(value))
            elif key not in out:
                steps = [float(r["step"]) for r in training]
                values = [
                    math.nan
                    if (_number(r.get(key)) is None or (update_key(key) and float(r["step"]) in skipped))
                    else float(r[key])
                    for r in training
                ]
                out[key] = (steps, values)
    # keys that are only ever null carry nothing to draw; a loss or gradient norm of a run without a single update
    # is drawn all the same: an empty panel, shaded where the updates were dropped or had no signal
    return {k: v for k, v in out.items() if any(math.isfinite(x) for x in v[1]) or (update_key(k) and skipped)}


def same_series(series: Series, a: str, b: str) -> bool:
    """Whether two metrics logged the same value at every step (reward and success on a binary reward)."""
    (steps_a, values_a), (steps_b, values_b) = series[a], series[b]
    return steps_a == steps_b and all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(values_a, values_b))


def smoothing_window(points: int) -> int:
    """Steps in the moving average: about a seventh of the run, odd, 5 to 25; none below 10 points."""
    if points < 10:
        return 1
    return min(25, max(5, (points // 7) | 1))


def smooth(values: list[float], window: int) -> list[float]:
    """Centred moving average over the finite values within window // 2 steps either side (fewer at the ends);
    NaN where the value itself is NaN, so a gap stays a gap."""
    half = window // 2
    out = []
    for i, value in enumerate(values):
        near = [v for v in values[max(0, i - half) : i + half + 1] if math.isfinite(v)]
        out.append(sum(near) / len(near) if math.isfinite(value) else math.nan)
    return out


def clip_range(config: dict) -> tuple[float, float] | None:
    """(lower, upper) bound of the importance ratio a ppo_clip loss clips at, from a run's config; None for a
    loss without clipping."""
    algorithm = config.get("algorithm") or {}
    if algorithm.get("policy_loss") != "ppo_clip":
        return None
    args = algorithm.get("loss_args") or {}
    return 1 - float(args.get("clip_low", 0.2)), 1 + float(args.get("clip_high", 0.2))  # ppo_clip's defaults


def held_out_intervals(records: list[dict]) -> dict[str, dict[float, tuple[float, float]]]:
    """Per held-out metric, step -> its 95% interval, from the run's eval_*.json records (one attempt: ci95;
    two attempts: first_try and second_try)."""
    out: dict[str, dict[float, tuple[float, float]]] = {}
    for record in records:
        step = _number(record.get("step"))
        if step is None:
            continue
        for key, part in (
            ("eval/success", record),
            ("eval/success", record.get("first_try")),
            ("eval/second_try_success", record.get("second_try")),
        ):
            interval = (part or {}).get("ci95")
            if isinstance(interval, list) and len(interval) == 2 and all(_number(v) is not None for v in interval):
                out.setdefault(key, {})[step] = (float(interval[0]), float(interval[1]))
    return out


def run_name(run_dir: Path) -> str:
    """The run's folder name; a seed folder of a comparison (seed0) is named with its config (grpo/seed0)."""
    run_dir = Path(run_dir).resolve()
    if re.fullmatch(r"seed\d+", run_dir.name) and run_dir.parent.name:
        return f"{run_dir.parent.name}/{run_dir.name}"
    return run_dir.name


@dataclass
class RunInfo:
    """What the plots take from the run besides its metrics."""

    name: str = ""
    clip: tuple[float, float] | None = None  # the ratio's clip range
    grad_clip: float | None = None
    intervals: dict[str, dict[float, tuple[float, float]]] = field(default_factory=dict)
    no_update: dict[float, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # panel name -> a remark added to its title


def _read_run_info(run_dir: Path, rows: list[dict]) -> RunInfo:
    import yaml

    config: dict = {}
    path = run_dir / "config.yaml"
    if path.is_file():
        try:
            config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, ValueError, yaml.YAMLError) as e:
            warnings.warn(f"skipping {path}: not readable YAML ({e}); no clip thresholds drawn", stacklevel=3)
    if not isinstance(config, dict):
        config = {}
    records = []
    for path in sorted(run_dir.glob("eval_*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            records.append(record)
    grad_clip = _number((config.get("train") or {}).get("grad_clip"))
    return RunInfo(
        run_name(run_dir),
        clip_range(config),
        grad_clip if grad_clip and grad_clip > 0 else None,
        held_out_intervals(records),
        no_update_steps(merged_rows(rows)),
    )


def _shade_no_update(ax: Any, no_update: dict[float, str]) -> list[Any]:
    from matplotlib.patches import Patch

    colours = {"no signal": "grey", "dropped": "red"}
    labels = {"no signal": "no learning signal (advantages all 0)", "dropped": "update dropped (non-finite)"}
    for step, why in no_update.items():
        ax.axvspan(step - 0.5, step + 0.5, color=colours[why], alpha=0.15, linewidth=0)
    return [Patch(color=colours[why], alpha=0.3, label=labels[why]) for why in sorted(set(no_update.values()))]


def _draw(
    ax: Any,
    series: Series,
    keys: list[str],
    panel: Panel,
    legend_size: str = "small",
    info: RunInfo | None = None,
    with_name: bool = True,
) -> None:
    info = info or RunInfo()
    extra = []  # legend entries besides the metrics
    for index, key in enumerate(keys):
        steps, values = series[key]
        colour = f"C{index % 10}"
        if held_out(key):  # a few greedy evaluations: points with their interval
            intervals = info.intervals.get(key, {})
            error = [
                [v - intervals[s][0] if s in intervals else 0.0 for s, v in zip(steps, values)],
                [intervals[s][1] - v if s in intervals else 0.0 for s, v in zip(steps, values)],
            ]
            ax.errorbar(
                steps,
                values,
                yerr=error if intervals else None,
                label=key,
                linestyle="none",
                marker="D",
                markersize=6,
                color=colour,
                capsize=4,
            )
            if len(steps) >= 3 and panel.name == "held_out":  # evaluations during training: a real curve
                ax.plot(steps, values, linestyle=":", color=colour, linewidth=1)
            for step, value in zip(steps, values):
                if math.isfinite(value):
                    ax.annotate(
                        f"{value:.3f}", (step, value), textcoords="offset points", xytext=(5, 5), fontsize="x-small"
                    )
            continue
        finite = sum(math.isfinite(v) for v in values)
        window = smoothing_window(finite) if panel.smooth else 1
        if window > 1:
            ax.plot(steps, values, color=colour, alpha=0.35, linewidth=0.8, marker="o", markersize=2.5)
            ax.plot(steps, smooth(values, window), color=colour, linewidth=2, label=key)
        else:
            ax.plot(steps, values, color=colour, label=key, marker="o", markersize=3 if len(steps) <= 60 else 1.5)
    if panel.update and info.no_update:
        extra += _shade_no_update(ax, info.no_update)
    if panel.name == "ratio" and info.clip:
        for bound in info.clip:
            ax.axhline(bound, color="red", linestyle="--", linewidth=1)
        extra.append(_line_entry("red", "--", f"clip range [{info.clip[0]:.2f}, {info.clip[1]:.2f}]"))
    if panel.name == "grad_norm" and info.grad_clip:
        ax.axhline(info.grad_clip, color="red", linestyle="--", linewidth=1)
        extra.append(_line_entry("red", "--", f"clipped to {info.grad_clip:g}"))
    if panel.robust_scale:
        _robust_ylim(ax, [v for key in keys for v in series[key][1]])
    if panel.unit_range:
        ax.set_ylim(-0.02, 1.02)
    elif panel.from_zero:
        top = max((v for key in keys for v in series[key][1] if math.isfinite(v)), default=0.0)
        ax.set_ylim(0.0, top * 1.1 if top > 0 else 1.0)
    title = panel.title
    if panel.name == "clip_fraction" and info.clip:
        title += f": ratio outside [{info.clip[0]:.2f}, {info.clip[1]:.2f}]"
    if panel.name in info.notes:
        title += f" ({info.notes[panel.name]})"
    ax.set_title(f"{info.name}: {title}" if with_name and info.name else title, fontsize="medium")
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    smoothed = any(
        panel.smooth and not held_out(k) and smoothing_window(sum(math.isfinite(v) for v in series[k][1])) > 1
        for k in keys
    )
    ax.legend(
        handles=handles + extra,
        fontsize=legend_size,
        title="faint: per step; bold: moving average" if smoothed else None,
        title_fontsize=legend_size,
    )


def _line_entry(colour: str, style: LineStyleType, label: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, linestyle=style, linewidth=1, label=label)


def _robust_ylim(ax: Any, values: list[float]) -> None:
    """Cap the y-axis at twice the 90th percentile when a few spikes would otherwise flatten the rest."""
    finite = sorted(v for v in values if math.isfinite(v))
    if len(finite) < 5:
        return
    high = finite[int(0.9 * (len(finite) - 1))]
    if high > 0 and finite[-1] > 2 * high:
        ax.set_ylim(bottom=min(0.0, finite[0]), top=2 * high)


def _all_equal(series: Series, key: str, value: float) -> bool:
    return all(v == value for v in series[key][1] if math.isfinite(v))


def choose_panels(series: Series) -> tuple[list[tuple[Panel, list[str]]], dict[str, str]]:
    """The panels to draw with their metrics, and remarks for their titles. A panel with no metric is left
    out, as is a metric flat at a value that says nothing (KL 0 with KL off, the on-policy ratio 1) and a
    reward identical to a success rate (a binary reward): drawn once, on the success panel."""
    notes: dict[str, str] = {}
    chosen = []
    success_keys = sorted(k for k in series if success_rate(k))
    for panel in PANELS:
        keys = sorted(
            k
            for k in series
            if panel.matches(k)
            and not (panel.hide_zero and _all_equal(series, k, 0.0))
            and not (panel.hide_one and _all_equal(series, k, 1.0))
        )
        if panel.name in ("reward", "held_out_reward"):
            against = success_keys if panel.name == "reward" else sorted(k for k in series if held_out_success(k))
            same = [k for k in keys if any(same_series(series, k, s) for s in against)]
            if same:
                keys = [k for k in keys if k not in same]
                notes["success" if panel.name == "reward" else "held_out"] = "the reward is the same curve"
        if keys:
            chosen.append((panel, keys))
    return chosen, notes


def _new_figure(width: float, height: float) -> Any:
    # The object-oriented API renders with Agg and never touches pyplot's global backend state.
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _flatten_numbers(obj: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, list):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        num = _number(obj)
        if num is not None and math.isfinite(num) and prefix:
            out[prefix] = num
        return out
    for k, v in items:
        out.update(_flatten_numbers(v, f"{prefix}/{k}" if prefix else k))
    return out


def _render_bench(bench_path: Path, out_dir: Path) -> Path | None:
    """Bar charts of bench.json's numeric entries whose key path holds 'ratio' or 'tokens_per_s'."""
    try:
        data = json.loads(bench_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        warnings.warn(f"skipping {bench_path}: not readable JSON ({e})", stacklevel=2)
        return None
    flat = _flatten_numbers(data)
    groups = {
        "ratio": {k: v for k, v in flat.items() if "ratio" in k.lower()},
        "tokens/s": {k: v for k, v in flat.items() if "tokens_per_s" in k.lower() and "ratio" not in k.lower()},
    }
    groups = {name: entries for name, entries in groups.items() if entries}
    if not groups:
        return None
    heights = [0.4 * len(entries) + 1.2 for entries in groups.values()]
    fig = _new_figure(8, sum(heights))
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (name, entries) in zip(axes, groups.items()):
        labels, values = list(entries), list(entries.values())
        bars = ax.barh(range(len(values)), values)
        ax.set_yticks(range(len(values)), labels, fontsize="small")
        ax.invert_yaxis()
        ax.bar_label(bars, fmt="%.3g", fontsize="small", padding=2)
        if name == "ratio":
            ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_title(f"bench: {name}")
        ax.grid(True, axis="x", alpha=0.3)
    path = out_dir / "bench.png"
    fig.savefig(path, dpi=100)
    return path


def pivot_histogram(series: Series) -> dict[int, float]:
    """Retries per pivot (the step a retry restarted from), summed over the run's steps."""
    counts = {
        int(key.split("/", 1)[1]): sum(v for v in values if math.isfinite(v))
        for key, (_, values) in series.items()
        if key.startswith("pivot_count/")
    }
    return dict(sorted(counts.items()))


def _render_pivots(series: Series, out_dir: Path) -> Path | None:
    counts = pivot_histogram(series)
    if not counts:
        return None
    fig = _new_figure(7, 4)
    ax = fig.add_subplot()
    bars = ax.bar(list(counts), list(counts.values()))
    ax.bar_label(bars, fmt="%.0f", fontsize="small")
    ax.set_title("R3L: where retries restarted (pivot histogram, whole run)")
    ax.set_xlabel("pivot (environment step the retry restarts from)")
    ax.set_ylabel("retries")
    ax.grid(True, axis="y", alpha=0.3)
    path = out_dir / "pivots.png"
    fig.savefig(path, dpi=100)
    return path


def render_report(run_dir: Path) -> list[Path]:
    """Write one PNG per available panel, overview.png (all panels) and bench.png into run_dir/plots/.

    Panels whose metrics are absent are skipped. Returns the paths written.
    """
    run_dir = Path(run_dir)
    metrics_path = run_dir / METRICS_FILE
    bench_path = run_dir / BENCH_FILE
    if not metrics_path.is_file() and not bench_path.is_file():
        raise UserError(f"no {METRICS_FILE} in {run_dir}; pass a run directory written by `r3l train`")

    out_dir = run_dir / PLOTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    if metrics_path.is_file():
        rows = read_metrics(run_dir)
        series = _series(rows)
        info = _read_run_info(run_dir, rows)
        available, info.notes = choose_panels(series)
        drawn = {panel.name for panel, _ in available}
        for panel in PANELS:  # a panel an earlier report drew but this one does not (a duplicate reward)
            if panel.name not in drawn:
                (out_dir / f"{panel.name}.png").unlink(missing_ok=True)
        for panel, keys in available:
            fig = _new_figure(7, 4)
            _draw(fig.add_subplot(), series, keys, panel, info=info)
            path = out_dir / f"{panel.name}.png"
            fig.savefig(path, dpi=100)
            written.append(path)
        if available:
            ncols = min(3, len(available))
            nrows = math.ceil(len(available) / ncols)
            fig = _new_figure(5.5 * ncols, 3.8 * nrows)
            axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
            for ax, (panel, keys) in zip(axes, available):
                _draw(ax, series, keys, panel, legend_size="x-small", info=info, with_name=False)
            for ax in axes[len(available) :]:
                ax.set_visible(False)
            fig.suptitle(f"run {info.name}", fontsize="x-large")
            path = out_dir / "overview.png"
            fig.savefig(path, dpi=100)
            written.append(path)

        pivots = _render_pivots(series, out_dir)
        if pivots is not None:
            written.append(pivots)

    if bench_path.is_file():
        bench_plot = _render_bench(bench_path, out_dir)
        if bench_plot is not None:
            written.append(bench_plot)
    return written
