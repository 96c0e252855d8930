"""A pool of environment instances, one per episode in flight, made on demand and reused across batches."""

from __future__ import annotations

from collections.abc import Callable

from r3l.envs import Env


class EnvPool:
    """Lends environments; `limit` caps how many exist at once (None: no cap, for envs that cost nothing).
    `make_env` must return a new, independent environment on every call."""

    def __init__(self, make_env: Callable[[], Env], limit: int | None = None, first: Env | None = None):
        """`first`: an environment already made (counted against `limit`, lent first)."""
        self.make_env = make_env
        self.limit = limit
        self._free: list[Env] = [] if first is None else [first]
        self._made = len(self._free)

    @property
    def made(self) -> int:
        return self._made

    def available(self) -> bool:
        return bool(self._free) or self.limit is None or self._made < self.limit

    def take(self) -> Env:
        if self._free:
            return self._free.pop()
        if not self.available():
            raise RuntimeError("the environment pool is exhausted; return an environment first")
        self._made += 1
        return self.make_env()

    def give_back(self, env: Env) -> None:
        self._free.append(env)

    def discard(self, env: Env) -> None:
        """Throw away a broken environment (its simulator died or hung); the next `take` makes a new one."""
        self._made -= 1
        for stop in (env.abort, getattr(env, "close", None)):
            try:
                if stop is not None:
                    stop()
            except Exception:  # noqa: BLE001 - it is broken; what matters is that it is gone
                pass

    def close(self) -> None:
        for env in self._free:
            close = getattr(env, "close", None)
            if close is not None:
                close()
        self._free.clear()
        self._made = 0
