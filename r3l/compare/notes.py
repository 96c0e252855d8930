"""The lines under a comparison's table that a reviewer asks for (the held-out/training overlap line is
r3l/envs/overlap.py's): on which settings the runs differ besides their algorithm, and which code and machines
they ran on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from r3l.compare.summary import RunResult

IGNORED_PREFIXES = ("run.", "logging.")  # a run's name, folder and seed, and where it logs, are no difference
ALGORITHM = "algorithm."


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def differing_settings(results: Sequence[RunResult], prefix: str = "") -> list[str]:
    """One line per setting whose value is not the same in every run (run.* and logging.* aside; with `prefix`,
    only settings under it, else only settings outside algorithm.*): its value per arm, and per seed where an
    arm's seeds differ. A setting one arm has and another lacks shows 'absent'."""
    runs = [r for r in results if r.settings]

    def chosen(key: str) -> bool:
        if key.startswith(IGNORED_PREFIXES):
            return False
        return key.startswith(prefix) if prefix else not key.startswith(ALGORITHM)

    keys = sorted({key for r in runs for key in r.settings if chosen(key)})
    lines = []
    for key in keys:
        values = {(r.label, r.seed): r.settings.get(key, "absent") for r in runs}
        if len({_shown(v) for v in values.values()}) <= 1:
            continue
        if prefix and "absent" in values.values():  # a setting of one algorithm only: the algorithm says it
            continue
        parts = []
        for label in dict.fromkeys(r.label for r in runs):
            seeds = {seed: value for (name, seed), value in values.items() if name == label}
            shown = {_shown(v) for v in seeds.values()}
            if len(shown) == 1:
                parts.append(f"{label} {shown.pop()}")
            else:
                parts.append(f"{label} " + ", ".join(f"seed {s}: {_shown(v)}" for s, v in sorted(seeds.items())))
        lines.append(f"- `{key}`: " + "; ".join(parts))
    return lines


def settings_note(results: Sequence[RunResult]) -> str:
    lines = differing_settings(results)
    own = differing_settings(results, ALGORITHM)
    text = (
        "Settings on which runs differ besides their algorithm (runs' names, seeds and logging aside):\n"
        + "\n".join(lines)
        if lines
        else "Settings: besides their algorithm and seed, every run has the same settings."
    )
    if own:
        text += "\n\nTheir algorithms differ in (settings every arm has; each algorithm's own settings aside):\n" + (
            "\n".join(own)
        )
    return text


def code_note(results: Sequence[RunResult]) -> str:
    """Which versions of the code the runs ran (source hashes from provenance.jsonl)."""
    recorded = [r for r in results if r.code]
    if not recorded:
        return "Code: the runs recorded no code version (made before provenance.jsonl)."
    versions = {version for r in recorded for version in r.code}
    mixed = [f"{r.label} seed {r.seed}" for r in recorded if len(r.code) > 1]
    line = f"Code: {len(versions)} version(s) of the source across {len(recorded)} run(s) that recorded one"
    unrecorded = [r for r in results if not r.code]
    silent = sum(1 for r in unrecorded if r.settings)  # a run with a config, made before provenance.jsonl
    remarks = []
    if silent:
        remarks.append(f"{silent} recorded none")
    if len(unrecorded) > silent:
        remarks.append(f"{len(unrecorded) - silent} not run yet")
    if remarks:
        line += f" ({', '.join(remarks)})"
    return line + (f"; resumed under other code: {', '.join(mixed)}." if mixed else ".")


def _seeds(seeds: Sequence[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + ", ".join(str(s) for s in seeds)


def machine_note(results: Sequence[RunResult]) -> str:
    """Which machines the runs ran on (provenance.jsonl): wall times compare only on one machine, and sampled
    numbers of the same code and seed differ from one processor or library version to another."""
    recorded = [r for r in results if r.machines]
    if not recorded:
        return "Machines: the runs recorded none (made before provenance.jsonl named the machine)."
    machines = list(dict.fromkeys(name for r in recorded for name in r.machines))
    silent = sum(1 for r in results if r.settings and not r.machines)
    unrecorded = f" ({silent} run(s) recorded none)" if silent else ""
    if len(machines) == 1:
        return f"Machines: every run that recorded one ran on {machines[0]}{unrecorded}."
    lines = [
        f"Machines: {len(machines)} across the runs{unrecorded}; wall times compare only between runs on one, and "
        "the same code and seed sample differently on another:"
    ]
    for name in machines:
        runs: dict[str, list[int]] = {}
        for r in recorded:
            if name in r.machines:
                runs.setdefault(r.label, []).append(r.seed)
        lines.append(f"- {name}: " + "; ".join(f"{label} {_seeds(sorted(seeds))}" for label, seeds in runs.items()))
    return "\n".join(lines)
