"""The process's memory: resident now and the peak so far (MiB) against what it may hold, handing freed heap back
to the system, and a smaller oneDNN kernel cache.

glibc keeps freed blocks for reuse: after one long batch a CPU run's resident size stays at that batch's high-water
mark for the rest of the run, which reads as growth. `release_free_memory` (malloc_trim) returns those free pages
at the end of each step; what stays resident is what the run really holds. Of what is then left to grow, half is
oneDNN's primitive cache (CPU bf16 matmuls: one kernel per shape, and training shapes vary every micro-batch; 1,024
kept by default); keeping `ONEDNN_CACHE_CAPACITY` halved the growth, and step time stayed within this machine's
noise (median 6.1 s vs 6.3 s side by side).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path, PurePosixPath

ONEDNN_CACHE_CAPACITY = 256
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mib() -> float:
    """Resident set size now (Linux /proc); the peak where /proc is missing."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES / 2**20
    except (OSError, IndexError, ValueError):
        return peak_resident_mib()


def peak_resident_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def limit_onednn_cache() -> None:
    """Keep fewer oneDNN kernels (unless the user set ONEDNN_PRIMITIVE_CACHE_CAPACITY); must run before the first
    CPU matmul of the process, since oneDNN reads it once."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_CAPACITY))


def memory_metrics() -> dict[str, float]:
    return {"rss_mib": resident_mib(), "peak_rss_mib": peak_resident_mib()}


def memory_limit_mib(proc: str = "/proc", cgroups: str = "/sys/fs/cgroup") -> tuple[float, str] | None:
    """The most memory this process may hold (MiB) and what sets it: the machine's memory, or a memory cgroup's
    cap (v1 or v2; this process's cgroup or one above it) where that is lower. None where /proc is missing."""
    try:
        with open(f"{proc}/meminfo") as meminfo:
            total = next(int(line.split()[1]) / 1024 for line in meminfo if line.startswith("MemTotal:"))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    best = (total, "the machine's memory")
    try:
        with open(f"{proc}/self/cgroup") as membership:
            lines = membership.read().splitlines()
    except OSError:
        return best
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            folder, name = Path(cgroups) / "memory", "memory.limit_in_bytes"
        elif hierarchy == "0" and not controllers:
            folder, name = Path(cgroups), "memory.max"
        else:
            continue
        for group in (PurePosixPath(path), *PurePosixPath(path).parents):
            cap = _cap_mib(folder / str(group).lstrip("/") / name)
            if cap is not None and cap < best[0]:
                best = (cap, f"memory cgroup {group}")
    return best


def _cap_mib(file: Path) -> float | None:
    try:
        text = file.read_text().strip()
    except OSError:
        return None
    return int(text) / 2**20 if text.isdigit() else None  # "max" (v2): no cap


def headroom_warning(peak_mib: float, limit: tuple[float, str] | None, share: float = 0.9) -> str | None:
    """A warning once the run's peak resident memory has reached `share` of what it may hold: memory grows with
    the longest batch, and a later, longer one is killed without a word from this process."""
    if limit is None or peak_mib < share * limit[0]:
        return None
    return (
        f"peak resident memory {peak_mib:,.0f} MiB is {peak_mib / limit[0]:.0%} of the {limit[0]:,.0f} MiB this "
        f"process may hold ({limit[1]}): a longer batch may be killed; cap the learner's passes with "
        "train.micro_batch_tokens (or a smaller train.micro_batch_size), or set model.gradient_checkpointing=true"
    )


@lru_cache(maxsize=1)
def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None  # not glibc: musl, ...


@lru_cache(maxsize=1)
def _malloc_trim():
    libc = _glibc()
    return None if libc is None else libc.malloc_trim


MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"  # glibc's own setting, read when a process starts
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def map_large_blocks(threshold_bytes: int) -> bool:
    """Serve every block of at least `threshold_bytes` by its own mapping, handed back when freed (glibc; False
    elsewhere). glibc's default threshold slides up to 32 MiB as blocks are freed, after which mid-sized tensors
    come from the heap and its holes: under gradient checkpointing that left 5.4 GB resident that nothing used
    (docs/BENCH.md, Memory). Child processes (rollout workers, learner ranks) get it through the environment."""
    os.environ[MMAP_THRESHOLD_ENV] = str(threshold_bytes)
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, threshold_bytes))


@lru_cache(maxsize=1)
def _mallopt():
    libc = _glibc()
    return None if libc is None else libc.mallopt


def release_free_memory() -> bool:
    """Give the allocator's free pages back to the system (glibc); False where there is no such call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def rss_growth(rss: Sequence[float], warmup_fraction: float = 0.1) -> float:
    """How much resident memory grew after warm-up, as a fraction: the median over the last `warmup_fraction` of
    the steps against the median over the same number of steps right after the warm-up (the first such share)."""
    window = max(1, int(len(rss) * warmup_fraction))
    if len(rss) < 3 * window:
        raise ValueError(f"{len(rss)} samples are too few to tell warm-up, early and late apart")
    early, late = sorted(rss[window : 2 * window]), sorted(rss[-window:])
    return _median(late) / _median(early) - 1.0


def _median(values: list[float]) -> float:
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
