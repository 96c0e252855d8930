"""The comparison's tables: per arm, held-out success with its interval over seeds and problems and its change
from the untrained model; arm against arm; each seed in detail; and what every run cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from r3l.compare.stats import (
    Difference,
    Estimate,
    difference_interval,
    holm_adjust,
    paired_difference,
    seed_level_interval,
    wilson_interval,
)
from r3l.compare.summary import MEASURES, Evaluation, RunResult

INTERVAL_NOTE = (
    "Intervals: 95%, with the seed as the unit: a seeds x problems table of held-out outcomes, its variance "
    "from the spread between seed means and between problems (docs/DESIGN.md, 'Seeds are the unit'); a change or "
    "a difference pairs the problems both sides answered, and the seeds where both arms' runs of a seed drew the "
    "same training tasks (below). The untrained model, "
    "where every seed's evaluation before training gave the same answers (greedy, or sampled from one eval.seed), "
    "is one model, so it varies with the problems only. Per-seed Wilson "
    "intervals (below) count the problems alone; intervals of success rates are cut to [0, 1] (differences to "
    "[-1, 1]). p (Holm): the p-value adjusted by Holm's step-down for all the p-values of its table (the changes "
    "in this one; the differences in the next), to read several at once. Cost: everything a run spent, every "
    "session, redone steps, R3's failure set and the evaluations included (means per run)."
)


UNRECORDED = "—"


def budget_footnote(results: Sequence[RunResult]) -> str:
    """What the budget columns hold, and why a cell of trained positions is empty where one is."""
    text = (
        "Budget: 'held equal' is what each run was run to (its steps, or the generated tokens of an arm run again "
        "to another's cost); trained positions are the positions the "
        "learner ran forward and backward (its forward_positions, summed over every step record; a step whose "
        "samples were all skipped trains none). Equal generated tokens are not equal trained positions."
    )
    if any(r.cost.trained_positions is None for r in results if r.after is not None):
        text += f" {UNRECORDED}: a run recorded no trained positions (made before the learner counted them)."
    return text


@dataclass
class ArmRows:
    """One arm's finished runs, with the problems every one of them answered (in one order)."""

    label: str
    runs: list[RunResult]

    def measures(self) -> list[str]:
        return [m for m in MEASURES if all(r.after is not None and m in r.after.outcomes for r in self.runs)]

    def table(self, measure: str, when: str = "after") -> tuple[np.ndarray, list[str]] | None:
        evaluations = [getattr(r, when) for r in self.runs]
        if not evaluations or any(e is None or measure not in e.outcomes for e in evaluations):
            return None
        return outcome_table([e.outcomes[measure] for e in evaluations])

    def rate(self) -> bool:
        """Its outcomes are successes (1/0, or the mean of a problem's draws), not rewards: intervals stay in
        [0, 1]."""
        return all(e.rate for r in self.runs for e in (r.before, r.after) if e is not None)

    def before_is_one_model(self, measure: str) -> bool:
        """Every seed's evaluation before training gave the same outcome on every problem (greedy decoding of
        one model): it counts once, as a fixed model."""
        befores = [r.before.outcomes.get(measure) for r in self.runs if r.before is not None]
        return len(befores) == len(self.runs) and all(b == befores[0] for b in befores)


def outcome_table(per_seed: Sequence[dict[str, float]]) -> tuple[np.ndarray, list[str]]:
    """Seeds x problems, on the problems every seed answered, in the first seed's order."""
    common = set.intersection(*(set(outcomes) for outcomes in per_seed))
    problems = [task for task in per_seed[0] if task in common]
    return np.array([[outcomes[task] for task in problems] for outcomes in per_seed], dtype=float), problems


def arms(results: Sequence[RunResult]) -> list[ArmRows]:
    labels = list(dict.fromkeys(r.label for r in results))
    return [ArmRows(label, [r for r in results if r.label == label and r.after is not None]) for label in labels]


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def interval_cell(estimate: Estimate | None, signed: bool = False) -> str:
    if estimate is None:
        return "-"
    centre = f"{estimate.mean:+.3f}" if signed else f"{estimate.mean:.3f}"
    if not math.isfinite(estimate.low):
        return f"{centre} (one seed: no interval)"
    return (
        f"{centre} [{estimate.low:+.3f}, {estimate.high:+.3f}]"
        if signed
        else (f"{centre} [{estimate.low:.3f}, {estimate.high:.3f}]")
    )


def p_text(p_value: float) -> str:
    if not math.isfinite(p_value):
        return "-"
    return "<0.001" if p_value < 0.001 else f"{p_value:.3f}"


def p_cell(difference: Difference | None) -> str:
    return "-" if difference is None else p_text(difference.p_value)


