"""The HF generator's decode step on CPUs with AVX512-BF16 (`generator.decode_attention=kernel`).

torch's CPU flash kernel reads a decode step's keys and values at about a third of the machine's read rate, and
at a few thousand positions of context that attention is most of the step (docs/BENCH.md, "Decode attention");
`F.linear` reads a few rows' weights at well under it too. The extension (csrc/) reads the in-place cache's views
and the weights where they lie, sums in fp32 and writes bf16, as torch does: on AMX tiles where the CPU and the
OS allow them (csrc/tiles.cpp: Sapphire Rapids and later), else with AVX512-BF16 vectors
(csrc/decode_attention.cpp). It is built with torch's C++ extension tools the first time it is asked for (~40 s,
then cached); where it cannot be (no compiler, no AVX512-BF16) the generator keeps SDPA and says so once.

Installed per model copy as a transformers attention function: a CPU inference decode step (one query position)
goes to the kernel, anything else (prefill, training, compiled steps, sliding windows, sinks) to
`grouped_attention.grouped_attention` (SDPA, grouped keys as they are in CPU inference), so the masks are
transformers' own. The copy's linear layers, RMSNorms and rotary embedding are routed the same way (the rotary
embedding is a function of transformers' modeling module: routed there, it takes the kernel inside the copy's
forward only).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import types
from functools import cache, partial
from pathlib import Path
from typing import Any, cast

import torch

from r3l.models.grouped_attention import SDPA_ONLY, grouped_attention, not_sdpa, route

NAME = "r3l_decode_kernel"
SOURCES = [
    Path(__file__).parent / "csrc" / name
    for name in ("bindings.cpp", "decode_attention.cpp", "rms_norm.cpp", "rotary.cpp", "tiles.cpp")
]
# -fopenmp: at::parallel_for is a header template whose OpenMP pragma a build without it ignores (one thread)
FLAGS = ["-O3", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"]
TILE_ROWS = 16  # a tile's rows: the most query heads a key head, and linear rows, the tile kernels take


def cpu_has_avx512_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags and " avx512bw" in flags and " avx512vl" in flags


@cache
def kernel() -> tuple[Any, str]:
    """(the built extension, "") or (None, why not)."""
    if not cpu_has_avx512_bf16():
        return None, "this CPU has no AVX512-BF16"
    try:
        from torch.utils.cpp_extension import load

        sources = [str(path) for path in SOURCES]
        return load("r3l_decode_attention", sources, extra_cflags=FLAGS, extra_ldflags=["-fopenmp"], verbose=False), ""
    except Exception as error:  # noqa: BLE001 - a compiler missing or failing: the generator keeps SDPA
        lines = str(error).strip().splitlines() or [type(error).__name__]
        return None, f"its build failed ({lines[-1][:160]})"


def backend() -> str:
    """Which build of the kernels this process runs: "AMX tiles", "AVX512-BF16 vectors", or "" where none."""
    built, _ = kernel()
    if built is None:
        return ""
    return "AMX tiles" if built.tiles_ready() else "AVX512-BF16 vectors"


def allowed_positions(mask: torch.Tensor | None, rows: int, length: int) -> torch.Tensor | None:
    """`[rows, length]` booleans from transformers' boolean SDPA mask of a decode step (`[rows or 1, 1, 1, length]`,
    True where allowed); an empty tensor for no mask; None for a mask of another kind."""
    if mask is None:
        return torch.empty(0, dtype=torch.bool)
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[-1] != length:
        return None
    return mask[:, 0, -1, :].expand(rows, length).contiguous()


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: the kernel for a CPU inference decode step, SDPA otherwise."""
    if torch.compiler.is_compiling():  # before the build is asked for: torch.compile cannot trace that
        return grouped_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    built, _ = kernel()
    usable = (
        built is not None
        and query.shape[2] == 1
        and query.device.type == "cpu"
        and query.dtype == key.dtype == value.dtype == torch.bfloat16
        and not torch.is_grad_enabled()
        and not dropout
        and not torch.compiler.is_compiling()
        and not any(kwargs.get(name) is not None for name in SDPA_ONLY)
        and query.shape[-1] % 32 == 0
        and query.shape[-1] <= 256
        and query.shape[1] % key.shape[1] == 0
        and key.stride(-1) == 1
        and value.stride(-1) == 1
        and key.shape[2] > 0
    )
    allowed = allowed_positions(attention_mask, query.shape[0], key.shape[2]) if usable else None
    if allowed is None:
        return grouped_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    on_tiles = built.tiles_ready() and query.shape[1] // key.shape[1] <= TILE_ROWS
    attend = built.decode_attention_tiles if on_tiles else built.decode_attention
    mixed = attend(query[:, :, 0].contiguous(), key, value, allowed, scale)
    return mixed[:, None], None


FEW_ROWS = 4  # up to this many rows the vector kernel's dot products read the weights faster than torch's
# RMSNorms whose forward is Llama's: weight * bf16(x / sqrt(mean(x^2) + eps)), x in fp32
LLAMA_NORMS = frozenset({"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"})


def decode_rows(x: torch.Tensor, most: int) -> int:
    """The rows of `x` (all its dimensions but the last) where `x` is a bf16 CPU inference input of at most
    `most` rows (a decode step's), else 0."""
    rows = x.numel() // max(x.shape[-1], 1)
    if torch.is_grad_enabled() or torch.compiler.is_compiling() or x.device.type != "cpu" or x.dtype != torch.bfloat16:
        return 0
    return rows if 0 < rows <= most else 0


