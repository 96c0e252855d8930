"""vLLM colocated with the learner on one GPU: CUDA memory before and after each phase of a step (engine built,
asleep, the learner's update, weights woken, KV cache woken), as torch's reserved memory (now and peak) and the
driver's free memory (vLLM's own allocator is outside torch's figures). Used by scripts/gpu_check.sh.

    python3 scripts/vllm_sleep_memory.py [MODEL] [--out FILE.json]

Exits 1 when sleeping freed nothing or a wake failed."""

from __future__ import annotations

import argparse
import json
import sys

import torch


def figures(phase: str) -> dict:
    free, total = torch.cuda.mem_get_info()
    return {
        "phase": phase,
        "torch_reserved_mib": torch.cuda.memory_reserved() / 2**20,
        "torch_max_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
        "device_used_mib": (total - free) / 2**20,
    }


def learner_batch() -> list:
    """Two experiences of one group: one update's worth."""
    from r3l.experience import Experience

    return [
        Experience(group="g", kind="base", tokens=[1, 2, 3, 4, 5, 6], loss_mask=[0, 0, 1, 1, 1, 1],
                   logprobs=[0.0] * 6, reward=reward, advantage=reward - 0.5)
        for reward in (1.0, 0.0)
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default="random:qwen2.5-1.5b")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from r3l.build import load_model, make_learner, trainable_policy
    from r3l.config import load_config
    from r3l.rollout.vllm import VLLMGenerator

    config = load_config(None, [f"model={args.model}", "model.device=cuda", "generator=vllm"])
    model, tokenizer = load_model(config)
    rows = [figures("policy loaded")]
    generator = VLLMGenerator(model, tokenizer, dtype=torch.bfloat16, sleep=True)
    rows.append(figures("engine built"))
    generator.release_memory()
    rows.append(figures("asleep"))
    policy, reference = trainable_policy(config, model)
    learner = make_learner(config, policy, tokenizer, reference)
    learner.update(learner_batch())
    rows.append(figures("after one update"))
    generator.sync_weights(policy.state_dict())  # wakes weights, reloads, wakes the KV cache
    rows.append(figures("awake, weights synced"))
    for row in rows:
        print(
            f"{row['phase']:>24}: torch reserved {row['torch_reserved_mib']:8.0f} MiB (peak "
            f"{row['torch_max_reserved_mib']:8.0f}), device used {row['device_used_mib']:8.0f} MiB"
        )
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)
    freed = rows[1]["device_used_mib"] - rows[2]["device_used_mib"]
    print(f"sleeping freed {freed:.0f} MiB of device memory")
    return 0 if freed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
