"""Wall time per phase of one exploration step (base episodes, reflections, retries ...), as metrics; a phase
that runs long says so on the console while it runs, so no command sits silent for minutes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from r3l.logging.heartbeat import ANNOUNCE_AFTER_S, ANNOUNCE_EVERY_S, Heartbeat, say


class PhaseClock:
    """`with clock.phase("reflect"): ...` adds the block's wall seconds to `phase_seconds/reflect`."""

    def __init__(
        self, say: Callable[[str], None] = say, after_s: float = ANNOUNCE_AFTER_S, every_s: float = ANNOUNCE_EVERY_S
    ) -> None:
        self.seconds: dict[str, float] = {}
        self.say, self.after_s, self.every_s = say, after_s, every_s

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        heartbeat = Heartbeat(f"phase {name}", self.say, self.after_s, self.every_s)
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + heartbeat.stop()

    def metrics(self) -> dict[str, float]:
        return {f"phase_seconds/{name}": seconds for name, seconds in self.seconds.items()}
