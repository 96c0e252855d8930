"""Token log-probabilities and entropies from logits [B, T, V], stable and light on memory.

Both functions return float32 and work through the flattened rows in chunks of at most
``max_chunk_elements`` logits, upcasting one chunk at a time, so bf16/fp16 logits never get a
full float32 copy and no full log_softmax is materialised. (Under autograd each chunk's
intermediates are still kept for backward; the saving is largest under no_grad, e.g. for the
old-policy and reference passes.)
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK_ELEMENTS = 1 << 26  # 64M logits: 256 MiB in float32 per chunk


def _rows(logits: torch.Tensor, max_chunk_elements: int) -> tuple[torch.Tensor, int]:
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty vocabulary dimension, got {tuple(logits.shape)}")
    flat = logits.reshape(-1, logits.shape[-1])
    return flat, max(1, max_chunk_elements // flat.shape[-1])


def token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    *,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """log_softmax(logits / temperature) gathered at ``tokens``: [B, T, V], [B, T] -> [B, T] float32.

    Computed as logits[token]/temperature - logsumexp(logits/temperature) per row.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(f"tokens {tuple(tokens.shape)} must match logits {tuple(logits.shape)} without the last dim")
    flat, chunk = _rows(logits, max_chunk_elements)
    flat_tokens = tokens.reshape(-1, 1).long()
    pieces = []
    for start in range(0, flat.shape[0], chunk):
        rows = flat[start : start + chunk].float()
        if temperature != 1.0:
            rows = rows / temperature
        picked = rows.gather(-1, flat_tokens[start : start + chunk]).squeeze(-1)
        pieces.append(picked - torch.logsumexp(rows, dim=-1))
    out = torch.cat(pieces) if pieces else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(tokens.shape)


def entropy_from_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    *,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) over the last dim: [B, T, V] -> [B, T] float32.

    H = -sum(p * logp) with logp = x - logsumexp(x), stable for large logits.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    flat, chunk = _rows(logits, max_chunk_elements)
    pieces = []
    for start in range(0, flat.shape[0], chunk):
        rows = flat[start : start + chunk].float()
        if temperature != 1.0:
            rows = rows / temperature
        # Shift by logsumexp first: logp = x - lse is small even when the logits are huge.
        logp = rows - torch.logsumexp(rows, dim=-1, keepdim=True)
        # -inf logits (banned tokens) have probability 0 and contribute 0, not 0 * -inf = NaN.
        weighted = torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp))
        pieces.append(-weighted.sum(-1))
    out = torch.cat(pieces) if pieces else flat.new_zeros(0, dtype=torch.float32)
    return out.reshape(logits.shape[:-1])
