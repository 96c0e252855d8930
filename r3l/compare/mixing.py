"""Whether a reading pools runs of different machines or code versions: within one arm (its seeds, or one run's
sessions), or across the arms a difference pairs. The same code and seed sample differently on another processor
or library version, and another version of the code is another method: such a pool is refused unless asked for,
and then marked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from r3l.compare.summary import RunResult

MARK = " [mixed]"


def _spread(runs: Sequence[RunResult], attribute: str) -> dict[str, list[str]]:
    """value -> the runs ('arm seed N') that recorded it, in first-seen order."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        for value in getattr(run, attribute):
            seen.setdefault(value, []).append(f"{run.label} seed {run.seed}")
    return seen


def _listing(spread: dict[str, list[str]], short: bool) -> str:
    return "; ".join(f"{value[:12] if short else value}: {', '.join(runs)}" for value, runs in spread.items())


KINDS = (("machines", "machines", False), ("code", "code versions", True))  # (attribute, words, shorten values)


def mixing(results: Sequence[RunResult]) -> list[str]:
    """What the reading pools, one line each (none: one machine, one code version): runs that ran (a config
    recorded) but recorded no machine or code version, arms whose runs (or one run's sessions) span several, and
    arms each on one of their own that differ from each other (every difference pairs them)."""
    ran = [r for r in results if r.settings]
    reasons: list[str] = []
    unrecorded = [f"{r.label} seed {r.seed}" for r in ran if not r.machines or not r.code]
    if unrecorded:
        reasons.append(f"{len(unrecorded)} run(s) recorded no machine or code version: {', '.join(unrecorded)}")
    for attribute, words, short in KINDS:
        within = False
        for label in dict.fromkeys(r.label for r in ran):
            spread = _spread([r for r in ran if r.label == label], attribute)
            if len(spread) > 1:
                within = True
                reasons.append(f"arm {label} ran on {len(spread)} {words} ({_listing(spread, short)})")
        spread = _spread(ran, attribute)
        if len(spread) > 1 and not within:
            reasons.append(f"the arms ran on {len(spread)} {words} ({_listing(spread, short)})")
    return reasons


def refusal(reasons: Sequence[str]) -> str:
    more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return (
        f"this reading pools runs of different machines or code versions: {reasons[0]}{more}; rerun them on one "
        f"machine at one commit, or pass --allow-mixed to read them anyway (every arm then marked{MARK})"
    )


def marked(results: Sequence[RunResult]) -> list[RunResult]:
    """The results with every arm's label marked: in a mixed reading every difference pools machines or code."""
    return [replace(r, label=r.label + MARK) for r in results]


def mixing_note(reasons: Sequence[str]) -> str:
    return f"Mixed (read with --allow-mixed; every arm marked{MARK}):\n" + "\n".join(f"- {r}" for r in reasons)
