"""bench.json, bench.md and bench_details.json: every section's summary, table and per-step records,
with the headline ratio at the top of bench.json (the file `r3l report` plots)."""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch

from r3l.bench.registry import Section, SectionResult
from r3l.provenance import machine as provenance_machine

JSON_FILE, MARKDOWN_FILE, DETAILS_FILE = "bench.json", "bench.md", "bench_details.json"


def machine() -> dict:
    """What a run's provenance records of the machine (provenance.machine), with the platform and threads."""
    return {
        **provenance_machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }


def headline(results: dict[str, SectionResult]) -> dict:
    """The headline figures (README, docs/BENCH.md), lifted to the top level of bench.json."""
    out = {}
    side = results.get("side_by_side")
    if side and "step_time_ratio_trl_over_r3l" in side.data:
        out["median_step_time_ratio_trl_over_r3l"] = side.data["step_time_ratio_trl_over_r3l"]["median"]
    limits = results.get("limits")
    if limits:
        ours = limits.data["sides"].get("r3l", {})
        for key in ("train_mfu", "decode_efficiency"):
            if key in ours:
                out[f"r3l_{key}"] = ours[key]
    return out


def write(out_dir: Path, command: str, sections: list[Section], results: dict[str, SectionResult]) -> str:
    """Write bench.json and bench.md into `out_dir`; return the Markdown."""
    record = {
        "command": command,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        **headline(results),
        "sections": {name: result.data for name, result in results.items()},
    }
    (out_dir / JSON_FILE).write_text(json.dumps(record, indent=1))
    details = {name: result.details for name, result in results.items() if result.details}
    (out_dir / DETAILS_FILE).write_text(json.dumps(details, indent=1))
    parts = [f"# r3l bench\n\n`{command}`\n"]
    parts += [f"## {s.title}\n\n{results[s.name].markdown}" for s in sections if s.name in results]
    markdown = "\n".join(parts)
    (out_dir / MARKDOWN_FILE).write_text(markdown)
    return markdown
