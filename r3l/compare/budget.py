"""`r3l compare --match-budget`: each arm cheaper than a reference arm is run again, on until it has spent what
the reference spent (generated tokens or seconds), so a baseline is read at equal steps and at equal cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from r3l.compare.plan import Arm, Budget
from r3l.compare.summary import RunResult
from r3l.errors import UserError

BUDGET_KEYS = {"tokens": "train.budget_tokens", "seconds": "train.budget_seconds"}
STEP_CAP_FACTOR = 3  # train.steps of a budget run: this many times the steps its cost per step predicts


def mean_cost(runs: Sequence[RunResult], by: str) -> float:
    return sum(r.cost.of(by) for r in runs) / len(runs)


def merged_budget(stored: Budget | None, asked: Budget | None) -> Budget | None:
    """The budget of a continued comparison: what was stored, with what this command asks for on top (a flag not
    given keeps its stored value). The target stays while the unit and the reference do; another unit starts a
    new reading (its arms are LABEL@unit; the earlier runs stay on disk); another reference once the target is
    fixed is refused, since the arms already run on were run to the old one."""
    if stored is None or asked is None:
        return asked or stored
    of = asked.of if asked.of is not None else stored.of
    arms = asked.arms or stored.arms
    if asked.by != stored.by:
        return Budget(asked.by, of, arms=arms)
    if of != stored.of and stored.target is not None:
        raise UserError(
            f"--budget-of {of}: this comparison's {stored.by} budget is fixed to {stored.reference}'s cost; "
            "choose another --out for another reference"
        )
    return replace(stored, of=of, arms=arms)


def check_budget(budget: Budget, labels: Sequence[str]) -> None:
    """Before any run: the reference arm (--budget-of) and the arms run on (--budget-for) are arms of the
    comparison, and the reference is not among the arms run on."""
    unknown = [name for name in (budget.of, *budget.arms) if name is not None and name not in labels]
    if unknown:
        raise UserError(
            f"--budget-of/--budget-for name no arm of this comparison: {', '.join(unknown)} (its arms: "
            f"{', '.join(labels)})"
        )
    if budget.of is not None and budget.of in budget.arms:
        raise UserError(f"--budget-for {budget.of}: that is the reference arm (--budget-of); name the others")


def reference_cost(results: Sequence[RunResult], budget: Budget) -> tuple[str, float]:
    """(the reference arm, its mean cost per run): `budget.of` (an arm: `check_budget`), or the costliest arm.
    Every one of its runs must have finished."""
    labels = list(dict.fromkeys(r.label for r in results))
    finished = {label: [r for r in results if r.label == label and r.after is not None] for label in labels}
    candidates = [budget.of] if budget.of is not None else labels
    unfinished = [label for label in candidates if len(finished[label]) < sum(r.label == label for r in results)]
    if unfinished:
        raise UserError(
            f"--match-budget needs the reference arm finished; unfinished: {', '.join(unfinished)} (run the "
            "comparison to the end first)"
        )
    label = max(candidates, key=lambda name: mean_cost(finished[name], budget.by))
    return label, mean_cost(finished[label], budget.by)


def budget_arm(arm: Arm, runs: Sequence[RunResult], budget: Budget, steps: int, eval_every: int) -> Arm:
    """`arm` run on to `budget.target`: its own config with the budget, a step cap well past what its cost per
    step predicts (the budget stops it), and an evaluation at least every `steps` (its equal-steps length), so
    its curve passes through the point the equal-steps arm ends at."""
    assert budget.target is not None
    per_step = mean_cost(runs, budget.by) / max(1, steps)
    cap = max(steps, math.ceil(STEP_CAP_FACTOR * budget.target / per_step)) if per_step > 0 else steps
    every = eval_every if 0 < eval_every <= steps else steps
    value = math.ceil(budget.target) if budget.by == "tokens" else round(budget.target, 1)
    return Arm(
        f"{arm.label}@{budget.by}",
        arm.config,
        arm.overrides,
        (f"{BUDGET_KEYS[budget.by]}={value}", f"train.steps={cap}", f"eval.every={every}"),
    )


def arms_under_budget(
    arms: Sequence[Arm], results: Sequence[RunResult], budget: Budget, steps: dict[str, tuple[int, int]]
) -> list[Arm]:
    """The budget arm of every arm whose mean cost is below the target, of `budget.arms` only where it names some
    (`steps`: label -> (train.steps, eval.every) of its config)."""
    assert budget.target is not None
    out = []
    for arm in arms:
        runs = [r for r in results if r.label == arm.label and r.after is not None]
        if arm.label == budget.reference or not runs or mean_cost(runs, budget.by) >= budget.target:
            continue
        if budget.arms and arm.label not in budget.arms:
            continue
        out.append(budget_arm(arm, runs, budget, *steps[arm.label]))
    return out


def rerun_divergence(equal_steps: RunResult, rerun: RunResult) -> tuple[int, int] | None:
    """(problems whose first-try outcome differs, problems both answered) between an equal-steps run's final
    evaluation and its budget rerun's evaluation at the same step: a rerun starts again from step 0, so it need
    not pass through the equal-steps run. None where either evaluation is missing."""
    after = equal_steps.after
    at_same_step = rerun.evaluations.get(equal_steps.steps)
    if after is None or at_same_step is None or not equal_steps.steps:
        return None
    first, second = after.outcomes.get("first", {}), at_same_step.outcomes.get("first", {})
    common = [task for task in first if task in second]
    return sum(first[task] != second[task] for task in common), len(common)


def divergence_text(results: Sequence[RunResult], by: str) -> str:
    """Per rerun arm, how many problems its runs answer otherwise than their equal-steps runs at the step those
    ended ('grpo@tokens at step 20, seeds 0, 1, 2: 5/80, 3/80, 7/80 problems answered otherwise')."""
    runs = {(r.label, r.seed): r for r in results}
    parts = []
    for label in dict.fromkeys(r.label for r in results if r.label.endswith(f"@{by}")):
        base = label.removesuffix(f"@{by}")
        read = []
        for rerun in (r for r in results if r.label == label and (base, r.seed) in runs):
            counts = rerun_divergence(runs[(base, rerun.seed)], rerun)
            if counts is not None:
                read.append((rerun.seed, runs[(base, rerun.seed)].steps, counts))
        if read:
            steps = "/".join(str(step) for step in sorted({step for _, step, _ in read}))
            differ = ", ".join(f"{d}/{n}" for _, _, (d, n) in read)
            seeds = ", ".join(str(seed) for seed, _, _ in read)
            parts.append(f"{label} at step {steps}, seeds {seeds}: {differ} problems answered otherwise")
    return "; ".join(parts)


def budget_note(budget: Budget, results: Sequence[RunResult] = ()) -> str:
    """Which arms were run again to the budget, as what they are: fresh runs from step 0, not continuations of
    their equal-steps runs (with, where measured, how far their evaluations at that step differ from those)."""
    assert budget.target is not None
    unit = "generated tokens" if budget.by == "tokens" else "seconds"
    which = f"{', '.join(budget.arms)} (--budget-for)" if budget.arms else "the cheaper arms"
    divergence = divergence_text(results, budget.by)
    return (
        f"Equal budget: arms marked @{budget.by} are {which} rerun from step 0 (fresh runs, not continuations of "
        f"their equal-steps runs), each on until it spent {budget.target:.0f} {unit} (the mean of "
        f"{budget.reference}'s runs), evaluated at least every as many steps as their equal-steps run took; at "
        "that step a rerun need not match the equal-steps run"
        + (f" ({divergence} than by the equal-steps runs)" if divergence else "")
        + ". Equal generated tokens are not equal trained positions (the table's last column)."
    )
