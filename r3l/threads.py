"""How torch's CPU threads wait: OpenMP threads that sleep at a barrier instead of spinning.

torch's CPU build runs its kernels on a GNU OpenMP pool. A pool thread that reaches a barrier first spins for a
while before it sleeps; on a machine whose cores are also busy with other work, the thread it waits for is often
not running, so every one of the thousands of small parallel regions of a decode step waits for the scheduler.
Measured with scripts/thread_settings.py on the embedded model, 2 cores (docs/BENCH.md, "Threads"): decoding
64 x 24 tokens took 8.7 s quiet and 113.5 s beside other work with the default wait, 10.3 s and 28.3 s with
passive waiting. Passive waiting is the default the CLI sets, unless the user chose a wait policy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass

WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def openmp_wait_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings to add before torch starts its OpenMP pool: passive waiting, unless a wait setting is there."""
    if any(name in environ for name in WAIT_SETTINGS):
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


def apply_openmp_wait_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """Must run before the first parallel torch kernel of the process (OpenMP reads its settings once); child
    processes (learner ranks, rollout workers) inherit them."""
    environ.update(openmp_wait_defaults(environ))


# Per-phase thread counts. Sampling is thousands of small operations a token (matrix products of a few dozen rows,
# elementwise ops, attention over one query): at two threads each one wakes the pool and waits for it, and
# sampling is no faster, often slower, than at one. The update runs whole sequences through fewer, larger matrix
# products, which two threads speed up. Measured on this repo's 2-core Xeon (scripts/step_threads.py, torch profiler):
# the embedded model (135M, 64 rows, bf16) sampled in 2.0-3.1 s at 1 thread and no faster at 2, its matrix products
# as long at 2 threads as at 1, attention and elementwise ops 2-3x longer; Qwen2.5-Coder-0.5B (16 rows) sampled in
# 1.9 s at 1 thread and 2.6-3.6 s at 2, and updated in 40 s at 1 thread and 19-21 s at 2. Models of up to this size
# therefore sample on one thread; larger ones, unmeasured here, keep every thread as before.
PARALLEL_SAMPLING_MIN_PARAMETERS = 1_000_000_000
PHASES = ("generate", "learn")


@dataclass(frozen=True)
class ThreadPlan:
    """torch's thread count in each phase of a step: sampling (rollouts, reflections, retries) and the update."""

    generate: int
    learn: int


def thread_plan(threads: int, parameters: int) -> ThreadPlan:
    """The plan for a process given `threads` (torch's count at start-up: OMP_NUM_THREADS or the cores) and a
    policy of `parameters` weights: every thread for the update; one for sampling a model too small to gain."""
    threads = max(1, threads)
    return ThreadPlan(generate=threads if parameters >= PARALLEL_SAMPLING_MIN_PARAMETERS else 1, learn=threads)


@contextmanager
def using_threads(count: int) -> Iterator[None]:
    """torch runs on `count` threads inside the block, on its previous count after it (also on an error)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def phase_threads(phase: str, parameters: int, metrics: MutableMapping[str, float] | None = None) -> Iterator[None]:
    """Run a step's `phase` ("generate" or "learn") on the plan's thread count for a policy of `parameters`
    weights (from torch's count outside the phases); the count chosen goes into `metrics` as threads/PHASE."""
    import torch

    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, not {phase!r}")
    count = getattr(thread_plan(torch.get_num_threads(), parameters), phase)
    if metrics is not None:
        metrics[f"threads/{phase}"] = float(count)
    with using_threads(count):
        yield
