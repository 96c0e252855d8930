"""What finished runs of a comparison measured, and the table of it (one row per config)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from r3l.compare.plan import RunSpec
from r3l.compare.stats import t_interval

METRIC = "eval/success"


@dataclass
class RunResult:
    label: str
    seed: int
    final: float | None  # held-out success after training (None: the run has not finished)
    steps: int = 0
    seconds: float = 0.0
    generated_tokens: float = 0.0
    trained_tokens: float = 0.0
    curve: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out success)


def read_run(spec: RunSpec) -> RunResult:
    """From the run's summary.json and metrics.jsonl (every session of it, resumes included)."""
    result = RunResult(spec.arm.label, spec.seed, None)
    summary = spec.directory / "summary.json"
    if summary.exists():
        after = json.loads(summary.read_text()).get("eval_after") or {}
        result.final = after.get("success")
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


def table(results: Sequence[RunResult]) -> tuple[str, str]:
    """(Markdown, CSV): per config, the final held-out success mean and 95% interval over finished seeds,
    then steps, wall time and tokens (means over seeds)."""
    labels = list(dict.fromkeys(r.label for r in results))
    header = ["config", "seeds", "held-out success (mean)", "95% interval", "per seed", "steps", "wall time (min)",
              "generated tokens", "trained tokens"]
    rows = []
    for label in labels:
        runs = [r for r in results if r.label == label and r.final is not None]
        if not runs:
            rows.append([label, "0", "-", "-", "-", "-", "-", "-", "-"])
            continue
        centre, low, high = t_interval([r.final for r in runs])
        count = len(runs)
        rows.append([label, str(count), f"{centre:.3f}", f"[{low:.3f}, {high:.3f}]",
                     " ".join(f"{r.final:.2f}" for r in runs), f"{sum(r.steps for r in runs) / count:.0f}",
                     f"{sum(r.seconds for r in runs) / count / 60:.1f}",
                     f"{sum(r.generated_tokens for r in runs) / count:.0f}",
                     f"{sum(r.trained_tokens for r in runs) / count:.0f}"])
    markdown = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                          *["| " + " | ".join(row) + " |" for row in rows]]) + "\n"
    csv = "\n".join(",".join(f'"{cell}"' if "," in cell or " " in cell else cell for cell in row)
                    for row in [header, *rows]) + "\n"
    return markdown, csv
