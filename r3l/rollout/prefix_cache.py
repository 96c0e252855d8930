"""Keys and values of earlier generation calls, kept to be reused by later calls that start with the same tokens.

Each stored entry is one row's token ids (its prompt and what it generated, less the last sampled token, which was
never fed back) with the keys and values the model computed for them. A new prompt takes the entry that shares
the longest prefix with it and prefills only what follows: the next turn of an episode extends its previous
turn's entry; a retry from the pivot shares its base episode's entry up to the pivot (the entry is cut there,
the base keeps it whole). An entry that a newer one extends is dropped (the newer holds all of it). Memory is
bounded by `capacity_bytes`; the least recently used entries go first, each eviction counted.

The idea is vLLM's automatic prefix caching and SGLang's RadixAttention (cached KV keyed by the token-id prefix
it was computed from, least recently used evicted), without their paged blocks: entries are whole rows, matched
by a linear scan (tens of live episodes), and copied into the decode batch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

import numpy as np
import torch


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading token ids `a` and `b` share."""
    shortest = min(len(a), len(b))
    differ = np.flatnonzero(a[:shortest] != b[:shortest])
    return int(differ[0]) if differ.size else shortest


@dataclass
class Entry:
    tokens: np.ndarray  # [length] int64
    kv: torch.Tensor  # [layers, 2 (keys, values), kv heads, length, head dim]

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


class PrefixStore:
    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self._ids = count()
        self.bytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, tokens: Sequence[int]) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with `tokens`, and that length (None, 0 when none shares any);
        the entry becomes the most recently used."""
        query = np.asarray(tokens, dtype=np.int64)
        best, best_key, best_length = None, None, 0
        for key, entry in self._entries.items():
            length = common_prefix(entry.tokens, query)
            if length > best_length:
                best, best_key, best_length = entry, key, length
        if best_key is not None:
            self._entries.move_to_end(best_key)
        return best, best_length

    def put(self, tokens: Sequence[int], kv: torch.Tensor) -> None:
        """Keep `kv` (computed for `tokens`), drop the entries it extends, evict beyond the capacity."""
        entry = Entry(np.asarray(tokens, dtype=np.int64), kv)
        for key in [k for k, e in self._entries.items() if common_prefix(e.tokens, entry.tokens) == len(e.tokens)]:
            self.bytes -= self._entries.pop(key).nbytes
        if entry.nbytes > self.capacity_bytes:
            self.evictions += 1
            return
        self._entries[next(self._ids)] = entry
        self.bytes += entry.nbytes
        while self.bytes > self.capacity_bytes:
            self.bytes -= self._entries.popitem(last=False)[1].nbytes
            self.evictions += 1

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
