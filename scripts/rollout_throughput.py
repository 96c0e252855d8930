"""Rollout throughput of 1 vs 2 Ray rollout workers on a multi-turn environment where the simulator dominates
(the scripted generator on tiny-random, so almost no time goes to the model), the two alternating in one
process on the same batch:  python scripts/rollout_throughput.py [scienceworld|textworld_express] [REPEATS]"""

import statistics
import sys
import tempfile
import time

if __name__ == "__main__":
    from r3l.config import load_config
    from r3l.trainer import Trainer

    env = sys.argv[1] if len(sys.argv) > 1 else "scienceworld"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    base = [
        "model=tiny-random",
        "generator=scripted",
        "algorithm=grpo",
        f"env={env}",
        "env.args.max_steps=10",
        "sampling.group_size=4",
        "sampling.max_new_tokens=32",
        "train.tasks_per_step=4",
        "eval.size=0",
        "logging.tensorboard=false",
        "logging.progress=false",
        "distributed.worker_cpus=0.5",
    ]
    trainers = {
        workers: Trainer(
            load_config(None, [*base, f"run.dir={tempfile.mkdtemp()}", f"distributed.rollout_workers={workers}"])
        )
        for workers in (1, 2)
    }
    try:
        tasks = trainers[1].sampler.next_batch(4)
        seconds: dict[int, list[float]] = {1: [], 2: []}
        for repeat in range(repeats):
            for workers, trainer in trainers.items():
                started = time.perf_counter()
                trainer.rollout_pool.explore(tasks, repeat)
                seconds[workers].append(time.perf_counter() - started)
        median = {w: statistics.median(times[1:]) for w, times in seconds.items()}  # the first batch starts the JVMs
        for workers, times in seconds.items():
            print(
                f"{workers} worker(s): median {median[workers]:.2f} s per batch after the first; each: "
                + ", ".join(f"{t:.1f}" for t in times)
            )
        print(f"speed-up with 2 workers: {median[1] / median[2]:.2f}x")
    finally:
        for trainer in reversed(trainers.values()):  # the first one started the local Ray: it stops it last
            trainer.close()
