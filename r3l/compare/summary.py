"""What finished runs of a comparison measured, and the table of it (one row per config)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r3l.compare.plan import RunSpec
from r3l.compare.stats import Counts, estimate, pooled, pooled_before

METRIC = "eval/success"
INTERVAL_NOTE = (
    "Intervals: 95% Wilson score intervals on the held-out successes pooled over seeds. The seeds share "
    "one held-out task set, so an interval reflects the tasks drawn, not the spread between seeds (see "
    "per seed). Before: every seed starts from the same model; identical evaluations count once."
)


@dataclass
class RunResult:
    label: str
    seed: int
    final: float | None  # held-out success after training (None: the run has not finished)
    steps: int = 0
    seconds: float = 0.0
    generated_tokens: float = 0.0
    trained_tokens: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success), every evaluation
    final_counts: Counts | None = None  # (successes, tasks) of the evaluation after training
    before: float | None = None  # held-out success before training
    before_counts: Counts | None = None
    counts: dict[int, Counts] = field(default_factory=dict)  # step -> (successes, tasks), from eval_*.json
    # R3's second try after a reflection (runs evaluated with eval.attempts=2), before and after training
    second_before: float | None = None
    second_before_counts: Counts | None = None
    second_final: float | None = None
    second_final_counts: Counts | None = None

    def intermediate(self) -> list[tuple[int, float]]:
        """The evaluations during training (`eval.every`), neither the one before (step 0) nor the one after."""
        points = [(step, value) for step, value in self.curve if step > 0]
        if self.final is not None and points and points[-1][0] == self.steps:
            points = points[:-1]
        return points


def eval_counts(record: dict[str, Any]) -> Counts | None:
    """(successes, tasks) of an evaluation record or summary (first attempt when it has two); None if absent."""
    first = record.get("first_try")
    successes = (first or record).get("successes")
    total = record.get("total")
    if isinstance(successes, bool) or not isinstance(successes, int) or not isinstance(total, int):
        return None
    return successes, total


def _success(record: dict[str, Any]) -> float | None:
    return (record.get("first_try") or record).get("success")


def second_try(record: dict[str, Any]) -> tuple[float | None, Counts | None]:
    """(success, (successes, tasks)) of an evaluation's second try after a reflection; (None, None) without one."""
    second, total = record.get("second_try") or {}, record.get("total")
    successes = second.get("successes")
    counts = (successes, total) if isinstance(successes, int) and isinstance(total, int) else None
    return second.get("success"), counts


def read_run(spec: RunSpec) -> RunResult:
    """From the run's summary.json, eval_*.json and metrics.jsonl (every session of it, resumes included)."""
    result = RunResult(spec.arm.label, spec.seed, None)
    summary = spec.directory / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        after, before = data.get("eval_after") or {}, data.get("eval_before") or {}
        result.final, result.final_counts = _success(after), eval_counts(after)
        result.before, result.before_counts = _success(before), eval_counts(before)
        result.second_final, result.second_final_counts = second_try(after)
        result.second_before, result.second_before_counts = second_try(before)
    for path in sorted(spec.directory.glob("eval_*.json")):  # before, after and every intermediate evaluation
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        counts, step = eval_counts(record), record.get("step")
        if counts is not None and isinstance(step, int):
            result.counts[step] = counts
        if path.stem == "eval_before" and result.before is None:  # an unfinished run has no summary yet
            result.before, result.before_counts = _success(record), counts
    metrics = spec.directory / "metrics.jsonl"
    latest: dict[tuple[int, bool], dict] = {}  # a resume after a crash repeats the steps since its checkpoint
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        record = json.loads(line)
        latest[(record["step"], "step_seconds" in record)] = record
    for (_, is_step), record in sorted(latest.items(), key=lambda item: item[0]):
        if is_step:
            result.steps = max(result.steps, record["step"])
            result.seconds += record["step_seconds"]
            result.generated_tokens += record.get("generated_tokens") or 0.0
            result.trained_tokens += record.get("trained_tokens") or 0.0
        if record.get(METRIC) is not None:
            result.seconds += record.get("eval/seconds") or 0.0
            result.curve.append((record["step"], record[METRIC]))
    return result


def _cells(values: list[float | None], counts: list[Counts | None], pool) -> tuple[str, str]:
    """(success, interval) cells: pooled counts with their Wilson interval; without the counts of every run,
    the mean success and no interval."""
    known = [v for v in values if v is not None]
    result = estimate(known, counts if len(known) == len(values) else [None], pool)
    if result is None:
        return "-", "-"
    centre, low, high = result
    return f"{centre:.3f}", (f"[{low:.3f}, {high:.3f}]" if math.isfinite(low) else "-")


def table(results: Sequence[RunResult]) -> tuple[str, str]:
    """(Markdown, CSV): per config, held-out success before and after training over the finished seeds, each
    with its 95% Wilson interval on the successes pooled over seeds (where any run tried twice, R3's second
    try after a reflection as well; '-' for runs that tried once), then steps, wall time and tokens (means
    over seeds)."""
    labels = list(dict.fromkeys(r.label for r in results))
    header = [
        "config",
        "seeds",
        "before",
        "before: 95% Wilson",
        "after: held-out success (seeds pooled)",
        "after: 95% Wilson (seeds pooled)",
        "per seed (after)",
        "steps",
        "wall time (min)",
        "generated tokens",
        "trained tokens",
    ]
    two_tries = any(r.second_final is not None for r in results)  # R3's evaluations: the second try too
    if two_tries:
        header[6:6] = ["before: 2nd try", "after: 2nd try (seeds pooled)", "after: 2nd try, 95% Wilson"]
    rows = []
    for label in labels:
        runs = [r for r in results if r.label == label and r.final is not None]
        if not runs:
            rows.append([label, "0", *["-"] * (len(header) - 2)])
            continue
        count = len(runs)
        second: list[str] = []
        if two_tries:
            before_cell, _ = _cells(
                [r.second_before for r in runs], [r.second_before_counts for r in runs], pooled_before
            )
            second = [
                before_cell,
                *_cells([r.second_final for r in runs], [r.second_final_counts for r in runs], pooled),
            ]
        rows.append(
            [
                label,
                str(count),
                *_cells([r.before for r in runs], [r.before_counts for r in runs], pooled_before),
                *_cells([r.final for r in runs], [r.final_counts for r in runs], pooled),
                *second,
                " ".join(f"{r.final:.2f}" for r in runs),
                f"{sum(r.steps for r in runs) / count:.0f}",
                f"{sum(r.seconds for r in runs) / count / 60:.1f}",
                f"{sum(r.generated_tokens for r in runs) / count:.0f}",
                f"{sum(r.trained_tokens for r in runs) / count:.0f}",
            ]
        )
    markdown = (
        "\n".join(
            [
                "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header),
                *["| " + " | ".join(row) + " |" for row in rows],
            ]
        )
        + "\n\n"
        + INTERVAL_NOTE
        + "\n"
    )
    csv = "\n".join(",".join(_csv_cell(cell) for cell in row) for row in [header, *rows]) + "\n"
    return markdown, csv


def _csv_cell(cell: str) -> str:
    return f'"{cell}"' if any(c in cell for c in ", :()") else cell
