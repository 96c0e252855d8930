"""The machine's own ids of this process's GPUs (what a child process must be shown to see the same ones)."""

from __future__ import annotations

import os


def physical_gpu_ids(indices: tuple[int, ...], visible: str | None = None) -> list[str]:
    """The machine's ids of this process's GPU indices, through CUDA_VISIBLE_DEVICES where it is set (what a
    child process, such as a Ray raylet, must be given to see the same GPUs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return [str(index) for index in indices]
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    return [ids[index] for index in indices]
