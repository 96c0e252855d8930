"""Weights into a vLLM engine in another process without a file: the sender packs checkpoint-format tensors into
byte chunks that travel as the arguments of the engine's RPCs; `WeightReceiver`, mixed into vLLM's worker
(engine_args worker_extension_cls), rebuilds them and reloads them once every chunk is in. Nothing is written to
disk; the engine process holds one copy of the weights while it reloads, as it would reading them from a file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

CHUNK_BYTES = 256 << 20
RECEIVER = "r3l.rollout.vllm_receiver.WeightReceiver"


def weight_chunks(
    weights: Sequence[tuple[str, torch.Tensor]], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[list[str], list[str], list[list[int]], bytes]]:
    """(names, dtype names, shapes, the tensors' bytes one after another), up to `chunk_bytes` a chunk (a larger
    tensor is a chunk alone)."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights:
        if chunk and size + tensor.nbytes > chunk_bytes:
            yield pack(chunk)
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += tensor.nbytes
    if chunk:
        yield pack(chunk)


def pack(chunk: Sequence[tuple[str, torch.Tensor]]) -> tuple[list[str], list[str], list[list[int]], bytes]:
    flat = torch.cat([tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for _, tensor in chunk])
    return (
        [name for name, _ in chunk],
        [str(tensor.dtype).removeprefix("torch.") for _, tensor in chunk],
        [list(tensor.shape) for _, tensor in chunk],
        flat.numpy().tobytes(),
    )


def unpack(names: Sequence[str], dtypes: Sequence[str], shapes: Sequence[Sequence[int]], payload: bytes):
    """The (name, tensor) pairs of one chunk, as views of one writable copy of its bytes."""
    buffer = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    tensors, offset = [], 0
    for name, dtype_name, shape in zip(names, dtypes, shapes):
        dtype = getattr(torch, dtype_name)
        count = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        tensors.append((name, buffer[offset : offset + count].view(dtype).view(tuple(shape))))
        offset += count
    return tensors


class WeightReceiver:
    """vLLM worker methods (the worker extension): chunks in, then one in-place reload of all of them."""

    def r3l_take_chunk(self, names: list[str], dtypes: list[str], shapes: list[list[int]], payload: bytes) -> int:
        pending = self.__dict__.setdefault("_r3l_pending", [])
        pending.extend(unpack(names, dtypes, shapes, payload))
        return len(pending)

    def r3l_reload(self) -> int:
        weights = self.__dict__.pop("_r3l_pending", [])
        self.reload_weights(weights_iterator=weights)  # type: ignore[attr-defined]  # vLLM's worker's
        return len(weights)
