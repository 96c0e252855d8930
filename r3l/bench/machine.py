"""The machine's measured limits: matrix-multiply peak at a dtype, and large-copy memory bandwidth."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import torch


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn: Callable[[], object], device: torch.device, min_seconds: float = 0.3, rounds: int = 3) -> float:
    """Fastest time of one call of `fn` (after a warm-up call), each round repeating it for `min_seconds`."""
    fn()
    _synchronize(device)
    best = float("inf")
    for _ in range(rounds):
        calls, started = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            _synchronize(device)
            elapsed = time.perf_counter() - started
            if elapsed >= min_seconds:
                break
        best = min(best, elapsed / calls)
    return best


def gemm_peak(dtype: torch.dtype, device: torch.device, sizes: tuple[int, ...] = (1024, 2048, 4096)) -> dict:
    """Best FLOP/s of square torch matmuls at `dtype` over `sizes` (the most the matrix units deliver)."""
    rates = {}
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        rates[n] = 2.0 * n**3 / best_seconds(partial(torch.mm, a, b), device)
    best = max(rates, key=rates.__getitem__)
    return {
        "flops_per_s": rates[best],
        "size": best,
        "dtype": str(dtype).removeprefix("torch."),
        "by_size": {str(n): r for n, r in rates.items()},
    }


def copy_bandwidth(device: torch.device, mebibytes: int = 512) -> dict:
    """Bytes read plus bytes written per second by copying a buffer far larger than the caches."""
    count = mebibytes * 2**20 // 4
    source = torch.ones(count, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), device)
    return {"bytes_per_s": 2.0 * source.numel() * source.element_size() / seconds, "buffer_mib": mebibytes}
