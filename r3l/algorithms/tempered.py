"""Log-probabilities and entropies of logit rows each at its own temperature: the tokens of one experience may
have been sampled at several (a reflection at `reflection_temperature` inside an attempt at the sampling one),
and a token is scored at the temperature it was sampled at.

Each chunk of rows is divided by its rows' temperatures in float32 and handed to the one-temperature functions at
temperature 1, so a row scores exactly as it would alone at its temperature."""

from __future__ import annotations

import torch

from r3l.algorithms.entropy import DEFAULT_CHUNK_ELEMENTS, entropy_from_logits, token_logprobs


def _chunk_rows(logits: torch.Tensor, temperatures: torch.Tensor, max_chunk_elements: int) -> int:
    if logits.dim() != 2 or temperatures.shape != logits.shape[:1]:
        raise ValueError(
            f"logits [N, V] and temperatures [N] expected, got {tuple(logits.shape)} and {tuple(temperatures.shape)}"
        )
    return max(1, max_chunk_elements // max(1, logits.shape[-1]))


def tempered_token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperatures: torch.Tensor,
    *,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """log_softmax(logits[n] / temperatures[n])[tokens[n]]: [N, V], [N], [N] (all > 0) -> [N] float32."""
    chunk = _chunk_rows(logits, temperatures, max_chunk_elements)
    pieces = [
        token_logprobs(
            (logits[start : start + chunk].float() / temperatures[start : start + chunk, None].float())[None],
            tokens[start : start + chunk][None],
            1.0,
        )[0]
        for start in range(0, logits.shape[0], chunk)
    ]
    return torch.cat(pieces) if pieces else logits.new_zeros(0, dtype=torch.float32)


def tempered_entropy(
    logits: torch.Tensor, temperatures: torch.Tensor, *, max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
) -> torch.Tensor:
    """Entropy of softmax(logits[n] / temperatures[n]): [N, V], [N] -> [N] float32."""
    chunk = _chunk_rows(logits, temperatures, max_chunk_elements)
    pieces = [
        entropy_from_logits(
            (logits[start : start + chunk].float() / temperatures[start : start + chunk, None].float())[None], 1.0
        )[0]
        for start in range(0, logits.shape[0], chunk)
    ]
    return torch.cat(pieces) if pieces else logits.new_zeros(0, dtype=torch.float32)
