"""torch's CPU threads: how they wait (asleep at a barrier, not spinning) and how many each phase of a step uses.

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


# Per-phase thread counts, by the policy's size and number format. Under bf16 on a CPU with AMX or AVX512-BF16 a
# small model's matrix products are so quick that its step is thousands of small operations (elementwise ops, the
# weights' casts under autocast, matrix products of a few dozen rows), each of which wakes the OpenMP pool and waits
# for it at two threads; a larger model's matrix products, or any model's in fp32, are big enough to share.
# Measured on this repo's 2-core Xeon (AMX), quiet, `python scripts/step_threads.py` (the arms alternating step by
# step, medians of 3-4 steps each, docs/BENCH.md "Threads per phase"): the embedded model (135M, the default job,
# bf16) stepped in 9.95 s at 1 thread and 11.09 s at 2 (0.90x: sampling 2.31 -> 3.05 s, the update 7.54 -> 7.98 s:
# its matrix products gain 1.5x, its casts and elementwise ops nothing); Qwen2.5-Coder-0.5B (630M, bf16) in 17.09 s
# at 1 thread and 11.15 s at 2 (1.53x). On a 2-core AMD EPYC (AVX2, fp32) the embedded model decoded 1.6x and
# updated 1.8x faster at 2 threads ("Threads: a quiet and a busy machine"). So a bf16 policy under
# PARALLEL_MIN_PARAMETERS (between the two measured sizes) runs its step on one thread; every other policy on every
# thread given. `train.sampling_threads` sets sampling's count.
PARALLEL_MIN_PARAMETERS = 300_000_000
PHASES = ("generate", "learn")


@dataclass(frozen=True)
class ThreadPlan:
    """torch's thread count in each phase of a step: sampling (rollouts, reflections, retries) and the update."""

    generate: int
    learn: int


def thread_plan(threads: int, parameters: int, bf16: bool, sampling_threads: int | None = None) -> ThreadPlan:
    """The plan for a process given `threads` (torch's count at start-up: OMP_NUM_THREADS or the cores) and a
    policy of `parameters` weights computed in bf16 (`bf16`) or fp32: one thread in both phases for a bf16 model too
    small to gain, every thread otherwise; `sampling_threads` (train.sampling_threads) names sampling's count, never
    above `threads`."""
    threads = max(1, threads)
    planned = 1 if bf16 and parameters < PARALLEL_MIN_PARAMETERS else threads
    if sampling_threads is not None:
        return ThreadPlan(generate=max(1, min(sampling_threads, threads)), learn=planned)
    return ThreadPlan(generate=planned, learn=planned)


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
def phase_threads(
    phase: str,
    parameters: int,
    bf16: bool,
    metrics: MutableMapping[str, float] | None = None,
    sampling_threads: int | None = None,
) -> Iterator[None]:
    """Run a step's `phase` ("generate" or "learn") on the plan's thread count for a policy of `parameters`
    weights in bf16 or not (from torch's count outside the phases); the count goes into `metrics` as threads/PHASE."""
    import torch

    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, not {phase!r}")
    count = getattr(thread_plan(torch.get_num_threads(), parameters, bf16, sampling_threads), phase)
    if metrics is not None:
        metrics[f"threads/{phase}"] = float(count)
    with using_threads(count):
        yield
