"""A LoRA policy's weights as a plain model would hold them (each adapted layer's base weight plus its adapters'
delta), computed out of place and one tensor at a time, so the frozen base is never written.

PEFT's `merge_adapter` / `unmerge_adapter` add the delta to the base in place and subtract it again: with a bf16
base the two roundings do not cancel, and after 100 such syncs a third of the base's elements had moved (measured
on CPU), the adapters-off KL reference with them. Here the delta is computed in fp32 and the sum rounded once to
the base's dtype, into a new tensor.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


@torch.no_grad()
def fp32_delta(layer: Any, adapter: str) -> torch.Tensor:
    """One adapter's delta to its layer's weight, in fp32: (B @ A) * scaling for a linear layer (transposed when
    the layer stores its weight fan-in first); other layer kinds through PEFT's own `get_delta_weight`."""
    if hasattr(layer.lora_A[adapter], "weight") and isinstance(layer.lora_A[adapter], torch.nn.Linear):
        product = layer.lora_B[adapter].weight.float() @ layer.lora_A[adapter].weight.float()
        product = product.T if getattr(layer, "fan_in_fan_out", False) else product
        return product * layer.scaling[adapter]
    return layer.get_delta_weight(adapter).float()


class MergedLora(Mapping[str, torch.Tensor]):
    """name -> merged weight of a PEFT LoRA model, with the names a plain model of the same architecture has.
    Each adapted weight is computed when it is read (a new tensor on the base weight's device and dtype); every
    other weight is the base's own tensor, not a copy."""

    def __init__(self, model):
        from peft.tuners.lora import LoraLayer

        base = model.get_base_model()
        self._adapted: dict[str, list[tuple[Any, str]]] = {}
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and not module.merged:
                adapters = [adapter for adapter in module.active_adapters if adapter in module.lora_A]
                if adapters:
                    self._adapted[f"{name}.weight"] = [(module, adapter) for adapter in adapters]
        self._base = {
            name.replace(".base_layer", ""): tensor for name, tensor in base.state_dict().items() if "lora_" not in name
        }

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self._base[name]
        if name not in self._adapted:
            return tensor
        total = tensor.float()
        for layer, adapter in self._adapted[name]:
            total = total + fp32_delta(layer, adapter)
        return total.to(tensor.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


@torch.no_grad()
def base_checksum(model) -> tuple[float, float]:
    """(sum, L2 norm) of a LoRA policy's frozen base weights, accumulated in float64 without a copy: any change to
    the base, such as an in-place merge that did not unmerge bit for bit, moves it."""
    total, squares = 0.0, 0.0
    for name, tensor in model.get_base_model().state_dict().items():
        if "lora_" in name or not tensor.is_floating_point():
            continue
        total += torch.sum(tensor, dtype=torch.float64).item()
        squares += torch.linalg.vector_norm(tensor, dtype=torch.float64).item() ** 2
    return total, squares**0.5
