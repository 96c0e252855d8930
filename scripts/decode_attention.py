"""Decode attention against the machine's read bandwidth: one decode step's attention for the embedded model's
shapes (9 query heads over 3 key/value heads, head dim 64), 4 rows, bf16, at 4,096 positions of context.

    python scripts/decode_attention.py [--threads 1] [--context 4096]

Prints, per variant, the milliseconds of one layer's attention and the cache bytes it reads per second: torch's
scaled_dot_product_attention as transformers calls it in a decode step (the query heads packed per key/value
head, a padding mask), the same over a view of a larger buffer (r3l's in-place decode cache), the two matrix
products alone in both layouts, and a plain read of as many bytes (the machine's limit).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def seconds(call, repeats: int = 30) -> float:
    call(), call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows, kv_heads, group, dim, length = 4, 3, 3, 64, args.context
    dtype = torch.bfloat16
    query = torch.randn(rows, kv_heads, group, dim, dtype=dtype)
    roomy = [torch.randn(rows, kv_heads, 2 * length, dim, dtype=dtype) for _ in range(2)]
    keys, values = (buffer[:, :, :length] for buffer in roomy)
    dense_keys, dense_values = keys.contiguous(), values.contiguous()
    mask = torch.ones(rows, 1, 1, length, dtype=torch.bool)
    mask[0, ..., :100] = False  # one row left-padded
    cache_bytes = 2 * rows * kv_heads * length * dim * dtype.itemsize
    flat_q = query.reshape(rows * kv_heads, group, dim)
    flat_k, flat_v = dense_keys.reshape(-1, length, dim), dense_values.reshape(-1, length, dim)
    probs = torch.softmax(torch.randn(rows * kv_heads, group, length), -1).to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    variants = {
        "sdpa, in-place cache view, padding mask": (lambda: sdpa(query, keys, values, attn_mask=mask), 1.0),
        "sdpa, contiguous cache, padding mask": (lambda: sdpa(query, dense_keys, dense_values, attn_mask=mask), 1.0),
        "q.K^T as [group x dim] @ [dim x L]": (lambda: torch.bmm(flat_q, flat_k.transpose(1, 2)), 0.5),
        "q.K^T as [L x dim] @ [dim x group] (tall)": (lambda: torch.bmm(flat_k, flat_q.transpose(1, 2)), 0.5),
        "p.V as [group x L] @ [L x dim]": (lambda: torch.bmm(probs, flat_v), 0.5),
        "p.V as [dim x L] @ [L x group] (tall)": (
            lambda: torch.bmm(flat_v.transpose(1, 2), probs.transpose(1, 2)),
            0.5,
        ),
    }
    flat = torch.randn(cache_bytes // dtype.itemsize, dtype=dtype)
    variants["a plain read of the cache's bytes (sum)"] = (lambda: flat.sum(), 1.0)
    print(f"{rows} rows, {length} positions, bf16, {args.threads} thread(s); cache {cache_bytes / 1e6:.1f} MB a layer")
    for name, (call, share) in variants.items():
        took = seconds(call)
        print(f"{name:48s} {took * 1e3:7.3f} ms  {share * cache_bytes / took / 1e9:6.2f} GB/s")


if __name__ == "__main__":
    main()
