"""`r3l compare` from start to table: check every config, run what is unfinished (then, with --match-budget, the
cheaper arms on to the reference's cost), write the tables and the plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from r3l.compare.budget import arms_under_budget, budget_note, check_budget, merged_budget, reference_cost
from r3l.compare.mixing import marked, mixing, mixing_note, refusal
from r3l.compare.notes import code_note, machine_note, settings_note
from r3l.compare.plan import Budget, Plan, make_arms, plan_runs, read_plan, run_all, write_plan
from r3l.compare.plot import plot
from r3l.compare.summary import METRICS, RunResult, read_run
from r3l.compare.table import tables
from r3l.envs.overlap import overlap_counts, overlap_line
from r3l.errors import UserError
from r3l.logging import console
from r3l.provenance import display_path

PLOT_AXES = ("steps", "tokens", "seconds")


@dataclass(frozen=True)
class Reading:
    """How the finished runs are read: the metric (success or, where rewards are graded, reward), the x axis
    of the plot's during-training panel, and whether runs of several machines or code versions may be pooled
    (then marked)."""

    metric: str = "success"
    plot_x: str = "steps"
    allow_mixed: bool = False


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '0,4,7' -> [0, 4, 7]."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--seeds {text}: give a count (3) or a comma-separated list (0,1,2)") from None
    if len(values) == 1 and "," not in text:
        if values[0] < 1:
            raise UserError(f"--seeds {text}: a count must be at least 1")
        return list(range(values[0]))
    if not values or len(set(values)) != len(values):
        raise UserError(f"--seeds {text}: give a count (3) or distinct seeds (0,1,2)")
    return values


def load_configs(plan: Plan) -> dict:
    """Every arm's resolved config (a bad one stops here, before any run); all must share one environment."""
    from r3l.config import load_config

    configs = {arm.label: load_config(arm.config, [*arm.overrides, *plan.overrides]) for arm in plan.arms}
    environments = {label: config.env.name for label, config in configs.items()}
    if len(set(environments.values())) > 1:
        raise UserError(
            "a comparison runs on one environment; these differ: "
            + ", ".join(f"{label}: {env}" for label, env in environments.items())
        )
    return configs


def relative_out(out: Path) -> Path:
    """The comparison's folder as the runs will record it: relative to the working directory where it lies
    under it (so no run writes a path of this machine)."""
    return Path(display_path(out))


def overlap_note(config) -> str:
    """The held-out/training overlap line of the comparison's environment (as the runs draw their tasks)."""
    from r3l.build import env_factory, held_out_tasks

    env = env_factory(config)()
    try:
        exact, near, total = overlap_counts(held_out_tasks(config, env), env.tasks("train"), env.near_duplicate_key)
        line = overlap_line(exact, near, total, env.near_duplicate_rule)
        return line + (
            " Held-out problems that were training problems were left out (eval.exclude_train_overlap)."
            if config.eval.exclude_train_overlap
            else ""
        )
    finally:
        getattr(env, "close", lambda: None)()


def format_rule(config):
    """The environment's own rule for a reply that misses its answer format, for evaluations that did not record
    it (single-turn environments; None otherwise)."""
    from r3l.build import env_factory
    from r3l.envs import SingleTurnEnv

    env = env_factory(config)()
    if isinstance(env, SingleTurnEnv):
        return env.answer_format_missing
    getattr(env, "close", lambda: None)()
    return None


