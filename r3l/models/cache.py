"""Pass and read a KV cache across transformers versions (`cache` in 5.x, `past_key_values` before)."""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import torch


@cache
def _cache_argument(forward_owner: Any) -> str:
    parameters = inspect.signature(forward_owner.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def with_cache(module, cache) -> dict:
    """Keyword arguments that hand `cache` to `module`'s forward."""
    return {_cache_argument(type(module)): cache}  # type: ignore[arg-type]  # mypy: a class is not Hashable


def cache_of(output):
    """The KV cache a forward returned."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


class RoomyLayer:
    """One layer's keys and values in buffers with room to spare (`[rows, kv heads, capacity, head dim]`): a forward
    writes its new positions in place and attends over a view of the filled part, so a decode step copies one
    position, not the whole cache (transformers' DynamicLayer concatenates: a copy of the cache per step per
    layer). The buffers double when full. Made a CacheLayerMixin subclass by `_layer_class`."""

    is_sliding = False
    is_compileable = False
    is_croppable = False
    supports_early_init = True

    def __init__(self, capacity: int = 0):
        self.capacity = capacity
        self.length = 0
        self.buffers: tuple[Any, Any] | None = None
        self.keys = self.values = None
        self.is_initialized = False

    def reserve(self, rows: int, heads: int, head_dim: int, dtype, device) -> None:
        shape = (rows, heads, max(self.capacity, 1), head_dim)
        self.buffers = (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        self.device, self.is_initialized = device, True
        self._view()

    def lazy_initialization(self, key_states, value_states) -> None:
        rows, heads, _, head_dim = key_states.shape
        self.reserve(rows, heads, head_dim, key_states.dtype, key_states.device)

    def _view(self) -> None:
        assert self.buffers is not None
        self.keys, self.values = (buffer[:, :, : self.length] for buffer in self.buffers)

    def _grow(self, needed: int) -> None:
        assert self.buffers is not None
        capacity = max(needed, 2 * self.buffers[0].shape[2])
        grown = []
        for buffer in self.buffers:
            bigger = buffer.new_zeros((*buffer.shape[:2], capacity, buffer.shape[3]))
            bigger[:, :, : self.length] = buffer[:, :, : self.length]
            grown.append(bigger)
        self.buffers = (grown[0], grown[1])

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.buffers is not None
        end = self.length + key_states.shape[-2]
        if end > self.buffers[0].shape[2]:
            self._grow(end)
        self.buffers[0][:, :, self.length : end] = key_states
        self.buffers[1][:, :, self.length : end] = value_states
        self.length = end
        self._view()
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.buffers is not None:
            keys, values = self.buffers
            self.buffers = (keys.repeat_interleave(repeats, 0), values.repeat_interleave(repeats, 0))
            self._view()

    def batch_select_indices(self, indices) -> None:
        if self.buffers is not None:
            self.buffers = (self.buffers[0][indices], self.buffers[1][indices])
            self._view()


@cache
def _layer_class() -> type:
    from transformers.cache_utils import CacheLayerMixin

    return type("RoomyCacheLayer", (RoomyLayer, CacheLayerMixin), {})


def roomy_cache(model, capacity: int):
    """A transformers Cache of RoomyLayers for `model`, each with room for `capacity` positions."""
    from transformers.cache_utils import Cache

    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_layer_class()(capacity) for _ in range(layers)])
