"""vLLM colocated with the learner on one GPU: the memory each phase holds (issue 35). Prints one JSON line per phase
with torch's `max_memory_reserved` (the learner's caching allocator) and the device's used memory (`mem_get_info`,
which sees vLLM's own allocations too), after: building the engine, generating, sleeping, a training step's worth of
learner memory, waking by a weight sync, and generating again.

    python scripts/gpu_memory_phases.py [MODEL]        # default random:qwen2.5-1.5b (random weights, no download)
"""

from __future__ import annotations

import json
import sys

import torch


def used_gib() -> float:
    free, total = torch.cuda.mem_get_info()
    return round((total - free) / 2**30, 2)


def report(phase: str) -> None:
    reserved = round(torch.cuda.max_memory_reserved() / 2**30, 2)
    print(json.dumps({"phase": phase, "device_used_gib": used_gib(), "torch_max_reserved_gib": reserved}), flush=True)
    torch.cuda.reset_peak_memory_stats()


def main() -> None:
    from r3l.build import load_model, make_generator, sampling_params
    from r3l.config import load_config

    model_name = sys.argv[1] if len(sys.argv) > 1 else "random:qwen2.5-1.5b"
    config = load_config(
        None,
        [
            f"model={model_name}",
            "model.device=cuda",
            "generator=vllm",
            "generator.dtype=bfloat16",
            "generator.sleep=true",
            "generator.engine_args={gpu_memory_utilization: 0.4, max_model_len: 1024}",
            "sampling.max_new_tokens=64",
        ],
    )
    report("start")
    model, tokenizer = load_model(config)
    report("policy loaded (fp32)")
    generator = make_generator(config, model, tokenizer)
    report("engine built")
    prompts = [tokenizer("Count to ten:")["input_ids"]] * 16
    generator.generate(prompts, sampling_params(config, seed=0), n=4)
    report("generated 64")
    generator.release_memory()
    report("engine asleep")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    batch = torch.tensor([prompts[0] * 8], device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(batch).logits.float().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    report("learner step (grads, Adam state)")
    generator.sync_weights(model.state_dict())
    report("engine woken by the weight sync")
    generator.generate(prompts, sampling_params(config, seed=1), n=4)
    report("generated 64 again")


if __name__ == "__main__":
    main()
