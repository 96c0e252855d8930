"""What a child process must be shown to see the right GPUs: the machine's own ids of this process's GPUs, and
environment variables set only while the child starts."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def physical_gpu_ids(indices: tuple[int, ...], visible: str | None = None) -> list[str]:
    """The machine's ids of this process's GPU indices, through CUDA_VISIBLE_DEVICES where it is set (what a
    child process, such as a Ray raylet, must be given to see the same GPUs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if not visible:
        return [str(index) for index in indices]
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    return [ids[index] for index in indices]


@contextmanager
def environment_while(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ inside the block (a child process started there reads them), each name restored to
    what it was (or removed) after it, also after an error."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
