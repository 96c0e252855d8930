"""Which runs a comparison has (arm x seed), where each lives, what state it is in and how to run it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from r3l.config import PRESET_DIR
from r3l.errors import UserError


@dataclass(frozen=True)
class Arm:
    """One config of the comparison: a YAML file, or an algorithm preset applied to the base config."""

    label: str
    config: str | None  # a YAML path (or None: the base config)
    overrides: tuple[str, ...]
    last: tuple[str, ...] = ()  # applied after the comparison's own overrides (a budget arm's step cap)


@dataclass(frozen=True)
class RunSpec:
    arm: Arm
    seed: int
    directory: Path

    def state(self) -> str:
        """'done' (finished: summary.json), 'partial' (a checkpoint to resume from) or 'new'."""
        if (self.directory / "summary.json").exists():
            return "done"
        if (self.directory / "checkpoints" / "latest").exists():
            return "partial"
        return "new"


def algorithm_presets() -> list[str]:
    return sorted(path.stem for path in (PRESET_DIR / "algorithms").glob("*.yaml"))


def make_arms(names: Sequence[str], base: str | None) -> list[Arm]:
    """An arm per name: a YAML file, or an algorithm preset (on `base`); labels are unique."""
    arms, presets = [], algorithm_presets()
    for name in names:
        path = Path(name)
        if path.suffix in (".yaml", ".yml"):
            if not path.exists():
                raise UserError(f"config file {name} does not exist")
            arms.append(Arm(path.stem, str(path), ()))
        elif name in presets:
            arms.append(Arm(name, base, (f"algorithm={name}",)))
        else:
            raise UserError(f"'{name}' is neither a YAML file nor an algorithm preset ({', '.join(presets)})")
    labels = [arm.label for arm in arms]
    if len(set(labels)) != len(labels):
        raise UserError(
            f"two configs share the name '{next(label for label in labels if labels.count(label) > 1)}'; give "
            "each its own file name"
        )
    return arms


def plan_runs(arms: Sequence[Arm], seeds: Sequence[int], out: Path) -> list[RunSpec]:
    """Seed by seed (every arm's first seed, then every arm's second, ...), so that a comparison stopped part
    way holds the same seeds in every arm."""
    return [RunSpec(arm, seed, out / arm.label / f"seed{seed}") for seed in seeds for arm in arms]


def train_command(spec: RunSpec, overrides: Sequence[str], allow_code_change: bool = False) -> list[str]:
    """The `r3l train` command line of a run: resume it where it stopped, or start it in its directory."""
    if spec.state() == "partial":
        resume = [sys.executable, "-m", "r3l.cli", "train", "--resume", str(spec.directory)]
        return [*resume, "--allow-code-change"] if allow_code_change else resume
    config = [spec.arm.config] if spec.arm.config else []
    return [
        sys.executable,
        "-m",
        "r3l.cli",
        "train",
        *config,
        *spec.arm.overrides,
        *overrides,
        *spec.arm.last,
        f"run.seed={spec.seed}",
        f"run.dir={spec.directory.parent}",
        f"run.name={spec.directory.name}",
        "logging.progress=false",
    ]


def run_all(
    specs: Sequence[RunSpec], overrides: Sequence[str], parallel: int, log, allow_code_change: bool = False
) -> list[RunSpec]:
    """Run every unfinished run, `parallel` at a time, each in its own process (its output in
    RUN/compare.log); returns the runs that failed."""
    pending = [spec for spec in specs if spec.state() != "done"]
    running: list[tuple[RunSpec, subprocess.Popen]] = []
    failed = []
    while pending or running:
        while pending and len(running) < parallel:
            spec = pending.pop(0)
            if spec.state() == "new" and spec.directory.exists():  # died before its first checkpoint: start over
                shutil.rmtree(spec.directory)
            spec.directory.parent.mkdir(parents=True, exist_ok=True)
            log(f"{spec.arm.label} seed {spec.seed}: {spec.state()} -> running")
            with open(spec.directory.parent / f"{spec.directory.name}.log", "a") as handle:  # the child keeps its own
                command = train_command(spec, overrides, allow_code_change)
                running.append((spec, subprocess.Popen(command, stdout=handle, stderr=handle)))
        spec, process = running.pop(0)
        if process.wait() != 0:
            failed.append(spec)
            log(
                f"{spec.arm.label} seed {spec.seed}: failed (exit {process.returncode}; see "
                f"{spec.directory.parent / (spec.directory.name + '.log')})"
            )
        else:
            log(f"{spec.arm.label} seed {spec.seed}: done")
    return failed


@dataclass(frozen=True)
class Budget:
    """`--match-budget`: arms cheaper than the reference arm (`of`; None: the costliest) run on to its mean
    cost in generated tokens or seconds (`arms`: only these of them; empty: every one); `target` is fixed once the
    reference has finished."""

    by: str
    of: str | None = None
    target: float | None = None
    reference: str | None = None
    arms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What a comparison is (compare.json), so `--table-only` and a resumed compare read the same plan."""

    arms: list[Arm]
    seeds: list[int]
    overrides: list[str]
    budget: Budget | None = None

    def same_design(self, other: Plan) -> bool:
        """The same arms, seeds and overrides (a budget may be added to a finished comparison)."""
        return (self.arms, self.seeds, self.overrides) == (other.arms, other.seeds, other.overrides)


def write_plan(out: Path, plan: Plan) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "arms": [{"label": a.label, "config": a.config, "overrides": list(a.overrides)} for a in plan.arms],
        "seeds": list(plan.seeds),
        "overrides": list(plan.overrides),
    }
    if plan.budget is not None:
        record["budget"] = asdict(plan.budget)
    (out / "compare.json").write_text(json.dumps(record, indent=1))


def read_plan(out: Path) -> Plan:
    path = out / "compare.json"
    if not path.exists():
        raise UserError(f"{out} holds no comparison (compare.json); run r3l compare CONFIGS --out {out} first")
    record = json.loads(path.read_text())
    arms = [Arm(a["label"], a["config"], tuple(a["overrides"])) for a in record["arms"]]
    budget = None
    if record.get("budget"):
        budget = Budget(**{**record["budget"], "arms": tuple(record["budget"].get("arms", ()))})
    return Plan(arms, record["seeds"], record["overrides"], budget)
