"""The HF generator's attention on CPU: grouped keys and values handed to SDPA as they are (`enable_gqa`).

Under a mask (every padded batch has one) transformers repeats each key/value head once per query head of its
group before SDPA whenever more than one query position attends (prefill), since CUDA's fused kernels fall back
to the math kernel for grouped keys under a mask. torch's CPU flash kernel takes them grouped: no copy of the
keys and values per query head, and each key/value block is read once for its whole group. At an episode's turn
20 (8 rows, 100 new positions over 3,129, Qwen2.5's 14 query heads over 2) one layer's prefill attention took
41 ms against 120 ms, bit-identical (docs/BENCH.md, "Grouped keys in prefill"). Only inference on CPU takes this
path; training keeps transformers' SDPA (its key and value gradients would be summed in another order).
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "r3l_grouped_sdpa"
SDPA_ONLY = ("softcap", "s_aux", "sinks", "position_bias", "sliding_window")  # what transformers' SDPA handles


def takes_grouped(module: torch.nn.Module, query: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> bool:
    """Whether this call differs from transformers' SDPA only by its repeated keys: a CPU inference call of more
    than one query position, under a mask, with query heads grouped over fewer key/value heads."""
    return (
        getattr(module, "num_key_value_groups", 1) > 1
        and query.shape[2] > 1
        and attention_mask is not None
        and query.device.type == "cpu"
        and not torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and not kwargs.get("output_attentions")
        and not any(kwargs.get(name) is not None for name in SDPA_ONLY)
    )


def grouped_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: SDPA over the grouped keys where `takes_grouped`, else
    transformers' own SDPA function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not takes_grouped(module, query, attention_mask, **kwargs):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    mixed = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return mixed.transpose(1, 2).contiguous(), None


def not_sdpa(model) -> str:
    """Why `model`'s attention cannot be routed through an SDPA-like function ("" where it can)."""
    implementation = getattr(model.config, "_attn_implementation", None)
    return "" if implementation == "sdpa" else f"the model attends with {implementation!r}, not sdpa"


def route(model, name: str, function) -> str:
    """Route `model`'s attention through `function` registered as `name` (masks as SDPA's); "" where it did, else
    why not."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if why := not_sdpa(model):
        return why
    AttentionInterface.register(name, function)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    model.set_attn_implementation(name)
    return "" if model.config._attn_implementation == name else "transformers did not take the attention function"


def install(model) -> str:
    """Route `model`'s attention through `grouped_attention`; "" where it did, else why not."""
    return route(model, NAME, grouped_attention)
