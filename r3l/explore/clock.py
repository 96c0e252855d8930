"""Wall time per phase of one exploration step (base episodes, reflections, retries ...), as metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class PhaseClock:
    """`with clock.phase("reflect"): ...` adds the block's wall seconds to `phase_seconds/reflect`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        return {f"phase_seconds/{name}": seconds for name, seconds in self.seconds.items()}