def with_holm(rows: list[list[str]], differences: Sequence[Difference | None], column: int) -> list[list[str]]:
    """The table's rows (header first) with Holm's adjusted p inserted after `column`, over every difference of
    the table as one family (rows without a test get "-")."""
    adjusted = holm_adjust([math.nan if d is None else d.p_value for d in differences])
    header, *body = rows
    assert len(body) == len(adjusted)
    return [
        [*header[: column + 1], "p (Holm)", *header[column + 1 :]],
        *[[*row[: column + 1], p_text(p), *row[column + 1 :]] for row, p in zip(body, adjusted, strict=True)],
    ]


def before_estimate(arm: ArmRows, measure: str) -> tuple[Estimate | None, np.ndarray | None, bool]:
    found = arm.table(measure, "before")
    if found is None:
        return None, None, False
    table, _ = found
    fixed = arm.before_is_one_model(measure)
    estimate = seed_level_interval(table[:1] if fixed else table, fixed_model=fixed, rate=arm.rate())
    return estimate, table[:1] if fixed else table, fixed


def change(arm: ArmRows, measure: str) -> Difference | None:
    """After minus before on the problems both answered; a fixed untrained model varies with the problems only;
    where the seeds' evaluations before training differ, the seed is the unit on both sides."""
    after, before = arm.table(measure), arm.table(measure, "before")
    if after is None or before is None:
        return None
    (after_table, after_problems), (before_table, before_problems) = after, before
    common = [p for p in after_problems if p in set(before_problems)]
    a = after_table[:, [after_problems.index(p) for p in common]]
    b = before_table[:, [before_problems.index(p) for p in common]]
    fixed = arm.before_is_one_model(measure)
    if fixed:
        return difference_interval(a, b[:1], second_fixed=True, rate=arm.rate())
    return paired_difference(a - b, rate=arm.rate())


def seeds_paired(first: ArmRows, second: ArmRows) -> bool:
    """Whether two arms' runs form blocks by seed: the same seeds, and each seed's two runs drew the same
    training tasks at every step both took (tasks.jsonl; a run on to a budget goes on past the other's last)."""
    if [r.seed for r in first.runs] != [r.seed for r in second.runs]:
        return False
    for a, b in zip(first.runs, second.runs, strict=True):
        shared = set(a.draws) & set(b.draws)
        if not shared or any(a.draws[step] != b.draws[step] for step in shared):
            return False
    return True


def per_seed_cell(runs: Sequence[RunResult], measure: str) -> str:
    return " / ".join(fmt(r.final(measure)) for r in runs)


def arm_table(groups: Sequence[ArmRows], all_results: Sequence[RunResult]) -> list[list[str]]:
    header = [
        "arm",
        "try",
        "seeds",
        "steps",
        "held equal",
        "before",
        "after [95%]",
        "change [95%]",
        "p",
        "per seed (after)",
        "format missed (after)",
        "wall min / run",
        "generated tokens / run",
        "trained positions / run",
    ]
    rows = [header]
    changes: list[Difference | None] = []
    for arm in groups:
        if not arm.runs:
            unfinished = sum(1 for r in all_results if r.label == arm.label)
            rows.append([arm.label, "-", f"0 of {unfinished}", *["-"] * (len(header) - 3)])
            changes.append(None)
            continue
        count = len(arm.runs)
        for measure in arm.measures():
            after = arm.table(measure)
            estimate = seed_level_interval(after[0], rate=arm.rate()) if after else None
            before, _, _ = before_estimate(arm, measure)
            delta = change(arm, measure)
            changes.append(delta)
            missing = [r.after.format_missing.get(measure) for r in arm.runs if r.after is not None]
            known = [m for m in missing if m is not None]
            rows.append(
                [
                    arm.label,
                    measure_label(measure, arm.runs),
                    str(count),
                    f"{sum(r.steps for r in arm.runs) / count:.0f}",
                    held_budget(arm.runs),
                    fmt(before.mean if before else None),
                    interval_cell(estimate),
                    interval_cell(delta, signed=True),
                    p_cell(delta),
                    per_seed_cell(arm.runs, measure),
                    f"{sum(known) / len(known):.0%}" if known else "-",
                    f"{sum(r.cost.seconds for r in arm.runs) / count / 60:.1f}",
                    f"{sum(r.cost.generated_tokens for r in arm.runs) / count:.0f}",
                    positions_cell(mean_positions(arm.runs)),
                ]
            )
    return with_holm(rows, changes, header.index("p"))


def held_budget(runs: Sequence[RunResult]) -> str:
    """What the arm's runs were run to: a budget of generated tokens or seconds (train.budget_tokens /
    budget_seconds: an arm run again to another arm's cost), else their number of steps."""
    for key, unit in (("train.budget_tokens", "tokens"), ("train.budget_seconds", "s")):
        values = [r.settings.get(key) for r in runs]
        if all(isinstance(v, (int, float)) for v in values):
            return f"{span(sorted(float(v) for v in values if v is not None))} {unit}"
    return f"{span(sorted(float(r.steps) for r in runs))} steps"


def span(values: Sequence[float]) -> str:
    """'20' where the values agree, '20-22' where they differ."""
    low, high = values[0], values[-1]
    return f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}"


