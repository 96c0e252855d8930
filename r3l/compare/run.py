"""`r3l compare` from start to table: check every config, run what is unfinished, write the table and plot."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from r3l.compare.plan import make_arms, plan_runs, read_plan, run_all, write_plan
from r3l.compare.plot import plot
from r3l.compare.summary import read_run, table
from r3l.errors import UserError
from r3l.logging import console


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


def check_configs(arms, overrides: Sequence[str]) -> str:
    """Load every arm's config (a bad one stops here, before any run); all must share one environment."""
    from r3l.config import load_config

    environments = {arm.label: load_config(arm.config, [*arm.overrides, *overrides]).env.name for arm in arms}
    if len(set(environments.values())) > 1:
        raise UserError(
            "a comparison runs on one environment; these differ: "
            + ", ".join(f"{label}: {env}" for label, env in environments.items())
        )
    return next(iter(environments.values()))


def run_compare(
    names: Sequence[str],
    overrides: Sequence[str],
    seeds: str,
    base: str | None,
    out: Path | None,
    parallel: int,
    table_only: bool,
) -> tuple[Path, str, int]:
    """(output folder, the table, how many runs failed)."""
    if names:
        arms, seed_list = make_arms(names, base), parse_seeds(seeds)
        env = check_configs(arms, overrides)
        out = out or Path("runs") / f"compare-{env}-{datetime.now():%Y%m%d-%H%M%S}"
        if (out / "compare.json").exists() and read_plan(out) != (arms, seed_list, list(overrides)):
            raise UserError(
                f"{out} holds another comparison; choose another --out, or give no configs to continue the one there"
            )
        write_plan(out, arms, seed_list, overrides)
    elif out is not None:
        arms, seed_list, overrides = read_plan(out)
        check_configs(arms, overrides)
    else:
        raise UserError(
            "name the configs to compare (YAML files or algorithm presets), or --out DIR of an "
            "earlier comparison to continue it"
        )
    specs = plan_runs(arms, seed_list, out)
    failed = [] if table_only else run_all(specs, overrides, parallel, lambda line: console.print(line))
    results = [read_run(spec) for spec in specs]
    markdown, csv = table(results)
    (out / "compare.md").write_text(markdown)
    (out / "compare.csv").write_text(csv)
    plot(results, out / "compare.png")
    return out, markdown, len(failed)
