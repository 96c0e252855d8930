"""Whether bf16 arithmetic is native on a device: the `auto` precision of the learner and the generator.

A GPU with bf16 support, or a CPU with AVX512-BF16 or AMX, computes bf16 natively; elsewhere torch emulates it,
and on a CPU with AVX2 only (AMD EPYC, measured) bf16 generation was 5.5x slower than fp32 (20 held-out problems
with SmolLM2-135M: 37.3 s against 6.8 s).
"""

from __future__ import annotations

import torch


def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return False
