"""Decoding with a preallocated (static) KV cache: every decode step has the same shapes, so the step can be
compiled with torch.compile (captured as a CUDA graph on a GPU) instead of launching each kernel from Python.

Rows are not dropped when they finish (that would change shapes); the batch is padded to a power of two and
the cache length to a power of two, so a run compiles a handful of shapes, not one per call.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from r3l.models.cache import with_cache
from r3l.rollout.generator import SamplingParams

MIN_CACHE_LENGTH = 128
CACHES_KEPT = 2  # static caches kept between calls, the least recently used dropped beyond (each can be GBs)
COMPILED_SHAPES_LIMIT = 64  # torch.compile's default (8) would fall back to eager after 8 (rows, length) shapes


def padded_rows(rows: int) -> int:
    """The batch a step runs: the next power of two, so calls with 5 or 7 rows share one compiled shape."""
    return 1 << max(rows - 1, 0).bit_length()


def padded_cache_length(tokens: int) -> int:
    return max(MIN_CACHE_LENGTH, 1 << max(tokens - 1, 0).bit_length())


@dataclass
class DecodeResult:
    tokens: list[list[int]]
    logprobs: list[list[float]]
    finished: dict[int, str] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)


class StaticDecoder:
    """Prefills `n` copies of each prompt into a static cache, then samples one token per row per step."""

    def __init__(self, model, compiled: bool):
        self.model = model
        self._cache_argument = next(iter(with_cache(model, None)))  # looked up here: dynamo would warn inside
        step = self._logits
        if compiled:
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, COMPILED_SHAPES_LIMIT)
            on_gpu = next(model.parameters()).device.type == "cuda"
            step = torch.compile(step, mode="reduce-overhead" if on_gpu else "default", fullgraph=True, dynamic=False)
        self._step = step
        # a transformers StaticCache per recent shape (a CUDA graph replays fixed addresses; one dropped and asked
        # for again is allocated anew, and a graph recorded on the old one records again)
        self._caches: OrderedDict[tuple[int, int], Any] = OrderedDict()

    def _cache(self, slots: int, length: int) -> Any:
        """The static cache of this shape, emptied; at most CACHES_KEPT shapes are kept between calls."""
        from transformers import StaticCache

        cache = self._caches.pop((slots, length), None)
        if cache is None:
            while len(self._caches) >= CACHES_KEPT:
                self._caches.popitem(last=False)
            cache = StaticCache(config=self.model.config, max_cache_len=length)
        else:
            cache.reset()
        self._caches[(slots, length)] = cache
        return cache

    def _logits(self, input_ids, attention_mask, position_ids, cache):
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._cache_argument: cache},
        )
        return output.logits[:, -1, :]

    @torch.no_grad()
    def run(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        pad: int,
        params: SamplingParams,
        sample: Callable,
        draws,
        is_stop: Callable[[list[int]], bool],
    ) -> DecodeResult:
        started = time.perf_counter()
        device = next(self.model.parameters()).device
        rows, width = len(prompts) * n, max(len(p) for p in prompts)
        slots, length = padded_rows(rows), padded_cache_length(width + params.max_new_tokens)
        input_ids = torch.full((slots, width), pad, dtype=torch.long)
        attention = torch.zeros((slots, length), dtype=torch.long)
        for slot in range(slots):  # spare slots repeat the last prompt: their output is never read
            prompt = list(prompts[min(slot // n, len(prompts) - 1)])
            input_ids[slot, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention[slot, width - len(prompt) : width] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention[:, :width].cumsum(-1) - 1).clamp(min=0)
        cache = self._cache(slots, length)
        logits = self.model(
            input_ids=input_ids,
            attention_mask=attention[:, :width],
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **with_cache(self.model, cache),
        ).logits[:, -1, :]
        result = DecodeResult(
            [[] for _ in range(rows)],
            [[] for _ in range(rows)],
            counters={
                "prefill_positions": slots * width,
                "decode_steps": 0,
                "decode_rows": 0,
                "decode_kv_positions": 0,
                "prefill_seconds": time.perf_counter() - started,
            },
        )
        started = time.perf_counter()
        next_position = positions[:, -1:] + 1
        feed = torch.full((slots, 1), pad, dtype=torch.long, device=device)
        for step in range(params.max_new_tokens):
            live = [row for row in range(rows) if row not in result.finished]
            chosen, chosen_logprobs = sample(logits[live].float(), params, partial(draws.uniform, live))
            for row, token, logprob in zip(live, chosen.tolist(), chosen_logprobs.tolist()):
                result.tokens[row].append(token)
                result.logprobs[row].append(logprob)
                if is_stop(result.tokens[row]):
                    result.finished[row] = "stop"
            if len(result.finished) == rows or step == params.max_new_tokens - 1:
                break
            feed[live, 0] = chosen
            attention[:, width + step] = 1
            logits = self._step(feed, attention, next_position, cache).clone()  # a graph replay reuses its output
            next_position = next_position + 1
            alive = rows - len(result.finished)
            result.counters["decode_steps"] += 1
            result.counters["decode_rows"] += alive
            result.counters["decode_kv_positions"] += alive * (width + step + 1)
        result.counters["decode_seconds"] = time.perf_counter() - started
        return result
