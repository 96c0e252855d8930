"""Pure helpers that turn experiences into padded, target-aligned tensors and length-sorted micro-batches."""
from __future__ import annotations

from typing import Sequence

import torch

from r3l.experience import Experience


def micro_batches(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices grouped into micro-batches of at most `size`, sorted by length so padding stays small."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[start:start + size] for start in range(0, len(order), size)]


def collate(experiences: Sequence[Experience], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded inputs plus per-target tensors shifted by one: position t scores token t+1.

    `loss_mask` (what is trained) is kept apart from `attention_mask` (what is real input).
    """
    width = max(len(e.tokens) for e in experiences)
    batch = len(experiences)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    loss_mask = torch.zeros((batch, width), dtype=torch.float32)
    gen_logprobs = torch.zeros((batch, width), dtype=torch.float32)
    advantages = torch.zeros((batch, width), dtype=torch.float32)
    for row, experience in enumerate(experiences):
        n = len(experience.tokens)
        input_ids[row, :n] = torch.tensor(experience.tokens, dtype=torch.long)
        attention_mask[row, :n] = 1
        loss_mask[row, :n] = torch.tensor(experience.loss_mask, dtype=torch.float32)
        gen_logprobs[row, :n] = torch.tensor(experience.logprobs, dtype=torch.float32)
        advantages[row, :n] = experience.advantage
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "targets": input_ids[:, 1:],
        "loss_mask": loss_mask[:, 1:],
        "gen_logprobs": gen_logprobs[:, 1:],
        "advantages": advantages[:, 1:],
    }
