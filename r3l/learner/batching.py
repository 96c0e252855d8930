"""Pure helpers that turn experiences into padded, target-aligned tensors and length-sorted micro-batches."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from r3l.experience import KINDS, Experience
from r3l.rollout.constraints import TokenMasks, stack_masks


def cheapest_split(
    widths: Sequence[tuple[int, int, int]], size: int, overhead: int, max_positions: int | None = None
) -> list[list[int]]:
    """Indices of `widths` (rows, prefix width, row width) per item, kept in their order and cut into contiguous
    micro-batches of at most `size` rows and `max_positions` padded positions (None: no cap) that cost the fewest
    padded positions: a micro-batch of items pays items x its widest prefix + rows x its widest row, plus
    `overhead` positions for running one more forward. An item over either cap is a micro-batch of its own."""
    count = len(widths)
    best = [0] + [math.inf] * count  # best[j]: the cheapest split of the first j items
    cut = [0] * (count + 1)
    for end in range(1, count + 1):
        rows = prefix = row = 0
        for start in range(end - 1, -1, -1):
            n, p, w = widths[start]
            rows, prefix, row = rows + n, max(prefix, p), max(row, w)
            positions = (end - start) * prefix + rows * row
            too_big = rows > size or (max_positions is not None and positions > max_positions)
            if too_big and start < end - 1:  # both only grow as the micro-batch reaches further back
                break
            cost = best[start] + positions + overhead
            if cost < best[end]:
                best[end], cut[end] = cost, start
    batches: list[list[int]] = []
    end = count
    while end:
        batches.append(list(range(cut[end], end)))
        end = cut[end]
    return batches[::-1]


def micro_batches(
    lengths: Sequence[int], size: int, overhead: int = 0, max_positions: int | None = None
) -> list[list[int]]:
    """Indices sorted by length and cut into micro-batches of at most `size` rows and `max_positions` padded
    positions where that pads the least (see `cheapest_split`)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    split = cheapest_split([(1, 0, lengths[i]) for i in order], size, overhead, max_positions)
    return [[order[i] for i in batch] for batch in split]


def collate(experiences: Sequence[Experience], pad_id: int, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """Right-padded inputs plus per-target tensors shifted by one: position t scores token t+1.

    `loss_mask` (what is trained) is kept apart from `attention_mask` (what is real input). `token_kinds` names
    what each token was sampled as (an index into KINDS); `temperatures`, there only where a segment was sampled
    at another temperature than `temperature` (the run's), the temperature each token's log-prob is at.
    """
    width = max(len(e.tokens) for e in experiences)
    rows = len(experiences)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.float32)
    gen_logprobs = torch.zeros((rows, width), dtype=torch.float32)
    advantages = torch.zeros((rows, width), dtype=torch.float32)
    in_context = torch.zeros((rows, width), dtype=torch.float32)
    kinds = torch.zeros((rows, width), dtype=torch.long)
    temperatures = torch.full((rows, width), temperature, dtype=torch.float32)
    for row, experience in enumerate(experiences):
        n = len(experience.tokens)
        input_ids[row, :n] = torch.tensor(experience.tokens, dtype=torch.long)
        attention_mask[row, :n] = 1
        loss_mask[row, :n] = torch.tensor(experience.loss_mask, dtype=torch.float32)
        gen_logprobs[row, :n] = torch.tensor(experience.logprobs, dtype=torch.float32)
        advantages[row, :n] = experience.advantage
        in_context[row, :n] = float(experience.behaviour_in_context)
        kinds[row, :n] = KINDS.index(experience.kind)
        for segment in experience.segments:
            kinds[row, segment.start : segment.end] = KINDS.index(segment.kind)
            temperatures[row, segment.start : segment.end] = segment.scoring_temperature
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "targets": input_ids[:, 1:],
        "loss_mask": loss_mask[:, 1:],
        "gen_logprobs": gen_logprobs[:, 1:],
        "advantages": advantages[:, 1:],
        "behaviour_in_context": in_context[:, 1:],  # 1 where gen_logprobs were sampled in this very context
        "token_kinds": kinds[:, 1:],
    }
    if any(s.scoring_temperature != temperature for e in experiences for s in e.segments):
        batch["temperatures"] = temperatures[:, 1:]
    if any(e.allowed for e in experiences):  # target column t scores token t + 1
        spans = [(row, start - 1, masks) for row, e in enumerate(experiences) for start, masks in e.allowed]
        batch["allowed_index"], batch["allowed_table"] = stack_masks(spans, (len(experiences), width - 1))
    return batch


def allowed_after(allowed: Sequence[tuple[int, TokenMasks]], cut: int) -> list[tuple[int, TokenMasks]]:
    """An experience's constrained positions in its suffix from token `cut` on, renumbered from `cut`."""
    kept = []
    for start, masks in allowed:
        tail = masks if start >= cut else masks.after(cut - start)
        if len(tail):
            kept.append((max(start - cut, 0), tail))
    return kept


def shared_prefix_length(experience: Experience) -> int:
    """Tokens before the last untrained token preceding the first trained one: the part of the input
    whose keys and values a group can compute once (0 when nothing can be shared)."""
    first_trained = next((i for i, m in enumerate(experience.loss_mask) if m), len(experience.tokens))
    return max(0, first_trained - 1)


