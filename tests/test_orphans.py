"""A child registered with `stop_with_this_process` does not outlive its parent, however the parent ends."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from r3l.orphans import child_processes, start_time, stop_with_this_process, watch

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the watchdog reads /proc (Linux)")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if start_time(pid) is None:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("ending", ["os.abort()", "os.kill(os.getpid(), signal.SIGKILL)", "sys.exit(0)"])
def test_a_registered_child_is_stopped_once_its_parent_is_gone(ending):
    parent = textwrap.dedent(
        f"""
        import os, signal, subprocess, sys
        from r3l.orphans import stop_with_this_process
        child = subprocess.Popen({SLEEPER!r})
        assert stop_with_this_process([child.pid])
        print(child.pid, flush=True)
        {ending}
        """
    )
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60)
    child = int(done.stdout.split()[0])
    try:
        assert gone_within(child, 15.0), f"the child {child} outlived its parent ({ending}): {done.stderr[-500:]}"
    finally:
        if start_time(child) is not None:
            os.kill(child, 9)


def test_the_watchdog_stops_what_it_recorded_and_leaves_a_reused_pid_alone():
    """Run in this process: the pipe closes at once, the recorded child is stopped and one recorded with another
    start time (its pid given to a new process) is not."""
    recorded, reused = subprocess.Popen(SLEEPER), subprocess.Popen(SLEEPER)
    try:
        read_end, write_end = os.pipe()
        os.close(write_end)
        watch(read_end, [(recorded.pid, start_time(recorded.pid)), (reused.pid, "0")])
        os.close(read_end)
        assert recorded.wait(timeout=5) == -15  # SIGTERM was enough
        assert reused.poll() is None
    finally:
        for process in (recorded, reused):
            process.kill()
            process.wait()


def test_nothing_to_watch_starts_no_watchdog():
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    assert start_time(finished.pid) is None
    assert stop_with_this_process([finished.pid]) is False


def test_child_processes_finds_children_and_grandchildren():
    nested = f"import subprocess; print(subprocess.Popen({SLEEPER!r}).pid, flush=True); import time; time.sleep(120)"
    child = subprocess.Popen([sys.executable, "-c", nested], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    try:
        assert {child.pid, grandchild} <= child_processes()
        assert os.getpid() not in child_processes()
    finally:
        os.kill(grandchild, 9)
        child.kill()
        child.wait()
        child.stdout.close()
