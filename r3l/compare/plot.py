"""The comparison's plot. Held-out success before and after training per config, as a dumbbell (two markers
with their 95% Wilson intervals, seeds pooled; never a line over training steps, which two evaluations cannot
show); and, where runs evaluated during training (`eval.every`), the curve through those real evaluations."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3l.compare.stats import Counts, estimate, pooled, pooled_before
from r3l.compare.summary import RunResult

Estimate = tuple[float, float, float]  # (success, low, high); low and high NaN when the counts are unknown


@dataclass
class Dumbbell:
    before: Estimate | None
    after: Estimate | None
    per_seed: list[float] = field(default_factory=list)  # each finished seed's success after training
    steps: int = 0


def dumbbells(results: Sequence[RunResult]) -> dict[str, Dumbbell]:
    """Per config, over its finished seeds: success before and after training (pooled, 95% Wilson); for a config
    whose runs tried twice (R3's evaluations), a second entry "<label>, 2nd try" for the try after a reflection."""
    out: dict[str, Dumbbell] = {}
    for label in dict.fromkeys(r.label for r in results):
        runs = [r for r in results if r.label == label and r.final is not None]
        steps = max((r.steps for r in runs), default=0)
        out[label] = dumbbell(
            [(r.before, r.before_counts) for r in runs], [(r.final, r.final_counts) for r in runs], steps
        )
        if any(r.second_final is not None for r in runs):
            out[f"{label}, 2nd try"] = dumbbell(
                [(r.second_before, r.second_before_counts) for r in runs],
                [(r.second_final, r.second_final_counts) for r in runs],
                steps,
            )
    return out


def dumbbell(
    befores: Sequence[tuple[float | None, Counts | None]],
    afters: Sequence[tuple[float | None, Counts | None]],
    steps: int,
) -> Dumbbell:
    """Before and after, each pooled over the runs that have it."""
    before = [(value, counts) for value, counts in befores if value is not None]
    after = [(value, counts) for value, counts in afters if value is not None]
    return Dumbbell(
        estimate([v for v, _ in before], [c for _, c in before], pooled_before),
        estimate([v for v, _ in after], [c for _, c in after], pooled),
        [v for v, _ in after],
        steps,
    )


def wrapped(label: str, width: int) -> str:
    """The label in lines of at most `width` characters where it can break: after an underscore, at a space
    (a run name is one long word otherwise, and neighbouring tick labels overlap)."""
    lines: list[str] = []
    for piece in re.findall(r"[^_ ]*(?:_|\s+|$)", label):
        if not piece:
            continue
        if lines and len(lines[-1].rstrip() + piece.rstrip()) <= width:
            lines[-1] += piece
        else:
            lines.append(piece.lstrip())
    return "\n".join(line.rstrip() for line in lines)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def curves(results: Sequence[RunResult]) -> dict[str, list[tuple[int, float, float, float, int]]]:
    """Per config whose runs evaluated during training: (step, success, low, high, seeds) at each step any of
    its runs evaluated at, the evaluations before and after included; pooled over the seeds that evaluated
    there. Configs without an evaluation during training have no curve (before and after alone are no curve)."""
    by_label: dict[str, dict[int, list[tuple[float, Counts | None]]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if not result.intermediate():
            continue
        for step, value in result.curve:
            by_label[result.label][step].append((value, result.counts.get(step)))
    out = {}
    for label, steps in by_label.items():
        points = []
        for step, evaluations in sorted(steps.items()):
            point = estimate(
                [v for v, _ in evaluations], [c for _, c in evaluations], pooled_before if step == 0 else pooled
            )
            assert point is not None  # there is an evaluation at every step listed
            points.append((step, *point, len(evaluations)))
        out[label] = points
    return out


def plot(results: Sequence[RunResult], path: Path) -> Path:
    figure(results).savefig(path, dpi=120)
    return path


def figure(results: Sequence[RunResult]) -> Any:
    """The dumbbell panel, and beside it the curve panel when a config evaluated during training."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    bells, lines = dumbbells(results), curves(results)
    fig = Figure(figsize=(12.5 if lines else 7.5, 4.8), layout="constrained")
    axes = fig.subplots(1, 2 if lines else 1, squeeze=False)[0]
    colours = {label: f"C{i}" for i, label in enumerate(bells)}

    ax = axes[0]
    for x, (label, bell) in enumerate(bells.items()):
        colour = colours[label]
        for at, point, face in [(x - 0.15, bell.before, "white"), (x + 0.15, bell.after, colour)]:
            if point is None:
                continue
            centre, low, high = point
            error = [[centre - low], [high - centre]] if math.isfinite(low) else None
            ax.errorbar(
                [at],
                [centre],
                yerr=error,
                fmt="o",
                markersize=8,
                color=colour,
                markerfacecolor=face,
                markeredgewidth=1.5,
                capsize=4,
                zorder=3,
            )
            ax.annotate(
                f"{centre:.3f}",
                (at, low if math.isfinite(low) else centre),
                textcoords="offset points",
                xytext=(0, -6),
                ha="center",
                va="top",
                fontsize="small",
            )
        ax.plot(
            [x + 0.3] * len(bell.per_seed),
            bell.per_seed,
            linestyle="none",
            marker="o",
            markersize=3.5,
            color="black",
            alpha=0.6,
            zorder=4,
        )
        if bell.before is not None and bell.after is not None:
            top = max(v for e in (bell.before, bell.after) for v in e if math.isfinite(v))
            ax.annotate(
                f"change {bell.after[0] - bell.before[0]:+.3f}",
                (x, min(top + 0.03, 0.97)),
                ha="center",
                va="bottom",
                fontsize="small",
                color=colour,
            )
    ax.set_xticks(
        range(len(bells)),
        [
            f"{wrapped(label, max(12, 84 // len(bells)))}\n({plural(len(b.per_seed), 'seed')}, {b.steps} steps)"
            for label, b in bells.items()
        ],
        fontsize="small",
    )
    ax.set_xlim(-0.6, len(bells) - 0.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("held-out success")
    ax.set_title("held-out success before and after training\n(95% Wilson interval, seeds pooled)", fontsize="medium")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(
        handles=[
            Line2D(
                [], [], linestyle="none", marker="o", markerfacecolor="white", color="grey", label="before training"
            ),
            Line2D([], [], linestyle="none", marker="o", color="grey", label="after training"),
            Line2D(
                [], [], linestyle="none", marker="o", markersize=3.5, color="black", alpha=0.6, label="one seed, after"
            ),
        ],
        fontsize="small",
        loc="best",
    )

    if lines:
        ax = axes[1]
        for label, points in lines.items():
            steps = [p[0] for p in points]
            ax.plot(steps, [p[1] for p in points], marker="o", color=colours[label], label=label)
            ax.fill_between(steps, [p[2] for p in points], [p[3] for p in points], color=colours[label], alpha=0.2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training step")
        ax.set_ylabel("held-out success")
        ax.set_title(
            "held-out success at each evaluation during training\n(eval.every; band: 95% Wilson, seeds pooled)",
            fontsize="medium",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig
