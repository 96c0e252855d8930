"""A heartbeat for long phases: a line on the console after a while and then now and again, so that no command
sits silent for minutes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from r3l.logging.progress import console

ANNOUNCE_AFTER_S = 10.0  # a phase shorter than this passes without a word
ANNOUNCE_EVERY_S = 30.0


def say(line: str) -> None:
    console.print(line, soft_wrap=True, markup=False, highlight=False)


class Heartbeat:
    """Calls `say` with the elapsed seconds `after_s` after it starts and then every `every_s`, from a daemon
    timer thread, until stopped; `spoke` tells whether it said anything."""

    def __init__(self, label: str, say: Callable[[str], None], after_s: float, every_s: float):
        self.label, self.say, self.every_s = label, say, every_s
        self.started = time.perf_counter()
        self.spoke = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(after_s,), daemon=True, name=f"heartbeat-{label}")
        self.thread.start()

    def _run(self, wait_s: float) -> None:
        while not self.stopped.wait(wait_s):
            self.spoke = True
            self.say(f"{self.label}: {time.perf_counter() - self.started:.0f} s so far")
            wait_s = self.every_s

    def stop(self) -> float:
        """Stop; the seconds since the start (said once more if anything was said)."""
        self.stopped.set()
        self.thread.join()
        seconds = time.perf_counter() - self.started
        if self.spoke:
            self.say(f"{self.label}: done in {seconds:.0f} s")
        return seconds
