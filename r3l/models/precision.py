"""Whether bf16 arithmetic is native on a device: the `auto` precision of the learner and the generator.

A GPU with bf16 support, or a CPU with AVX512-BF16 or AMX, computes bf16 natively; elsewhere torch emulates it,
and on a CPU with AVX2 only (AMD EPYC, measured) bf16 generation was 5.5x slower than fp32 (20 held-out problems
with SmolLM2-135M: 37.3 s against 6.8 s).
"""

from __future__ import annotations

import torch

AMPERE = (8, 0)  # bf16 tensor cores; before it (V100: 7.0, T4: 7.5) torch emulates bf16 and vLLM refuses it


def cuda_bf16_native(capability: tuple[int, int]) -> bool:
    """Whether a GPU of this compute capability computes bf16 natively (`torch.cuda.is_bf16_supported()` also
    counts emulation, so it says yes on a V100 or a T4)."""
    return tuple(capability) >= AMPERE


def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return cuda_bf16_native(torch.cuda.get_device_capability(device))
    if device.type == "cpu":
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return False
