"""The process's memory: resident now and the peak so far (MiB), handing freed heap back to the system, and a
smaller oneDNN kernel cache.

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
    """Resident memory, and where this process has used CUDA, the caching allocator's reserved memory now and
    at its peak (MiB, the current device)."""
    return {"rss_mib": resident_mib(), "peak_rss_mib": peak_resident_mib(), **cuda_memory_metrics()}


def _cuda_in_use() -> bool:
    """CUDA is there and this process has already used it (asking never initialises it)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def cuda_memory_metrics() -> dict[str, float]:
    if not _cuda_in_use():
        return {}
    import torch

    return {
        "cuda_reserved_mib": torch.cuda.memory_reserved() / 2**20,
        "cuda_max_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
    }


def release_cuda_cache() -> bool:
    """Hand the CUDA caching allocator's free blocks back to the driver (False where CUDA is not in use). Before
    a colocated vLLM engine wakes: its wake maps fresh physical memory, which the learner's freed but still
    reserved blocks would otherwise hold."""
    if not _cuda_in_use():
        return False
    import torch

    torch.cuda.empty_cache()
    return True


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
