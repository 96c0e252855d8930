"""Which attention kernel the learner's forward uses: the plain (math) one when its score matrices fit.

On CPU, PyTorch's flash-attention backward costs ~17 ms a call on short sequences (batch 32, 9 heads,
25 x 88), about 10x the rest of the attention; the math kernel's backward is matrix products. It keeps
every score matrix for the backward pass, so it is used only while those fit in a memory budget.

On CUDA the learner turns cuDNN attention off for the process (`avoid_cudnn_attention`). cuDNN's
backward on H100/H200 (torch 2.11 and later) returns NaN query gradients for a row whose log-sum-exp
is below -88.7 when an explicit mask is passed and the key length is 64 mod 128 (pytorch/pytorch#196678,
huggingface/trl#7181); memory-efficient attention computes the same without that fault. It is a
process setting, not a scoped one, so that it also reaches the forward that gradient checkpointing
recomputes during backward.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

MATH_ATTENTION_BUDGET = 1 << 30  # bytes of attention scores and probabilities kept for backward


def math_attention_bytes(batch: dict[str, torch.Tensor], heads: int, layers: int) -> int:
    """Bytes the math kernel keeps for one micro-batch: fp32 scores and probabilities [rows, heads, q, k]
    in every layer, for the prefix pass (if any) and the main pass."""
    rows, width = batch["input_ids"].shape
    if "prefix_ids" in batch:
        prefixes, prefix_width = batch["prefix_ids"].shape
        pairs = prefixes * prefix_width * prefix_width + rows * width * (prefix_width + width)
    else:
        pairs = rows * width * width
    return 2 * 4 * heads * layers * pairs


def attention_kernel(model, batch: dict[str, torch.Tensor], device: torch.device, budget: int = MATH_ATTENTION_BUDGET):
    """A context selecting the math SDPA kernel on CPU when it fits `budget`; otherwise the default choice."""
    config = getattr(model, "config", None)
    heads, layers = getattr(config, "num_attention_heads", None), getattr(config, "num_hidden_layers", None)
    if device.type != "cpu" or not heads or not layers or math_attention_bytes(batch, heads, layers) > budget:
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


def avoid_cudnn_attention(device: torch.device) -> None:
    """Take cuDNN out of PyTorch's SDPA kernel choice when training on CUDA (see the module note)."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
