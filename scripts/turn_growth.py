"""What a late turn of a multi-turn episode costs against the first, with the cache on: the time of turn 20 over
turn 1, split into prefill and decode, beside the same ratio of the bytes their decoding reads (every weight once
a step, every attended key and value), for each decode attention.

    python scripts/turn_growth.py [--model NAME] [--turns 20] [--attention sdpa,kernel] [--repeats 2]

Plays the bench's multi_turn episodes (r3l/bench/multi_turn.py: 8 TextWorldExpress coin episodes in flight,
greedy, 24 tokens a reply, no early stop), the attentions alternating over the repeats, and prints one line of
medians per attention. Where the time ratio follows the bytes ratio, decoding reads at the same rate at both
turns and what turn 20 adds is the keys and values it must read.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from r3l.bench import multi_turn
from r3l.bench.flops import ModelShape
from r3l.build import generator_dtype, load_model
from r3l.config import load_config
from r3l.rollout.hf import HFGenerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--attention", default="sdpa,kernel")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    multi_turn.LATE_TURN = args.turns
    config = load_config(None, [f"model={args.model}", *multi_turn.WORKLOADS["textworld_express coin"]])
    model, tokenizer = load_model(config)
    dtype = getattr(torch, generator_dtype(config))
    shape = ModelShape.from_config(model.config)
    tasks = multi_turn.episode_tasks(config)
    generators = {
        name: HFGenerator(model, tokenizer, dtype=dtype, kv_cache=True, decode_attention=name)
        for name in args.attention.split(",")
    }

    def played(name: str, turns: int) -> dict:
        episode = multi_turn.episode_config(config, [], turns)
        return multi_turn.play(episode, generators[name], tokenizer, tasks, turns, shape, dtype.itemsize)

    for name in generators:  # warm-up: first calls, the kernel built, simulators started
        played(name, 2)
    records: dict[str, list[dict]] = {name: [] for name in generators}
    for _ in range(args.repeats):
        for name in generators:
            records[name].append(played(name, args.turns))
    print(f"{args.model}, {multi_turn.EPISODES} episodes, {args.turns} turns, {torch.get_num_threads()} threads")
    for name, runs in records.items():
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        turn_1 = {part: medians[f"turn_1_{part}"] for part in ("seconds", "prefill_seconds", "decode_seconds")}
        late = {part: medians[f"turn_20_{part}"] for part in ("seconds", "prefill_seconds", "decode_seconds")}
        print(
            f"{name}: episode {medians['wall_seconds_per_episode']:.2f} s; turn 1 {turn_1['seconds']:.2f} s "
            f"(prefill {turn_1['prefill_seconds']:.2f}, decode {turn_1['decode_seconds']:.2f}); turn {args.turns} "
            f"{late['seconds']:.2f} s (prefill {late['prefill_seconds']:.2f}, decode {late['decode_seconds']:.2f}); "
            f"ratio {late['seconds'] / turn_1['seconds']:.2f}x, decode "
            f"{late['decode_seconds'] / turn_1['decode_seconds']:.2f}x, decode bytes "
            f"{medians['turn_20_decode_bytes'] / medians['turn_1_decode_bytes']:.2f}x"
        )


if __name__ == "__main__":
    main()