def start_plan(
    names: Sequence[str], overrides: Sequence[str], seeds: str, base: str | None, out: Path | None, budget
) -> tuple[Plan, Path]:
    """The comparison's plan, new or continued (its budget merged with this command's flags and checked against
    its arms before anything is written or run), and its folder."""
    if names:
        plan = Plan(make_arms(names, base), parse_seeds(seeds), list(overrides), budget)
        env = load_configs(plan)[plan.arms[0].label].env.name
        out = out or Path("runs") / f"compare-{env}-{datetime.now():%Y%m%d-%H%M%S}"
        if (out / "compare.json").exists():
            earlier = read_plan(out)
            if not earlier.same_design(plan):
                raise UserError(
                    f"{out} holds another comparison; choose another --out, or give no configs to continue the one "
                    "there"
                )
            plan = replace(plan, budget=merged_budget(earlier.budget, budget))
    elif out is None:
        raise UserError(
            "name the configs to compare (YAML files or algorithm presets), or --out DIR of an "
            "earlier comparison to continue it"
        )
    else:
        earlier = read_plan(out)
        plan = replace(earlier, budget=merged_budget(earlier.budget, budget))
        if plan == earlier:
            return plan, out
    if plan.budget is not None:
        check_budget(plan.budget, [arm.label for arm in plan.arms])
    write_plan(out, plan)
    return plan, out


def run_compare(
    names: Sequence[str],
    overrides: Sequence[str],
    seeds: str,
    base: str | None,
    out: Path | None,
    parallel: int,
    table_only: bool,
    *,
    match_budget: str | None = None,
    budget_of: str | None = None,
    budget_for: Sequence[str] = (),
    reading: Reading = Reading(),
    allow_code_change: bool = False,
) -> tuple[Path, str, int]:
    """(output folder, the tables, how many runs failed)."""
    if match_budget is not None and match_budget not in ("tokens", "seconds"):
        raise UserError(f"--match-budget {match_budget}: use tokens or seconds")
    if reading.metric not in METRICS:
        raise UserError(f"--metric {reading.metric}: use one of {', '.join(METRICS)}")
    if reading.plot_x not in PLOT_AXES:
        raise UserError(f"--plot-x {reading.plot_x}: use one of {', '.join(PLOT_AXES)}")
    if (budget_of is not None or budget_for) and match_budget is None:
        raise UserError(
            "--budget-of and --budget-for choose the arms of an equal-budget reading; give --match-budget "
            "tokens|seconds"
        )
    budget = Budget(match_budget, budget_of, arms=tuple(budget_for)) if match_budget else None
    plan, out = start_plan(names, overrides, seeds, base, out, budget)
    out = relative_out(out)
    configs = load_configs(plan)
    first = configs[plan.arms[0].label]
    rule = format_rule(first)

    def read(specs) -> list[RunResult]:
        return [read_run(spec, reading.metric, rule) for spec in specs]

    def run(specs) -> list:
        return [] if table_only else run_all(specs, plan.overrides, parallel, console.print, allow_code_change)

    specs = plan_runs(plan.arms, plan.seeds, out)
    failed = run(specs)
    results = read(specs)
    if plan.budget is not None and not failed:
        budget = plan.budget
        if budget.target is None:
            reference, target = reference_cost(results, budget)
            budget = replace(budget, target=target, reference=reference)
            plan = replace(plan, budget=budget)
            write_plan(out, plan)
        steps = {label: (config.train.steps, config.eval.every) for label, config in configs.items()}
        under = arms_under_budget(plan.arms, results, budget, steps)
        for name in sorted(set(budget.arms) - {arm.label.rsplit("@", 1)[0] for arm in under}):
            console.print(f"--budget-for {name}: it already costs the budget or more (or is the reference): not run on")
        extra = plan_runs(under, plan.seeds, out)
        failed += run(extra)
        results += read(extra)
    notes = [overlap_note(first), settings_note(results), code_note(results), machine_note(results)]
    if plan.budget is not None and plan.budget.target is not None:
        notes.insert(0, budget_note(plan.budget, results))
    pooled = mixing(results)
    if pooled and not reading.allow_mixed:
        raise UserError(refusal(pooled))
    if pooled:
        results = marked(results)
        notes.insert(0, mixing_note(pooled))
    markdown, csv = tables(results, notes)
    (out / "compare.md").write_text(markdown)
    (out / "compare.csv").write_text(csv)
    plot(results, out / "compare.png", reading.plot_x, reading.metric)
    return out, markdown, len(failed)
