"""Batched sampling with a KV cache on a transformers causal LM, dropping finished rows as it goes."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, Literal

import torch
from pydantic import Field

from r3l.logging.progress import console
from r3l.models.cache import RoomyLayer, cache_of, roomy_cache, with_cache
from r3l.rollout.constraints import Constrainer, Follower
from r3l.rollout.generator import GENERATORS, Completion, Constraints, Generator, SamplingParams, unconstrained
from r3l.rollout.json_close import report_end
from r3l.rollout.prefix_cache import Entry, PrefixStore
from r3l.rollout.seeds import RowDraws, row_seeds
from r3l.rollout.static_decode import StaticDecoder

DECODE_MODES = ("dynamic", "static", "compiled")
GIB = 1 << 30


def sample_next(logits: torch.Tensor, params: SamplingParams, uniforms: Callable[[], torch.Tensor]):
    """Pick the next token per row; return (tokens, logprob of each under the tempered distribution).
    `uniforms()` gives one draw in [0, 1) per row, shape [B, 1] (not called when decoding greedily)."""
    if params.temperature <= 0:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        tokens = logprobs.argmax(dim=-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    logprobs = torch.log_softmax(logits.float() / params.temperature, dim=-1)
    probs = logprobs.exp()
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs > params.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    tokens = inverse_cdf_sample(probs, uniforms())
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def inverse_cdf_sample(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One draw per row from unnormalised `probs` [B, V]: the first index whose running sum exceeds the row's
    uniform draw (`uniforms` [B, 1]). One random number per row instead of torch.multinomial's one per
    vocabulary entry (30x faster on CPU with a 49k vocabulary); never picks a zero-probability entry.
    The running sum is float64. In float32, on an AMD EPYC (AVX2), two rollout workers sampled other tokens
    than one process did for the same seeded prompts (tests/test_rollout_workers.py failed in 5 of 5 runs, and
    passed in 4 of 4 with float64); the exact kernel path behind it was not pinned down."""
    cumulative = probs.double().cumsum(dim=-1)
    tokens = torch.searchsorted(cumulative, uniforms.to(cumulative.dtype) * cumulative[:, -1:], right=True)
    return tokens.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def stop_token_ids(model, tokenizer) -> set[int]:
    """The tokenizer's end-of-sequence and every one the model's generation config lists (Qwen2.5 ends on
    <|endoftext|> as on <|im_end|>)."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    listed = configured if isinstance(configured, (list, tuple)) else [configured]
    return {token for token in (tokenizer.eos_token_id, *listed) if token is not None}


@GENERATORS.register("hf")
class HFGenerator(Generator):
    """Samples from its own copy of the policy, in `dtype` (bf16 is fastest on CPUs with AMX/AVX512-BF16)."""

    def __init__(
        self,
        model,
        tokenizer,
        dtype: torch.dtype = torch.bfloat16,
        prefill_chunk: Annotated[int, Field(gt=0, description="prompts prefilled together")] = 64,
        decode: Annotated[
            Literal["dynamic", "static", "compiled"],
            Field(
                description="KV cache of the decode loop: dynamic (drops finished rows), static (preallocated), "
                "compiled (static + torch.compile, CUDA graphs on a GPU)"
            ),
        ] = "dynamic",
        kv_cache: Annotated[
            bool,
            Field(
                description="keep each row's keys and values after a call; a later prompt that starts with the "
                "same tokens (an episode's next turn, a retry from the pivot) prefills only what follows "
                "(dynamic decode only)"
            ),
        ] = True,
        kv_cache_bytes: Annotated[
            int, Field(gt=0, description="memory the kept keys and values may take; least recently used go first")
        ] = 2 * GIB,
        decode_attention: Annotated[
            Literal["sdpa", "kernel"],
            Field(
                description="a decode step's attention, linear layers and norms: torch's, or r3l's kernels for "
                "CPUs with AVX512-BF16, on AMX tiles where there are (built at first use; SDPA where they cannot be)"
            ),
        ] = "sdpa",
    ):
        if decode not in DECODE_MODES:
            raise ValueError(f"decode must be one of {DECODE_MODES}, not {decode!r}")
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.prefill_chunk = prefill_chunk
        self.model = copy.deepcopy(model).to(dtype).eval()
        self.device = next(self.model.parameters()).device
        self.stop_token_ids = stop_token_ids(model, tokenizer)
        self.static = StaticDecoder(self.model, compiled=decode == "compiled") if decode != "dynamic" else None
        self._constrainer: Constrainer | None = None
        full_attention = all(
            kind == "full_attention"
            for kind in getattr(self.model.config.get_text_config(decoder=True), "layer_types", None) or ()
        )
        self.roomy = full_attention  # sliding-window layers keep transformers' own cache, and nothing is kept
        self.decode_kernel = decode_attention == "kernel" and self._install_decode_kernel()
        if not self.decode_kernel and self.device.type == "cpu":
            from r3l.models.grouped_attention import install

            install(self.model)  # a model that does not attend with SDPA keeps its own attention
        self.store = PrefixStore(kv_cache_bytes) if kv_cache and full_attention else None
        self._warned_eviction = False
        self._stats = {
            "generated_tokens": 0,
            "generate_seconds": 0.0,
            "prefill_positions": 0,
            "prefill_seconds": 0.0,
            "decode_steps": 0,
            "decode_rows": 0,
            "decode_kv_positions": 0,
            "decode_seconds": 0.0,
            "constraint_breaks": 0,
            "kv_reused_positions": 0,
        }

    def _install_decode_kernel(self) -> bool:
        from r3l.models.decode_kernel import install

        why = install(self.model) if self.device.type == "cpu" else "the policy is not on a CPU"
        if why:
            console.print(
                f"generator: decode_attention=kernel asked for, SDPA kept: {why}", markup=False, highlight=False
            )
        return not why

    def sync_weights(self, state_dict) -> None:
        own = self.model.state_dict()
        missing = set(own) - set(state_dict)
        if missing:
            raise KeyError(f"weight sync lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")
        with torch.no_grad():
            for name, target in own.items():
                target.copy_(state_dict[name].to(target.device))
        if self.store is not None:
            self.store.clear()  # kept keys and values belong to the old weights

    def release_memory(self) -> None:
        if self.store is not None:
            self.store.clear()

    @property
    def stats(self) -> dict[str, float]:
        store = self.store
        kept = {"kv_cache_bytes": store.bytes if store else 0, "kv_cache_evictions": store.evictions if store else 0}
        return {**self._stats, **kept}

    @property
    def constrainer(self) -> Constrainer:
        if self._constrainer is None:
            self._constrainer = Constrainer(self.tokenizer, self.model.get_output_embeddings().weight.shape[0])
        return self._constrainer

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1, constraints: Constraints = None
    ) -> list[list[Completion]]:
        start = time.perf_counter()
        seeds = row_seeds(params.seed, prompts, n)
        free = unconstrained(constraints)
        results: list[list[Completion]] = [[] for _ in prompts]
        for first in range(0, len(prompts), self.prefill_chunk):
            chunk = list(prompts[first : first + self.prefill_chunk])
            draws = RowDraws(seeds[first * n : (first + self.prefill_chunk) * n], self.device)
            if free and self.static is not None:  # the static cache decodes free text only
                pieces = self._generate_chunk_static(self.static, chunk, params, n, draws)
            else:
                followers = (
                    None
                    if constraints is None or free
                    else [
                        None if c is None else self.constrainer.follower(c)
                        for c in constraints[first : first + self.prefill_chunk]
                        for _ in range(n)
                    ]
                )
                pieces = self._generate_chunk(chunk, params, n, draws, followers)
            for row, completion in pieces:
                results[first + row // n].append(completion)
        self._stats["generate_seconds"] += time.perf_counter() - start
        return results

    def _constrain(self, logits: torch.Tensor, live: list[int], followers: list[Follower | None]) -> torch.Tensor:
        """The rows' logits with what each row's grammar forbids at its next position set to -inf."""
        active = {
            index: follower
            for index, row in enumerate(live)
            if (follower := followers[row]) is not None and not follower.broken
        }
        if not active:
            return logits
        bitmask = torch.full((len(live), self.constrainer.words), -1, dtype=torch.int32)
        for index, follower in active.items():
            bitmask[index] = follower.fill()
        logits = logits.float()
        self.constrainer.apply(logits, bitmask)
        return logits

    def _reusable(self, prompt: Sequence[int]) -> tuple[Entry | None, int]:
        """The kept entry sharing the longest prefix with `prompt` and how many of its positions can be reused (the
        prompt's last position is always fed: its logits start the decode)."""
        if self.store is None:
            return None, 0
        entry, shared = self.store.longest(prompt)
        return entry, min(shared, len(prompt) - 1)

    def _prefill(self, prompts, room: int):
        """Forward the prompts, left-padded to one width, reusing kept keys and values: only the last `fed` columns
        are forwarded, where `fed` is the most positions any row lacks; each row's earlier positions are copied
        from its entry. Returns (cache, last logits, attention mask, positions)."""
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        hits = [self._reusable(prompt) for prompt in prompts]
        fed = max(len(prompt) - reused for prompt, (_, reused) in zip(prompts, hits))
        cache = roomy_cache(self.model, width + room) if self.roomy else None
        if fed < width:
            self._place(cache, prompts, hits, width, fed)
        output = self.model(
            input_ids=input_ids[:, width - fed :],
            attention_mask=attention,
            position_ids=positions[:, width - fed :],
            use_cache=True,
            logits_to_keep=1,
            **({} if cache is None else with_cache(self.model, cache)),
        )
        self._stats["prefill_positions"] += len(prompts) * fed
        self._stats["kv_reused_positions"] += sum(max(len(prompt) - fed, 0) for prompt in prompts)
        return cache_of(output), output.logits[:, -1, :], attention, positions

    def _place(self, cache, prompts, hits: list[tuple[Entry | None, int]], width: int, fed: int) -> None:
        """Copy each row's kept keys and values for the columns before the last `fed` into the new cache."""
        kv = next(entry.kv for entry, reused in hits if entry is not None and reused)
        _, _, heads, _, head_dim = kv.shape
        for index, layer in enumerate(cache.layers):
            layer.reserve(len(prompts), heads, head_dim, kv.dtype, self.device)
            for row, (prompt, (entry, _)) in enumerate(zip(prompts, hits)):
                kept = len(prompt) - fed
                if entry is not None and kept > 0:
                    layer.buffers[0][row, :, width - len(prompt) : width - fed] = entry.kv[index, 0, :, :kept]
                    layer.buffers[1][row, :, width - len(prompt) : width - fed] = entry.kv[index, 1, :, :kept]
            layer.length = width - fed
            layer._view()

    def _keep(self, cache, index: int, first_column: int, tokens: list[int]) -> None:
        """Store batch row `index`'s keys and values (columns from `first_column` on), computed for `tokens`."""
        if self.store is None or not tokens:
            return
        layers = cache.layers
        assert all(isinstance(layer, RoomyLayer) for layer in layers)
        row = [torch.stack((k.keys[index, :, first_column:], k.values[index, :, first_column:])) for k in layers]
        kv = torch.stack(row)
        if kv.shape[3] != len(tokens):
            raise RuntimeError(f"kept {kv.shape[3]} positions for {len(tokens)} tokens")  # a bug, never a user's error
        evicted = self.store.evictions
        self.store.put(tokens, kv)
        if self.store.evictions > evicted and not self._warned_eviction:
            self._warned_eviction = True
            console.print(
                f"generator: the kept keys and values reached generator.kv_cache_bytes ({self.store.capacity_bytes:,} "
                "bytes); the least recently used are dropped and prefilled again when asked for (counted in "
                "kv_cache_evictions; raise the setting if memory allows)",
                markup=False,
                highlight=False,
            )

    @torch.inference_mode()
    def _generate_chunk(
        self, prompts, params: SamplingParams, n: int, draws: RowDraws, followers: list[Follower | None] | None = None
    ):
        started = time.perf_counter()
        cache, logits, attention, positions = self._prefill(prompts, params.max_new_tokens)
        width = attention.shape[1]
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attention = attention.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
        rows = torch.arange(attention.shape[0], device=self.device)
        next_position = positions[:, -1] + 1
        self._stats["prefill_seconds"] += time.perf_counter() - started
        started = time.perf_counter()
        tokens: list[list[int]] = [[] for _ in range(len(rows))]
        logprobs: list[list[float]] = [[] for _ in range(len(rows))]
        finished: dict[int, str] = {}
        kept_rows: set[int] = set()

        def keep(index: int, row: int) -> None:
            prompt = list(prompts[row // n])
            self._keep(cache, index, width - len(prompt), prompt + tokens[row][:-1])
            kept_rows.add(row)

        for step in range(params.max_new_tokens):
            live = rows.tolist()
            if followers is not None:
                logits = self._constrain(logits, live, followers)
            chosen, chosen_logprobs = sample_next(logits, params, partial(draws.uniform, live))
            keep_index_list = []
            # one device-to-host copy of each per step (not one per row: on a GPU each is a sync)
            for index, (row, token, logprob) in enumerate(zip(live, chosen.tolist(), chosen_logprobs.tolist())):
                if followers is not None and followers[row] is not None and not followers[row].broken:
                    followers[row].accept(token)
                tokens[row].append(token)
                logprobs[row].append(logprob)
                if token in self.stop_token_ids or self._hit_stop(tokens[row], params):
                    finished[row] = "stop"
                    keep(index, row)
                else:
                    keep_index_list.append(index)
            if not keep_index_list or step == params.max_new_tokens - 1:
                break
            if len(keep_index_list) < len(rows):
                keep_index = torch.tensor(keep_index_list, device=self.device)
                cache.batch_select_indices(keep_index)
                rows, chosen = rows[keep_index], chosen[keep_index]
                attention, next_position = attention[keep_index], next_position[keep_index]
            attention = torch.cat([attention, torch.ones((len(rows), 1), dtype=torch.long, device=self.device)], dim=1)
            output = self.model(
                input_ids=chosen[:, None],
                attention_mask=attention,
                position_ids=next_position[:, None],
                use_cache=True,
                **with_cache(self.model, cache),
            )
            cache = cache_of(output)
            logits = output.logits[:, -1, :]
            next_position = next_position + 1
            self._stats["decode_steps"] += 1
            self._stats["decode_rows"] += len(rows)
            self._stats["decode_kv_positions"] += attention.numel()
        for index, row in enumerate(rows.tolist()):
            if row not in kept_rows:
                keep(index, row)
        self._stats["decode_seconds"] += time.perf_counter() - started
        for row, completion in self._completions(tokens, logprobs, finished):
            if followers is not None and followers[row] is not None:
                completion.allowed = followers[row].recorder.masks()
                self._stats["constraint_breaks"] += followers[row].broken
            yield row, completion

    def _generate_chunk_static(self, static: StaticDecoder, prompts, params: SamplingParams, n: int, draws: RowDraws):
        result = static.run(
            prompts,
            n,
            self.tokenizer.pad_token_id,
            params,
            sample_next,
            draws,
            lambda tokens: tokens[-1] in self.stop_token_ids or self._hit_stop(tokens, params),
        )
        for key, value in result.counters.items():
            self._stats[key] += value
        yield from self._completions(result.tokens, result.logprobs, result.finished)

    def _completions(self, tokens: list[list[int]], logprobs: list[list[float]], finished: dict[int, str]):
        """(row, Completion) for each decoded row; a row not stopped ran out of length."""
        self._stats["generated_tokens"] += sum(len(t) for t in tokens)
        for row, (row_tokens, row_logprobs) in enumerate(zip(tokens, logprobs)):
            text = self.tokenizer.decode(row_tokens, skip_special_tokens=True)
            yield row, Completion(row_tokens, row_logprobs, text, finished.get(row, "length"))

    def _hit_stop(self, tokens: list[int], params: SamplingParams) -> bool:
        """A stop string in the last tokens' text, or (`params.stop_at_json_close`) a report complete: a JSON object
        closed after any thinking (json_close.report_end)."""
        if params.stop:
            tail = self.tokenizer.decode(tokens[-8:], skip_special_tokens=False)
            if any(s in tail for s in params.stop):
                return True
        if params.stop_at_json_close and "}" in self.tokenizer.decode(tokens[-1:], skip_special_tokens=False):
            return report_end(self.tokenizer.decode(tokens, skip_special_tokens=True)) is not None
        return False
