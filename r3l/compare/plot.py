"""The comparison's plot: held-out success against step, per config the mean over seeds and its range."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Sequence

from r3l.compare.summary import RunResult


def curves(results: Sequence[RunResult]) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per config: (step, mean, min, max) over the seeds that evaluated at that step."""
    by_label: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for step, value in result.curve:
            by_label[result.label][step].append(value)
    return {label: [(step, mean(v), min(v), max(v)) for step, v in sorted(steps.items())]
            for label, steps in by_label.items()}


def plot(results: Sequence[RunResult], path: Path) -> Path:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    for label, points in curves(results).items():
        steps = [p[0] for p in points]
        line, = axes.plot(steps, [p[1] for p in points], marker="o", label=label)
        axes.fill_between(steps, [p[2] for p in points], [p[3] for p in points], color=line.get_color(), alpha=0.2)
    axes.set_xlabel("training step")
    axes.set_ylabel("held-out success (mean over seeds; band: min-max)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path
