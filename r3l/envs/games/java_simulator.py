"""Stopping a py4j-launched Java simulator (ScienceWorld, TextWorldExpress) at once, from any thread."""

from __future__ import annotations

from typing import Any


def java_process(simulator: Any) -> Any:
    """The simulator's JVM (a subprocess.Popen), or None."""
    return getattr(getattr(simulator, "_gateway", None), "java_process", None)


def kill_java(simulator: Any) -> None:
    """SIGKILL the simulator's JVM: a call blocked on it then fails instead of waiting forever. The gateway is
    marked disconnected first, so py4j's finalizers (run by the garbage collector, anywhere) send nothing more."""
    client = getattr(getattr(simulator, "_gateway", None), "_gateway_client", None)
    if client is not None:
        client.is_connected = False
    process = java_process(simulator)
    if process is not None and process.poll() is None:
        process.kill()


def close_quietly(simulator: Any) -> None:
    """Shut the py4j gateway down; a simulator whose JVM already died may raise doing so, which is ignored."""
    try:
        simulator.close()
    except Exception:  # noqa: BLE001 - the JVM is gone either way
        pass
