"""Seeds that make what a prompt samples independent of the rest of its batch.

A call's rows are (prompt, sample) pairs. Each row's seed comes from the call's seed, the prompt's token ids
and how many rows of that same prompt came before it in the call, so "prompt P twice, one sample each" and
"prompt P once, two samples" draw the same two streams (the episode runner switches between the two as
duplicates come and go), and a batch split into shards (rollout workers) samples exactly what the whole
batch would, provided twins (tasks with one prompt) sample on one worker: the counter is per call, so a copy of P
alone in another worker's call would count from zero again (distributed/sharding.py, `twin_shards`).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import Counter
from collections.abc import Sequence

import torch

SEED_BITS = 63


def row_seeds(seed: int | None, prompts: Sequence[Sequence[int]], n: int = 1) -> list[int | None]:
    """One seed per row, prompt by prompt then sample by sample (None without a call seed: then draws come
    from torch's global generator)."""
    if seed is None:
        return [None] * (len(prompts) * n)
    seen: Counter = Counter()
    seeds: list[int | None] = []
    for prompt in prompts:
        key = array("q", prompt).tobytes()
        for _ in range(n):
            digest = hashlib.blake2b(key, digest_size=8, key=array("q", [seed, seen[key]]).tobytes())
            seen[key] += 1
            seeds.append(int.from_bytes(digest.digest(), "little") >> (64 - SEED_BITS))
    return seeds


class RowDraws:
    """Uniform draws for the rows of a decode batch, one CPU generator per row."""

    def __init__(self, seeds: Sequence[int | None], device: torch.device):
        self.device = device
        self.generators = [None if seed is None else torch.Generator().manual_seed(seed) for seed in seeds]

    def uniform(self, rows: Sequence[int]) -> torch.Tensor:
        """One draw in [0, 1) for each of `rows`, shape [len(rows), 1], on the batch's device."""
        values = [
            torch.rand(1, generator=self.generators[row]) if self.generators[row] is not None else torch.rand(1)
            for row in rows
        ]
        return torch.cat(values).to(self.device)[:, None]
