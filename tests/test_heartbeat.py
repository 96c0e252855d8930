"""A phase that runs long says so while it runs (no command sits silent for minutes); a short one says nothing."""

import time

from r3l.explore.clock import PhaseClock


def test_a_long_phase_is_announced_while_it_runs_and_when_it_ends():
    lines: list[str] = []
    clock = PhaseClock(say=lines.append, after_s=0.05, every_s=0.05)
    with clock.phase("reflect"):
        time.sleep(0.3)
    assert lines[0].startswith("phase reflect: ") and lines[0].endswith(" s so far")
    assert len(lines) >= 3 and lines[-1].startswith("phase reflect: done in ")
    assert clock.metrics()["phase_seconds/reflect"] >= 0.3


def test_a_short_phase_passes_without_a_word_and_its_seconds_add_up():
    lines: list[str] = []
    clock = PhaseClock(say=lines.append, after_s=5.0)
    for _ in range(2):
        with clock.phase("base"):
            time.sleep(0.01)
    assert lines == []
    assert 0.02 <= clock.metrics()["phase_seconds/base"] < 1.0
