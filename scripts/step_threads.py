"""One process, one trainer, training steps at 1 thread, at 2 threads, and under r3l.threads.thread_plan (sampling
on the plan's count, the update on all), the arms alternating step by step so that load drifts reach them alike.

    python scripts/step_threads.py --rounds 3                       # the default job
    python scripts/step_threads.py --rounds 2 model=qwen2.5-coder-0.5b-instruct train.tasks_per_step=4

Every arm trains with train.skip_zero_advantage=false (the update's work does not depend on the rewards drawn).
The plan arm wraps the generator's `generate` and the learner's `update` in `phase_threads`: what the trainer's call
sites would do (r3l/trainer.py is not changed here).
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
from r3l.threads import phase_threads  # noqa: E402
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
    generator, learner = trainer.parts.generator, trainer.learner
    parameters = sum(p.numel() for p in trainer.model.parameters())
    plain_generate, plain_update = generator.generate, learner.update
    chosen: dict[str, float] = {}

    def planned_generate(*args, **kwargs):
        with phase_threads("generate", parameters, chosen):
            return plain_generate(*args, **kwargs)

    def planned_update(*args, **kwargs):
        with phase_threads("learn", parameters, chosen):
            return plain_update(*args, **kwargs)

    arms = {"1 thread": 1, "2 threads": 2, "plan (2 given)": 0}

    def step(threads: int) -> tuple[float, float, float]:
        planned = threads == 0
        generator.generate = planned_generate if planned else plain_generate
        learner.update = planned_update if planned else plain_update
        torch.set_num_threads(2 if planned else threads)
        started = time.perf_counter()
        metrics = trainer.train_step()
        return time.perf_counter() - started, metrics["rollout_seconds"], metrics["train_seconds"]

    step(2)  # warm-up: kernels, allocator, AdamW's moments
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
