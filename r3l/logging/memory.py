"""The process's memory, read from the operating system: resident now and the peak so far, in MiB."""
from __future__ import annotations

import os
import resource
import sys

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


def memory_metrics() -> dict[str, float]:
    return {"rss_mib": resident_mib(), "peak_rss_mib": peak_resident_mib()}
