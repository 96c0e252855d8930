"""Child processes that must not outlive this one, however it ends: an abort or `kill -9` runs no cleanup, so a
watchdog process (`python -m r3l.orphans`) waits on a pipe only this process holds open and, once it closes,
stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence

GRACE_S = 10.0  # between SIGTERM and SIGKILL

_watchdogs: list[tuple[subprocess.Popen, int]] = []  # (a watchdog, this process's end of its pipe), kept open


def _stat(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (field 3; the command name before it may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) >= 20 else None


def child_processes() -> set[int]:
    """This process's children, theirs, and so on (empty without /proc)."""
    parent_of = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None:
            parent_of[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat; None: no such process, one
    that has ended (a zombie), or no /proc). A pid with the start time recorded is the process recorded, not a new
    one given its number."""
    fields = _stat(pid)
    return None if fields is None or fields[0] == "Z" else fields[19]


def stop_with_this_process(pids: Iterable[int]) -> bool:
    """Stop `pids` (SIGTERM, then SIGKILL after GRACE_S) once this process is gone, by any means. False where
    there is nothing to watch (no such processes, or no /proc: not Linux)."""
    watched = [f"{pid}:{start}" for pid in pids if (start := start_time(pid)) is not None]
    if not watched:
        return False
    read_end, write_end = os.pipe()  # not inheritable: children started with exec never hold the write end
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "r3l.orphans", str(read_end), *watched],
        pass_fds=(read_end,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the terminal's process group is not the watchdog's
    )
    os.close(read_end)
    _watchdogs.append((watchdog, write_end))
    return True


def watch(read_end: int, watched: Sequence[tuple[int, str]]) -> None:
    """The watchdog: wait until the pipe closes, then stop what is still running of `watched` (pid, start time)."""
    while os.read(read_end, 4096):
        pass

    def running() -> list[int]:
        return [pid for pid, start in watched if start_time(pid) == start]

    for sent, grace_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0.0)):
        for pid in running():
            try:
                os.kill(pid, sent)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while running() and time.monotonic() < deadline:
            time.sleep(0.2)


if __name__ == "__main__":
    watch(int(sys.argv[1]), [(int(pid), start) for pid, start in (pair.split(":") for pair in sys.argv[2:])])