def mean_positions(runs: Sequence[RunResult]) -> float | None:
    """The mean of the runs' trained positions; None where a run recorded none (no mean of some of them)."""
    values = [r.cost.trained_positions for r in runs]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def positions_cell(value: float | None) -> str:
    return UNRECORDED if value is None else f"{value:.0f}"


def difference_table(groups: Sequence[ArmRows]) -> list[list[str]]:
    """Every pair of arms on their first try, and within an arm that tried twice, its reflection against the
    verdict-alone control (the same seeds and problems: per-seed differences)."""
    rows = [["comparison", "difference [95%]", "p"]]
    differences: list[Difference | None] = []
    finished = [arm for arm in groups if arm.runs]
    for first, second in combinations(finished, 2):
        a, b = first.table("first"), second.table("first")
        if a is None or b is None:
            continue
        (ta, pa), (tb, pb) = a, b
        rate = first.rate() and second.rate()
        common = [p for p in pa if p in set(pb)]
        if common:
            shared_a, shared_b = ta[:, [pa.index(p) for p in common]], tb[:, [pb.index(p) for p in common]]
            if seeds_paired(first, second):
                difference = paired_difference(shared_a - shared_b, rate=rate)
                name = f"{first.label} − {second.label} (1st try, seeds paired)"
            else:
                difference = difference_interval(shared_a, shared_b, rate=rate)
                name = f"{first.label} − {second.label} (1st try)"
        else:
            difference = difference_interval(ta, tb, paired_problems=False, rate=rate)
            name = f"{first.label} − {second.label} (1st try, no shared problems)"
        rows.append([name, interval_cell(difference, signed=True), p_cell(difference)])
        differences.append(difference)
    for arm in finished:
        if "verdict_only" in arm.measures():
            reflection, control = arm.table("second"), arm.table("verdict_only")
            assert reflection is not None and control is not None
            if reflection[1] == control[1]:
                difference = paired_difference(reflection[0] - control[0], rate=arm.rate())
                rows.append(
                    [
                        f"{arm.label}: 2nd try after a reflection − after the verdict alone",
                        interval_cell(difference, signed=True),
                        p_cell(difference),
                    ]
                )
                differences.append(difference)
    return with_holm(rows, differences, 2)


def measure_label(measure: str, runs: Sequence[RunResult]) -> str:
    """The try's name, with the sampled draws per problem its outcomes average where there were several."""
    draws = max((r.after.draws for r in runs if r.after is not None), default=1)
    return MEASURES[measure] + (f" (mean of {draws} draws)" if draws > 1 else "")


def seed_table(groups: Sequence[ArmRows]) -> list[list[str]]:
    rows = [
        [
            "arm",
            "seed",
            "try",
            "after",
            "95% Wilson (problems)",
            "steps",
            "step records",
            "wall min",
            "tokens",
            "trained positions",
        ]
    ]
    for arm in groups:
        for run in arm.runs:
            for measure in arm.measures():
                outcomes = run.after.outcomes[measure] if run.after else {}
                successes = round(sum(outcomes.values()))
                low, high = wilson_interval(successes, len(outcomes)) if binary(outcomes) else (math.nan, math.nan)
                rows.append(
                    [
                        arm.label,
                        str(run.seed),
                        MEASURES[measure],
                        fmt(run.final(measure)),
                        f"[{low:.3f}, {high:.3f}]" if math.isfinite(low) else "-",
                        str(run.steps) + (" (budget)" if run.stopped_by_budget else ""),
                        str(run.cost.step_records),
                        f"{run.cost.seconds / 60:.1f}",
                        f"{run.cost.generated_tokens:.0f}",
                        positions_cell(run.cost.trained_positions),
                    ]
                )
    return rows


def binary(outcomes: dict[str, float]) -> bool:
    return all(v in (0.0, 1.0) for v in outcomes.values())


def markdown(rows: Sequence[Sequence[str]]) -> str:
    header, *body = rows
    return "\n".join(
        ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in body]]
    )


def csv(rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',:()"[]') else text

    return "\n".join(",".join(cell(c) for c in row) for row in rows) + "\n"


def tables(results: Sequence[RunResult], notes: Sequence[str] = ()) -> tuple[str, str]:
    """(Markdown with every table and the notes, CSV of the arm table)."""
    groups = arms(results)
    main = arm_table(groups, results)
    parts = [markdown(main), INTERVAL_NOTE + " " + budget_footnote(results)]
    differences = difference_table(groups)
    if len(differences) > 1:
        parts += [
            "Differences (problems paired; seeds paired where marked: each seed's runs of the two arms drew the same "
            "training tasks, so a seed is one block and the interval comes from the spread of its differences; "
            "elsewhere seeds independent between arms):",
            markdown(differences),
        ]
    parts += [*notes, "Per seed:", markdown(seed_table(groups))]
    return "\n\n".join(parts) + "\n", csv(main)


__all__ = ["Evaluation", "tables"]
