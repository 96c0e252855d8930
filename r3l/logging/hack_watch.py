"""One line for `r3l report`: did the run's rewarded answers copy expressions out of their prompts?"""

from __future__ import annotations

import json
from pathlib import Path

from r3l.logging.sinks import METRICS_FILE, read_metrics

TRAIN_KEY = "hack/prompt_copies"


def hack_watch_line(run_dir: Path) -> str | None:
    """Training steps whose rewarded episodes copied the prompt, and the held-out counts per evaluation;
    None for a run that logged neither (written before the watch existed, or a bench)."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir) if (run_dir / METRICS_FILE).is_file() else []
    shares = [row[TRAIN_KEY] for row in rows if isinstance(row.get(TRAIN_KEY), (int, float))]
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
    verdict = "WARNING, the verifier may be exploited" if flagged or any(held_out.values()) else "none seen"
    return f"reward-hacking watch ({verdict}): " + "; ".join(parts)
