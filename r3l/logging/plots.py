"""Render a run directory's metrics.jsonl (and bench.json, if any) as PNG plots under run_dir/plots/."""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from r3l.errors import UserError
from r3l.logging.sinks import METRICS_FILE, read_metrics

BENCH_FILE = "bench.json"
PLOTS_DIR = "plots"


def _tokens(key: str) -> list[str]:
    return [t for t in re.split(r"[/_.\-\s]+", key.lower()) if t]


def _held_out(key: str) -> bool:
    return key.startswith("eval/")


@dataclass(frozen=True)
class Panel:
    name: str  # file stem
    title: str
    ylabel: str
    matches: Callable[[str], bool]
    robust_scale: bool = False  # y-range from the bulk of the values, so rare spikes do not flatten the rest
    hide_zero: bool = False  # leave out metrics that are 0 at every step (KL with KL off, on-policy approx_kl)


PANELS: list[Panel] = [
    Panel("reward", "training reward (sampled)", "mean reward",
          lambda k: "reward" in k.lower() and not _held_out(k)),
    Panel("success", "training success (sampled)", "success rate",
          lambda k: "success" in k.lower() and not _held_out(k)),
    Panel("held_out", "held-out evaluation", "held-out value", _held_out),
    Panel("loss", "loss", "loss", lambda k: "loss" in k.lower()),
    Panel("kl", "KL", "KL", lambda k: any(re.fullmatch(r"kl\d*", t) for t in _tokens(k)), hide_zero=True),
    Panel("entropy", "entropy", "nats per token", lambda k: "entropy" in k.lower()),
    Panel("tokens_per_s", "tokens/s", "tokens per second",
          lambda k: any(s in k.lower() for s in ("tokens_per_s", "tokens/s", "tok_per_s")), robust_scale=True),
    Panel("grad_norm", "grad norm", "gradient norm (before clipping)",
          lambda k: any(s in k.lower() for s in ("grad_norm", "gradnorm", "grad/norm"))),
    Panel("lr", "learning rate", "learning rate", lambda k: "lr" in _tokens(k) or "learning_rate" in k.lower()),
    Panel("response_length", "response length", "tokens",
          lambda k: bool({"length", "len"} & set(_tokens(k))) or "response_len" in k.lower()),
    Panel("reflection", "R3L: reports, retries, pivots", "rate / mean",
          lambda k: k in ("valid_report_rate", "retry_success", "retry_improvement_rate", "pivot_relative_mean",
                          "pivot_zero_fraction", "retry_slots_unused")),
    Panel("termination", "how episodes ended", "share of episodes", lambda k: k.startswith("termination/")),
    Panel("hack_watch", "reward-hacking watch: rewarded answers that copy the prompt", "share of episodes",
          lambda k: k.endswith("hack/prompt_copies")),
    Panel("nonfinite", "non-finite updates (dropped)", "count", lambda k: k == "nonfinite_updates"),
]

Series = dict[str, tuple[list[float], list[float]]]  # key -> (steps, values)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _series(rows: list[dict]) -> Series:
    """Per metric key, the (step, value) pairs of the rows that carry it; null becomes NaN (a gap)."""
    out: Series = {}
    for row in rows:
        step = _number(row.get("step"))
        if step is None:
            continue
        for key, value in row.items():
            if key in ("step", "time"):
                continue
            num = math.nan if value is None else _number(value)
            if num is None:
                continue
            steps, values = out.setdefault(key, ([], []))
            steps.append(step)
            values.append(num)
    # keys that are only ever null carry nothing to draw
    return {k: v for k, v in out.items() if any(math.isfinite(x) for x in v[1])}


def _draw(ax: Any, series: Series, keys: list[str], panel: Panel, legend_size: str = "small") -> None:
    for key in keys:
        steps, values = series[key]
        if _held_out(key):  # a few greedy evaluations: points, never joined into a trend
            ax.plot(steps, values, label=key, linestyle="none", marker="D", markersize=6)
            for step, value in zip(steps, values):
                if math.isfinite(value):
                    ax.annotate(f"{value:.2f}", (step, value), textcoords="offset points", xytext=(4, 4),
                                fontsize="x-small")
        else:
            ax.plot(steps, values, label=key, marker="o" if len(steps) <= 20 else None, markersize=3)
    if panel.robust_scale:
        _robust_ylim(ax, [v for key in keys for v in series[key][1]])
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=legend_size)


def _robust_ylim(ax: Any, values: list[float]) -> None:
    """Cap the y-axis at twice the 90th percentile when a few spikes would otherwise flatten the rest."""
    finite = sorted(v for v in values if math.isfinite(v))
    if len(finite) < 5:
        return
    high = finite[int(0.9 * (len(finite) - 1))]
    if high > 0 and finite[-1] > 2 * high:
        ax.set_ylim(bottom=min(0.0, finite[0]), top=2 * high)


def _all_zero(series: Series, key: str) -> bool:
    return all(v == 0 for v in series[key][1] if math.isfinite(v))


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
    counts = {int(key.split("/", 1)[1]): sum(v for v in values if math.isfinite(v))
              for key, (_, values) in series.items() if key.startswith("pivot_count/")}
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
        series = _series(read_metrics(run_dir))
        available = [
            (panel, sorted(k for k in series if panel.matches(k) and not (panel.hide_zero and _all_zero(series, k))))
            for panel in PANELS
        ]
        available = [(panel, keys) for panel, keys in available if keys]
        for panel, keys in available:
            fig = _new_figure(7, 4)
            _draw(fig.add_subplot(), series, keys, panel)
            path = out_dir / f"{panel.name}.png"
            fig.savefig(path, dpi=100)
            written.append(path)
        if available:
            ncols = min(3, len(available))
            nrows = math.ceil(len(available) / ncols)
            fig = _new_figure(5 * ncols, 3.5 * nrows)
            axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
            for ax, (panel, keys) in zip(axes, available):
                _draw(ax, series, keys, panel, legend_size="x-small")
            for ax in axes[len(available):]:
                ax.set_visible(False)
            path = out_dir / "overview.png"
            fig.savefig(path, dpi=100)
            written.append(path)

        pivots = _render_pivots(series, out_dir)
        if pivots is not None:
            written.append(pivots)

    if bench_path.is_file():
        path = _render_bench(bench_path, out_dir)
        if path is not None:
            written.append(path)
    return written
