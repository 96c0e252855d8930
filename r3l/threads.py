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
from collections.abc import Mapping, MutableMapping

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
