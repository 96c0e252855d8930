"""What a finished run of a comparison measured, read from its folder: each held-out evaluation problem by
problem, what the run cost (every session, redone steps and setup included), its curve and its settings."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from r3l.compare.plan import RunSpec
from r3l.provenance import machine_label, sessions, trained_tasks

# The columns of an evaluation: the first try; where the run tried twice (eval.attempts=2), R3's second try after
# a reflection and its control, the second try after the verdict alone. A failure's second try replaces its first.
MEASURES = {
    "first": "1st try",
    "second": "2nd try after a reflection",
    "verdict_only": "2nd try after the verdict alone",
}
METRICS = ("success", "reward")


@dataclass
class Evaluation:
    """One held-out evaluation: per measure, the outcome of each problem (task id -> 1/0 success, or reward; the
    mean of its draws where it was drawn several times), and the share of replies missing the answer format (None
    where unknown)."""

    step: int
    outcomes: dict[str, dict[str, float]]
    format_missing: dict[str, float | None] = field(default_factory=dict)
    draws: int = 1  # sampled episodes per problem (eval.draws), averaged into its outcome
    rate: bool = True  # outcomes are successes (or their mean over draws), not rewards: a mean lies in [0, 1]

    def mean(self, measure: str = "first") -> float | None:
        values = self.outcomes.get(measure)
        return sum(values.values()) / len(values) if values else None


@dataclass
class Cost:
    """What a run spent over all its sessions: tokens generated for training (R3's failure set included),
    seconds of steps, evaluations and setup, step records (a step redone after a resume counts again), and the
    positions its learner ran forward and backward (`forward_positions`; None where no step recorded them: runs
    made before the learner counted them)."""

    generated_tokens: float = 0.0
    seconds: float = 0.0
    step_records: int = 0
    setup_tokens: float = 0.0
    setup_seconds: float = 0.0
    trained_positions: float | None = None

    def of(self, by: str) -> float:
        return self.generated_tokens if by == "tokens" else self.seconds


@dataclass
class CurvePoint:
    step: int
    value: float  # the metric's held-out mean (first try)
    tokens: float  # generated tokens spent up to this evaluation
    seconds: float  # seconds spent up to it, the evaluation included


@dataclass
class RunResult:
    label: str
    seed: int
    finished: bool = False
    steps: int = 0
    evaluations: dict[int, Evaluation] = field(default_factory=dict)  # step -> evaluation; 0 is before training
    cost: Cost = field(default_factory=Cost)
    curve: list[CurvePoint] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # the resolved config, flattened to dotted keys
    code: list[str] = field(default_factory=list)  # source hashes of the code each session ran
    machines: list[str] = field(default_factory=list)  # the machine each session ran on (provenance.machine_label)
    stopped_by_budget: bool = False
    draws: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # step -> the training tasks it drew

    @property
    def before(self) -> Evaluation | None:
        return self.evaluations.get(0)

    @property
    def after(self) -> Evaluation | None:
        return self.evaluations.get(self.steps) if self.finished and self.steps else None

    def final(self, measure: str = "first") -> float | None:
        return self.after.mean(measure) if self.after else None

    def intermediate(self) -> list[CurvePoint]:
        """The evaluations during training (`eval.every`), neither the one before (step 0) nor the one after."""
        return [p for p in self.curve if p.step > 0 and not (self.finished and p.step == self.steps)]


FormatRule = Callable[[str], "bool | None"]


def _outcome(sample: dict[str, Any], prefix: str, metric: str) -> float | None:
    """A sample's outcome: its reward where asked and recorded, else its success (R3's tries record success)."""
    if metric == "reward" and not prefix and isinstance(sample.get("reward"), (int, float)):
        return float(sample["reward"])
    success = sample.get(f"{prefix}success")
    return None if success is None else float(bool(success))


def evaluation(record: dict[str, Any], metric: str = "success", format_rule: FormatRule | None = None) -> Evaluation:
    """An eval_*.json record, problem by problem. A failure's second try (either kind) replaces its first; a
    problem solved at once keeps its first. Format shares are those the evaluation recorded, or, for records
    made before it did, `format_rule` applied to the stored replies."""
    samples = record.get("samples") or []
    two_tries = any("first_success" in s for s in samples)
    outcomes: dict[str, dict[str, float]] = {}
    missing: dict[str, list[bool | None]] = {}
    draws: dict[str, list[float]] = {}  # several sampled draws of a task (eval.draws): its outcome is their mean
    for sample in samples:
        task = str(sample["task_id"])
        first = _outcome(sample, "first_" if two_tries else "", metric)
        if first is None:
            continue
        draws.setdefault(task, []).append(first)
        outcomes.setdefault("first", {})[task] = sum(draws[task]) / len(draws[task])
        reply = sample.get("first_attempt" if two_tries else "completion")
        missing.setdefault("first", []).append(
            _format_missing(sample, "first_" if two_tries else "", reply, format_rule)
        )
        if not two_tries:
            continue
        for measure, prefix, text in (
            ("second", "second_", "second_attempt"),
            ("verdict_only", "verdict_only_", "verdict_only_attempt"),
        ):
            if measure == "verdict_only" and "second_try_verdict_only" not in record:
                continue
            if first:
                outcomes.setdefault(measure, {})[task] = first
                continue
            value = _outcome(sample, prefix, metric)
            outcomes.setdefault(measure, {})[task] = 0.0 if value is None else value
            if sample.get(text) is not None:
                missing.setdefault(measure, []).append(_format_missing(sample, prefix, sample[text], format_rule))
    shares = {}
    for measure, flags in missing.items():
        known = [flag for flag in flags if flag is not None]
        shares[measure] = sum(known) / len(known) if known else None
    return Evaluation(
        int(record.get("step", 0)), outcomes, shares, max(map(len, draws.values()), default=1), metric != "reward"
    )


def _format_missing(sample: dict[str, Any], prefix: str, reply: Any, rule: FormatRule | None) -> bool | None:
    recorded = sample.get(f"{prefix}format_missing")
    if recorded is not None:
        return bool(recorded)
    return rule(reply) if rule is not None and isinstance(reply, str) else None


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train': {'lr': 1e-6}} -> {'train.lr': 1e-6}; lists and values stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))  # an empty mapping is no setting
        else:
            flat[name] = value
    return flat


def read_run(spec: RunSpec, metric: str = "success", format_rule: FormatRule | None = None) -> RunResult:
    """From the run's summary.json, eval_*.json, metrics.jsonl (every session of it), config.yaml and tasks.jsonl."""
    result = RunResult(spec.arm.label, spec.seed)
    folder = spec.directory
    summary_path = folder / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        result.finished, result.steps = True, int(summary.get("step", 0))
        result.stopped_by_budget = bool(summary.get("stopped_by_budget"))
    for path in sorted(folder.glob("eval_*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record.get("step"), int):
            result.evaluations[record["step"]] = evaluation(record, metric, format_rule)
    _read_metrics(folder / "metrics.jsonl", result, metric)
    config = folder / "config.yaml"
    if config.exists():
        result.settings = flatten(yaml.safe_load(config.read_text()) or {})
    recorded = sessions(folder)
    result.code = list(dict.fromkeys(s["source_hash"] for s in recorded if s.get("source_hash")))
    result.machines = list(dict.fromkeys(machine_label(s["machine"]) for s in recorded if s.get("machine")))
    result.draws = trained_tasks(folder)
    return result


def _read_metrics(path: Path, result: RunResult, metric: str) -> None:
    """Cost over every line (a resume after a crash repeats the steps since its checkpoint, and they cost again);
    the curve from the latest evaluation at each step, at the cost spent when it was made."""
    cost, key = result.cost, f"eval/{metric}"
    points: dict[int, CurvePoint] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        if "step_seconds" in record:
            cost.step_records += 1
            cost.seconds += record["step_seconds"]
            result.steps = max(result.steps, record["step"]) if not result.finished else result.steps
            cost.trained_positions = trained_positions(cost.trained_positions, record)
        cost.generated_tokens += (record.get("generated_tokens") or 0.0) + (record.get("setup_generated_tokens") or 0.0)
        cost.setup_tokens += record.get("setup_generated_tokens") or 0.0
        cost.setup_seconds += record.get("setup_seconds") or 0.0
        cost.seconds += (record.get("eval/seconds") or 0.0) + (record.get("setup_seconds") or 0.0)
        value = record.get(key, record.get("eval/success"))
        if value is not None:
            points[record["step"]] = CurvePoint(record["step"], value, cost.generated_tokens, cost.seconds)
    result.curve = [points[step] for step in sorted(points)]


def trained_positions(so_far: float | None, step: dict[str, Any]) -> float | None:
    """The positions trained up to and including this step record: its `forward_positions` added. A step that
    records none, where earlier ones did, trained none (the learner skipped every sample: zero advantage); None
    until a step records them (a run made before the learner counted them has none to sum)."""
    value = step.get("forward_positions")
    if value is None:
        return so_far
    return (so_far or 0.0) + float(value)
