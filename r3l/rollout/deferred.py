"""A generator built at its first generation: the training process's own where rollout workers explore, which
only held-out evaluation and a task list's setup use, so it holds no memory beside the learner until then."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from r3l.rollout.generator import Completion, Constraints, Generator, SamplingParams


class DeferredGenerator(Generator):
    """Until built it takes no weights (`ready` is False); once built, `on_built(generator)` gives it the
    policy's current ones."""

    def __init__(self, build: Callable[[], Generator]):
        self._build = build
        self.inner: Generator | None = None
        self.on_built: Callable[[Generator], None] | None = None

    @property
    def ready(self) -> bool:
        return self.inner is not None

    def built(self) -> Generator:
        if self.inner is None:
            self.inner = self._build()
            if self.on_built is not None:
                self.on_built(self.inner)
        return self.inner

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        return self.built().generate(prompts, params, n, constraints)

    def sync_weights(self, state_dict) -> None:
        if self.inner is not None:
            self.inner.sync_weights(state_dict)

    @property
    def takes_adapters(self) -> bool:
        return self.inner is not None and self.inner.takes_adapters

    def sync_adapter(self, folder: str) -> None:
        if self.inner is not None:
            self.inner.sync_adapter(folder)

    def release_memory(self) -> None:
        if self.inner is not None:
            self.inner.release_memory()

    @property
    def stats(self) -> dict[str, float]:
        return self.inner.stats if self.inner is not None else {}
