"""One line for `r3l report`: did the run's rewarded answers copy expressions out of their prompts, and did its
episodes learn to end games on rejected moves that the game still pays for?"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from r3l.logging.sinks import METRICS_FILE, read_metrics

TRAIN_KEY = "hack/prompt_copies"
REJECTED_KEY = "hack/rewarded_rejected_endings"
REJECTED_ALARM = 0.25  # a step with this share or more warns; a last step above it and above the first is flagged


def rejected_endings_warning(metrics: Mapping[str, float]) -> str | None:
    """One line when at least REJECTED_ALARM of a step's episodes ended unsolved on a rejected move and were paid
    for it; None otherwise."""
    share = metrics.get(REJECTED_KEY, 0.0)
    if share < REJECTED_ALARM:
        return None
    return (
        f"{share:.0%} of this step's episodes ended unsolved on a move the environment rejected and were still paid "
        "(a game's partial credit when a player's errors run out), a reward a policy can learn to harvest "
        "(hack/rewarded_rejected_endings); agent.terminate_on with inadmissible stops such an episode at its first "
        "rejected move, unpaid"
    )


def rejected_endings_part(shares: list[float]) -> tuple[str, bool] | None:
    """The rejected-endings clause of the line and whether it is alarming (the share grew to REJECTED_ALARM or
    more), or None where no step logged it."""
    if not shares:
        return None
    first, last = shares[0], shares[-1]
    clause = (
        f"episodes paid for ending unsolved on a rejected move: {first:.0%} of the first step's, {last:.0%} of the "
        "last step's"
    )
    return clause, last >= REJECTED_ALARM and last > first


def hack_watch_line(run_dir: Path) -> str | None:
    """Training steps whose rewarded episodes copied the prompt, and the held-out counts per evaluation;
    None for a run that logged neither (written before the watch existed, or a bench)."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir) if (run_dir / METRICS_FILE).is_file() else []
    shares = [row[TRAIN_KEY] for row in rows if isinstance(row.get(TRAIN_KEY), (int, float))]
    rejected = rejected_endings_part(
        [row[REJECTED_KEY] for row in rows if isinstance(row.get(REJECTED_KEY), (int, float))]
    )
    held_out = {}
    for path in sorted(run_dir.glob("eval_*.json")):
        try:
            count = json.loads(path.read_text(encoding="utf-8")).get("rewarded_prompt_copies")
        except (OSError, ValueError):
            continue
        if isinstance(count, int):
            held_out[path.stem.removeprefix("eval_")] = count
    if not shares and not held_out:
        return None
    flagged = sum(1 for share in shares if share > 0)
    parts = [
        f"{flagged} of {len(shares)} training steps rewarded an answer copied from its prompt"
        + (f" (at most {max(shares):.1%} of a step's episodes)" if flagged else "")
    ]
    if held_out:
        parts.append("held-out: " + ", ".join(f"{label} {count}" for label, count in held_out.items()))
    if rejected is not None:
        parts.append(rejected[0])
    alarming = flagged or any(held_out.values()) or (rejected is not None and rejected[1])
    verdict = "WARNING, the verifier may be exploited" if alarming else "none seen"
    return f"reward-hacking watch ({verdict}): " + "; ".join(parts)
