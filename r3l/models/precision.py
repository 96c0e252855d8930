"""Whether bf16 arithmetic is native on a device: the `auto` precision of the learner and the generator.

A GPU of compute capability 8 or above (Ampere on), or a CPU with AVX512-BF16 or AMX, computes bf16 natively;
elsewhere torch emulates it. On a CPU with AVX2 only (AMD EPYC, measured) bf16 generation was 5.5x slower than
fp32 (20 held-out problems with SmolLM2-135M: 37.3 s against 6.8 s); on a V100 or T4 (capability 7.x)
`torch.cuda.is_bf16_supported()` still says yes (it counts emulation), vLLM refuses bf16 there and autocast
emulates it, so the capability is what decides, asked of the model's own device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

BF16_MIN_CAPABILITY = 8  # Ampere: the first CUDA generation with bf16 tensor cores


def capability_has_bf16(capability: tuple[int, int]) -> bool:
    """A CUDA device of compute capability (major, minor) computes bf16 natively."""
    return capability[0] >= BF16_MIN_CAPABILITY


def _cuda(device: torch.device) -> bool:
    major, minor = torch.cuda.get_device_capability(device)
    return capability_has_bf16((major, minor))


def _cpu(device: torch.device) -> bool:
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


NATIVE_BF16: dict[str, Callable[[torch.device], bool]] = {"cuda": _cuda, "cpu": _cpu}


def native_bf16(device: torch.device) -> bool:
    """bf16 is native on `device` (any other device type: no)."""
    check = NATIVE_BF16.get(device.type)
    return check is not None and check(device)
