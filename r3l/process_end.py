"""The end of an `r3l` command's process without the interpreter's teardown.

Python's finalization clears every module and collects what they held; with torch and transformers loaded that
takes ~0.7-0.9 s on a 2-core Xeon, after the command has finished, on every command (and on every run that
`r3l compare` starts). What that teardown does that matters is done here first, in Python's own order: the
non-daemon threads are waited for, the atexit handlers run (logging's flush, multiprocessing's reaping of its
children, Ray's and W&B's shutdowns, weakref finalizers), the standard streams are flushed; then `os._exit`.
Files r3l keeps open are flushed as they are written (logging/sinks.py) and closed by the commands.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_status(code: object) -> int:
    """The process's exit status for `SystemExit(code)`, as the interpreter reads it: None is 0, an int is
    itself, anything else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def end_process(status: int) -> NoReturn:
    """Wait for the non-daemon threads, run the atexit handlers, flush stdout and stderr, and exit with `status`."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # what the interpreter runs at exit, before its teardown
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe (`r3l envs | head`): nothing more to say
            if stream is not None:
                stream.flush()
    os._exit(status)
