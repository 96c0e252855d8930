"""The comparison's plot. Held-out success before and after training per arm, as a dumbbell (two markers with
their 95% intervals over seeds and problems, each seed's final value beside; never a line over training steps,
which two evaluations cannot show); and, where runs evaluated during training (`eval.every`), the curve through
those real evaluations, against training steps, generated tokens or seconds (arms at equal cost side by side)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3l.compare.stats import Estimate, seed_level_interval
from r3l.compare.summary import MEASURES, RunResult
from r3l.compare.table import arms, before_estimate, outcome_table

X_LABELS = {"steps": "training step", "tokens": "generated tokens (cumulative)", "seconds": "wall seconds (cumulative)"}


@dataclass
class Dumbbell:
    before: Estimate | None
    after: Estimate | None
    per_seed: list[float] = field(default_factory=list)  # each finished seed's value after training
    steps: int = 0


def dumbbells(results: Sequence[RunResult]) -> dict[str, Dumbbell]:
    """Per arm with finished runs, before and after training over its seeds; an arm whose runs tried twice
    gets an entry per try ("<label>, 2nd try after a reflection", ...)."""
    out: dict[str, Dumbbell] = {}
    for arm in arms(results):
        if not arm.runs:
            continue
        for measure in arm.measures():
            after = arm.table(measure)
            before, _, _ = before_estimate(arm, measure)
            name = arm.label if measure == "first" else f"{arm.label}, {MEASURES[measure]}"
            out[name] = Dumbbell(
                before,
                seed_level_interval(after[0], rate=arm.rate()) if after else None,
                [value for r in arm.runs if (value := r.final(measure)) is not None],
                max(r.steps for r in arm.runs),
            )
    return out


def curves(results: Sequence[RunResult], x: str = "steps") -> dict[str, list[tuple[float, float, float, float, int]]]:
    """Per arm whose runs evaluated during training: (x, mean, low, high, seeds) at each step any of its runs
    evaluated at, before and after included (the evaluations after training as one point, wherever each run
    stopped); the interval over seeds and problems where every seed there has its evaluation problem by problem,
    the x the mean of the seeds' step or cost there. Arms without an evaluation
    during training have no curve (before and after alone are no curve)."""
    by_arm: dict[str, dict[float, list[tuple[RunResult, Any]]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if not result.intermediate():
            continue
        for point in result.curve:
            final = result.finished and point.step == result.steps  # a budget run's last step differs by seed
            by_arm[result.label][math.inf if final else point.step].append((result, point))
    out = {}
    for label, steps in by_arm.items():
        points = []
        for key, found in sorted(steps.items()):
            values = [p.value for _, p in found]
            evaluations = [r.evaluations[p.step] for r, p in found if p.step in r.evaluations]
            tables = [e.outcomes.get("first") for e in evaluations]
            rate = all(e.rate for e in evaluations)
            estimate = _estimate(tables, key == 0, rate) if len(tables) == len(found) and all(tables) else None
            low, high = (estimate.low, estimate.high) if estimate else (math.nan, math.nan)
            where = sum(getattr(p, x) if x != "steps" else p.step for _, p in found) / len(found)
            points.append((where, sum(values) / len(values), low, high, len(found)))
        out[label] = points
    return out


def _estimate(per_seed: list, untrained: bool, rate: bool) -> Estimate | None:
    table, problems = outcome_table(per_seed)
    if not problems:
        return None
    if untrained and all(seed == per_seed[0] for seed in per_seed):
        return seed_level_interval(table[:1], fixed_model=True, rate=rate)
    return seed_level_interval(table, rate=rate)


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


def plot(results: Sequence[RunResult], path: Path, x: str = "steps", metric: str = "success") -> Path:
    figure(results, x, metric).savefig(path, dpi=120)
    return path


def _dumbbell_panel(ax, bells: dict[str, Dumbbell], colours: dict[str, str], metric: str) -> None:
    from matplotlib.lines import Line2D

    for position, (label, bell) in enumerate(bells.items()):
        colour = colours[label]
        for at, point, face in [(position - 0.15, bell.before, "white"), (position + 0.15, bell.after, colour)]:
            if point is None:
                continue
            known = math.isfinite(point.low)
            error = [[point.mean - point.low], [point.high - point.mean]] if known else None
            ax.errorbar(
                [at],
                [point.mean],
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
                f"{point.mean:.3f}",
                (at, max(0.0, point.low) if known else point.mean),
                textcoords="offset points",
                xytext=(0, -6),
                ha="center",
                va="top",
                fontsize="small",
            )
        ax.plot(
            [position + 0.3] * len(bell.per_seed),
            bell.per_seed,
            linestyle="none",
            marker="o",
            markersize=3.5,
            color="black",
            alpha=0.6,
            zorder=4,
        )
        if bell.before is not None and bell.after is not None:
            ax.annotate(
                f"change {bell.after.mean - bell.before.mean:+.3f}",
                (position, 0.99),
                ha="center",
                va="top",
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
    ax.set_ylabel(f"held-out {metric}")
    ax.set_title(
        f"held-out {metric} before and after training\n(95% interval over seeds and problems)", fontsize="medium"
    )
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
        loc="lower left",
    )


def figure(results: Sequence[RunResult], x: str = "steps", metric: str = "success") -> Any:
    """The dumbbell panel, and beside it the curve panel when an arm evaluated during training."""
    from matplotlib.figure import Figure

    bells, lines = dumbbells(results), curves(results, x)
    fig = Figure(figsize=(12.5 if lines else 7.5, 4.8), layout="constrained")
    axes = fig.subplots(1, 2 if lines else 1, squeeze=False)[0]
    colours = {label: f"C{i}" for i, label in enumerate(dict.fromkeys([*bells, *lines]))}
    _dumbbell_panel(axes[0], bells, colours, metric)
    if lines:
        ax = axes[1]
        for label, points in lines.items():
            where = [p[0] for p in points]
            ax.plot(where, [p[1] for p in points], marker="o", color=colours[label], label=label)
            if all(math.isfinite(p[2]) for p in points):
                ax.fill_between(where, [p[2] for p in points], [p[3] for p in points], color=colours[label], alpha=0.2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(X_LABELS[x])
        ax.set_ylabel(f"held-out {metric}")
        ax.set_title(
            f"held-out {metric} at each evaluation during training\n(eval.every; band: 95% over seeds and problems)",
            fontsize="medium",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig
