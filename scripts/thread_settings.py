"""Torch CPU thread settings on a quiet and a busy machine, side by side (docs/BENCH.md, "Threads").

Each setting runs in a fresh process (OpenMP reads its environment once, at start-up) on the embedded model:
a decode of 64 rows x 24 new tokens with a KV cache (the default job's rollout) and one forward/backward of
64 x 64 tokens (its update). `--hogs N` starts N processes that spin on a core each for the whole measurement,
as other people's jobs do on a shared machine. Settings run in turn, round after round, so drift in the
machine's load reaches all of them alike; the table reports the median and range over rounds.

    python scripts/thread_settings.py --rounds 3 --hogs 0
    python scripts/thread_settings.py --rounds 3 --hogs 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

SETTINGS = {
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "2 threads": {"OMP_NUM_THREADS": "2"},
    "2 threads, passive wait": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "2 threads, no spin": {"OMP_NUM_THREADS": "2", "GOMP_SPINCOUNT": "0"},
}

WORKLOAD = r"""
import json, time, torch
from r3l.models import load_policy
policy, tokenizer = load_policy("smollm2-135m-instruct", torch.float32)
policy.eval()
prompt = torch.randint(100, 20000, (64, 40))
def decode():
    with torch.no_grad():
        out = policy(input_ids=prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(23):
            out = policy(input_ids=token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
def update():
    batch = torch.randint(100, 20000, (64, 64))
    policy.train()
    loss = policy(input_ids=batch, labels=batch).loss
    loss.backward()
    policy.zero_grad(set_to_none=True)
    policy.eval()
decode(); update()  # warm-up: kernels and allocator
started = time.perf_counter(); decode(); decoded = time.perf_counter()
update(); updated = time.perf_counter()
print(json.dumps({"decode_s": decoded - started, "update_s": updated - decoded,
                  "threads": torch.get_num_threads()}))
"""


def spin() -> None:
    while True:
        pass


def measure(extra_env: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(extra_env)
    done = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=0, help="processes spinning on a core each meanwhile")
    parser.add_argument("--out", default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    results: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    try:
        for _ in range(args.rounds):
            for name, extra in SETTINGS.items():
                results[name].append(measure(extra))
    finally:
        for hog in hogs:
            hog.terminate()
    load = os.getloadavg()[0]
    print(
        f"| setting ({args.hogs} spinning processes, load {load:.1f}, {os.cpu_count()} CPUs) "
        f"| decode 64x24 (s) | update 64x64 (s) |"
    )
    print("|---|---|---|")
    for name, runs in results.items():
        cells = []
        for key in ("decode_s", "update_s"):
            values = [run[key] for run in runs]
            cells.append(f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]")
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"hogs": args.hogs, "results": results, "started": time.time()}, handle, indent=1)


if __name__ == "__main__":
    main()