def prefix_micro_batches(
    experiences: Sequence[Experience], size: int, overhead: int = 0, max_positions: int | None = None
) -> list[list[int]]:
    """Indices grouped so that each micro-batch holds whole chunks of a run of experiences with one shared prefix:
    a run is sorted by length and cut where that pads the least (each chunk computes the prefix once more, at
    most `size` rows), then chunks of like widths go together where that pads the least, at most
    `max_positions` padded positions a micro-batch where a chunk alone fits. Indices ascend within a
    micro-batch."""
    runs: dict[tuple[int, ...], list[int]] = {}
    for index, experience in enumerate(experiences):
        runs.setdefault(tuple(experience.tokens[: shared_prefix_length(experience)]), []).append(index)
    chunks: list[list[int]] = []
    widths: list[tuple[int, int, int]] = []
    for prefix, members in runs.items():
        members = sorted(members, key=lambda i: len(experiences[i].tokens))
        suffixes = [(1, 0, len(experiences[i].tokens) - len(prefix)) for i in members]
        cap = None if max_positions is None else max(max_positions - len(prefix), 1)
        for part in cheapest_split(suffixes, size, overhead + len(prefix), cap):
            chunks.append([members[j] for j in part])
            widths.append((len(part), len(prefix), suffixes[part[-1]][2]))
    order = sorted(range(len(chunks)), key=lambda c: (widths[c][1] + widths[c][2], widths[c][1]))
    split = cheapest_split([widths[c] for c in order], size, overhead, max_positions)
    return [sorted(i for c in batch for i in chunks[order[c]]) for batch in split]


def collate_shared_prefix(
    experiences: Sequence[Experience], pad_id: int, temperature: float = 1.0
) -> dict[str, torch.Tensor]:
    """Unique prefixes ([U, P]) plus per-experience suffixes ([N, S]), both right-padded.

    The suffix starts at the last shared-prefix-excluded token, so suffix position t scores suffix
    token t+1, exactly as in `collate`; `prefix_index[n]` names experience n's prefix row.

    Prefixes are right-padded so that every query row attends to at least one real key: a left-padded
    prefix starts with pad rows whose keys are all masked (log-sum-exp -inf), and cuDNN's attention
    backward on H100/H200 turns such rows into NaN gradients (pytorch/pytorch#196678). A suffix sees
    its prefix's padding as masked keys in the middle of its context, which attention masks allow.
    """
    prefixes: dict[tuple[int, ...], int] = {}
    prefix_index = []
    for experience in experiences:
        key = tuple(experience.tokens[: shared_prefix_length(experience)])
        prefix_index.append(prefixes.setdefault(key, len(prefixes)))
    prefix_width = max(len(p) for p in prefixes)
    prefix_ids = torch.full((len(prefixes), prefix_width), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((len(prefixes), prefix_width), dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        if prefix:
            prefix_ids[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
            prefix_mask[row, : len(prefix)] = 1
    suffixes = [
        Experience(
            group=e.group,
            kind=e.kind,
            tokens=e.tokens[cut:],
            loss_mask=e.loss_mask[cut:],
            logprobs=e.logprobs[cut:],
            reward=e.reward,
            advantage=e.advantage,
            meta=e.meta,
            objective=e.objective,
            allowed=allowed_after(e.allowed, cut),
            segments=e.segments_after(cut),
        )
        for e in experiences
        for cut in [shared_prefix_length(e)]
    ]
    batch = collate(suffixes, pad_id, temperature)
    index = torch.tensor(prefix_index, dtype=torch.long)
    lengths = prefix_mask.sum(-1)
    batch.update(
        {
            "prefix_ids": prefix_ids,
            "prefix_mask": prefix_mask,
            "prefix_index": index,
            "suffix_positions": lengths[index][:, None] + torch.arange(batch["input_ids"].shape[1])[None],
        }
    )
    return batch


def trained_positions(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of the targets that are trained, row-major as boolean indexing by the loss mask gives them;
    taken from `trained_rows`/`trained_cols` where the collated batch carries them (found on the host, so that
    indexing by them on a GPU waits for nothing)."""
    if "trained_rows" in batch:
        return batch["trained_rows"], batch["trained_cols"]
    rows, cols = (batch["loss_mask"] > 0).nonzero(as_tuple=True)
    return rows, cols


def forward_work(batch: dict[str, torch.Tensor]) -> dict[str, int]:
    """What one collated micro-batch costs the model, counted from its masks: real positions run through
    the decoder (a shared prefix once), causal (query, key) pairs among them, positions including
    padding, and positions whose next token is trained (where the LM head runs)."""
    lengths = batch["attention_mask"].sum(-1)
    padded = batch["input_ids"].numel()
    head = int((batch["loss_mask"] > 0).sum())
    if "prefix_ids" not in batch:
        return {
            "positions": int(lengths.sum()),
            "attention_pairs": int((lengths * (lengths + 1) // 2).sum()),
            "padded_positions": padded,
            "head_positions": head,
        }
    prefix = batch["prefix_mask"].sum(-1)
    before = prefix[batch["prefix_index"]]
    pairs = (prefix * (prefix + 1) // 2).sum() + (lengths * before + lengths * (lengths + 1) // 2).sum()
    return {
        "positions": int(prefix.sum() + lengths.sum()),
        "attention_pairs": int(pairs),
        "padded_positions": padded + batch["prefix_ids"].numel(),
        "head_positions": head,
    }
