"""One environment call under a time limit: a simulator that raises, dies or hangs becomes an `EnvFailure`.

A hang is ended by the environment's own `abort` (for the Java simulators: kill the JVM, which makes the
blocked call return with an error); `abort` must be safe to call from another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from r3l.errors import UserError

MESSAGE_CHARS = 200


class EnvFailure(Exception):
    """The environment failed; the message says how, in one line."""


class NamedError(Exception):
    """An error whose message already says what kind it is (an error relayed from another process)."""


def guarded_call(env: Any, timeout: float | None, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`, or EnvFailure if it raised or ran past `timeout` seconds (None: no limit). A UserError
    (bad configuration) is not an environment failure and passes through."""
    fired = threading.Event()
    timed_out = f"no answer within agent.env_timeout={timeout:g} s" if timeout else ""
    timer = None
    if timeout:

        def expire() -> None:
            fired.set()
            env.abort()

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
    try:
        result = call(*args)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever an environment raises ends only its episode
        if fired.is_set():
            raise EnvFailure(timed_out) from None
        text = " ".join(str(error).split())[:MESSAGE_CHARS]
        if isinstance(error, NamedError):
            raise EnvFailure(text) from None
        raise EnvFailure(f"{type(error).__name__}: {text}" if text else type(error).__name__) from None
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()
    if fired.is_set():  # answered just as the timer fired: the simulator is gone all the same
        raise EnvFailure(timed_out)
    return result