def few_rows_forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A linear layer's forward: the kernel's for a decode step's rows (at most TILE_ROWS on AMX tiles, FEW_ROWS
    without), `F.linear` otherwise."""
    if torch.compiler.is_compiling():
        return torch.nn.functional.linear(x, module.weight, module.bias)
    built, _ = kernel()
    weight = module.weight
    on_tiles = built is not None and built.tiles_ready()
    rows = decode_rows(x, TILE_ROWS if on_tiles else FEW_ROWS) if built is not None else 0
    if not rows or weight.dtype != torch.bfloat16 or x.shape[-1] % 32 or not weight.is_contiguous():
        return torch.nn.functional.linear(x, weight, module.bias)
    product = built.few_rows_linear_tiles if on_tiles else built.few_rows_linear
    out = product(x.reshape(rows, x.shape[-1]).contiguous(), weight)
    if module.bias is not None:
        out = out + module.bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def norm_forward(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A Llama-family RMSNorm's forward: the kernel's `rms_norm` (one call for the module's eight) for a decode
    step's rows, the module's own otherwise."""
    if torch.compiler.is_compiling():
        return type(module).forward(module, x)
    built, _ = kernel()
    weight = cast(torch.Tensor, module.weight)
    rows = decode_rows(x, TILE_ROWS) if built is not None else 0
    if not rows or weight.dtype != torch.bfloat16 or x.shape[-1] % 16 or not weight.is_contiguous():
        return type(module).forward(module, x)
    return built.rms_norm(x.reshape(rows, x.shape[-1]).contiguous(), weight, module.variance_epsilon).reshape(x.shape)


_INSIDE = threading.local()  # .model: a model copy with the kernels installed is running its forward here


@contextlib.contextmanager
def inside_kernel_model():
    """Within: the running forward is a kernel-mode copy's (the architecture's rotary embedding takes the kernel)."""
    outer = getattr(_INSIDE, "model", False)
    _INSIDE.model = True
    try:
        yield
    finally:
        _INSIDE.model = outer


def kernel_model_forward(self, *args, **kwargs):
    """A kernel-mode copy's forward: its class's, inside `inside_kernel_model()` (not while torch.compile traces
    it: a compiled step takes transformers' own paths)."""
    if torch.compiler.is_compiling():
        return type(self).forward(self, *args, **kwargs)
    with inside_kernel_model():
        return type(self).forward(self, *args, **kwargs)


def rotary_forward(original, q, k, cos, sin, unsqueeze_dim=1):
    """transformers' `apply_rotary_pos_emb(q, k, cos, sin)`: the kernel's `rotary` (one call for the function's
    fourteen, bit for bit the same) for a kernel-mode copy's decode step (bf16 query and key), `original`
    otherwise."""
    if torch.compiler.is_compiling() or not getattr(_INSIDE, "model", False):  # checked before the build is asked for
        return original(q, k, cos, sin, unsqueeze_dim)
    built, _ = kernel()
    if (
        built is None
        or unsqueeze_dim != 1
        or q.dim() != 4
        or k.dim() != 4
        or q.shape[2] != 1
        or k.shape[2] != 1
        or not decode_rows(cos, q.shape[0])
        or q.dtype != torch.bfloat16
        or k.dtype != torch.bfloat16
        or sin.dtype != torch.bfloat16
        or q.shape[-1] % 32
        or k.shape[-1] != q.shape[-1]
        or q.stride(-1) != 1
        or k.stride(-1) != 1
        or cos.dim() != 3
        or cos.shape != sin.shape
        or cos.shape[1] != 1
        or cos.shape[0] not in (1, q.shape[0])
        or cos.stride(-1) != 1
        or sin.stride(-1) != 1
    ):
        return original(q, k, cos, sin, unsqueeze_dim)
    return built.rotary(q[:, :, 0], k[:, :, 0], cos[:, 0], sin[:, 0])


def route_rotary(model) -> None:
    """Send `model`'s rotary embedding through `rotary_forward`. transformers calls it as `apply_rotary_pos_emb`
    of the architecture's modeling module (an nn.Module there, one for every model of the architecture in the
    process): that is routed once, and takes the kernel only inside the forward of a copy routed here (the
    model's forward marks it). Nothing where it is a plain function."""
    modeling = sys.modules.get(type(model).__module__)
    rotary = getattr(modeling, "apply_rotary_pos_emb", None)
    if not isinstance(rotary, torch.nn.Module):
        return
    if not getattr(rotary, "r3l_decode_kernel", False):
        rotary.forward = partial(rotary_forward, rotary.forward)
        setattr(rotary, "r3l_decode_kernel", True)  # noqa: B010 - a mark on a module, not a submodule
    model.forward = types.MethodType(kernel_model_forward, model)


def install(model) -> str:
    """Route `model`'s attention through `decode_attention`, its plain linear layers' forwards through
    `few_rows_forward`, its Llama-family RMSNorms' through `norm_forward` and its rotary embedding through
    `rotary_forward` (`route_rotary`); returns "" where it did, else why
    not (and then leaves the model as it was)."""
    if why := not_sdpa(model):  # before the build: a model the kernel cannot serve costs no compile
        return why
    built, why = kernel()
    if built is None:
        return why
    if why := route(model, NAME, decode_attention):
        return why
    for module in model.modules():
        if type(module) is torch.nn.Linear:  # subclasses (LoRA's, quantised) keep their own forward
            module.forward = types.MethodType(few_rows_forward, module)  # type: ignore[method-assign]
        elif type(module).__name__ in LLAMA_NORMS:
            module.forward = types.MethodType(norm_forward, module)
    route_rotary(model)
    return ""
