"""Drawn task items kept on disk between processes (R3L_CACHE/tasks, default ~/.cache/r3l/tasks), for sources whose
draws are slow: reasoning-gym's countdown takes ~5-10 ms an item, and a run's first batch, drawn from a shuffled
train split, makes nearly the whole split, so every run started alike spent seconds redrawing the same items.

Items are kept as JSON, and a freshly drawn item is read back through JSON too, so a run sees the same items
whether they were drawn or loaded. A file is keyed by everything the draws depend on; it is replaced whole
(written aside, then renamed), so runs started together each write a valid prefix of the same sequence."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

STORE_VERSION = 1  # part of every key: a change in what is kept makes old files unused


def store_path(root: Path, key: Any) -> Path:
    digest = hashlib.sha256(repr((STORE_VERSION, key)).encode()).hexdigest()[:24]
    return root / "tasks" / f"{digest}.json"


def as_json(item: Any) -> Any:
    """The item as the store keeps it (tuples become lists)."""
    return json.loads(json.dumps(item))


def load(path: Path) -> tuple[list[dict], int]:
    """(items, draws made to find them) from `path`; nothing where it is absent or unreadable."""
    try:
        stored = json.loads(path.read_text())
        items, draws = stored["items"], int(stored["draws"])
    except (OSError, ValueError, KeyError, TypeError):
        return [], 0
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items) or draws < len(items):
        return [], 0
    return items, draws


def save(path: Path, items: list[dict], draws: int) -> None:
    """Replace `path` with these items; a store that cannot be written is skipped (it only saves time)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        with os.fdopen(handle, "w") as out:
            json.dump({"items": items, "draws": draws}, out)
        os.replace(partial, path)
    except OSError:
        return
