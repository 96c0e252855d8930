"""One process, one trainer, training steps at 1 thread, at 2 threads, and under r3l.threads.thread_plan (sampling
on the plan's count, the update on all), the arms alternating step by step so that load drifts reach them alike.

    python scripts/step_threads.py --rounds 3                       # the default job
    python scripts/step_threads.py --rounds 2 model=qwen2.5-coder-0.5b-instruct train.tasks_per_step=4

Every arm trains with train.skip_zero_advantage=false (the update's work does not depend on the rewards drawn).
The plan arm is the trainer as it runs by default (Trainer.phase: sampling on one thread for a model under 1B
parameters, the update on every thread); the others fix torch's count for the whole step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from r3l.memory import limit_onednn_cache
from r3l.threads import apply_openmp_wait_defaults

apply_openmp_wait_defaults()
limit_onednn_cache()

import torch  # noqa: E402

from r3l.config import load_config  # noqa: E402
from r3l.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    overrides = [
        "eval.size=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        "train.skip_zero_advantage=false",
    ]
    config = load_config(None, [*overrides, *args.overrides])
    trainer = Trainer(config, run_dir=Path(tempfile.mkdtemp(prefix="step_threads_")))
    parameters = sum(p.numel() for p in trainer.model.parameters())
    # (torch's thread count, train.sampling_threads): the trainer's own plan (r3l/threads.py) is the third arm
    arms = {"1 thread": (1, None), "2 threads": (2, 2), "plan (2 given)": (2, None)}

    def step(arm: tuple[int, int | None]) -> tuple[float, float, float]:
        threads, sampling = arm
        trainer.config.train.sampling_threads = sampling
        torch.set_num_threads(threads)
        started = time.perf_counter()
        metrics = trainer.train_step()
        chosen.update({key: value for key, value in metrics.items() if key.startswith("threads/")})
        return time.perf_counter() - started, metrics["rollout_seconds"], metrics["train_seconds"]

    chosen: dict[str, float] = {}
    step((2, 2))  # warm-up: kernels, allocator, AdamW's moments
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in arms}
    names = list(arms)
    for round_index in range(args.rounds):
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            chosen.clear()
            results[name].append(step(arms[name]))
            seconds = results[name][-1]
            print(
                f"{name}: step {seconds[0]:.2f} s (sampling {seconds[1]:.2f}, update {seconds[2]:.2f}), "
                f"load {os.getloadavg()[0]:.1f}",
                *(f"{key} {value:g}" for key, value in chosen.items()),
                flush=True,
            )
    trainer.close()
    print(f"\n{config.model.name}, {parameters / 1e6:.0f}M parameters, {args.rounds} rounds, medians [min, max]")
    print("| arm | step s | sampling s | update s | step vs 1 thread |")
    print("|---|---|---|---|---|")
    one = statistics.median(r[0] for r in results["1 thread"])
    for name, rows in results.items():
        cells = [f"{statistics.median(c):.2f} [{min(c):.2f}, {max(c):.2f}]" for c in zip(*rows)]
        print(f"| {name} | {' | '.join(cells)} | {one / statistics.median(r[0] for r in rows):.2f}x |")


if __name__ == "__main__":
    main()
