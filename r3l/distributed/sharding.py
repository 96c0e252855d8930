"""How a step's batch is split across rollout workers and how their metrics are put back together."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

# metrics that count things (summed across shards); every other metric is a mean (weighted by tasks)
COUNTED = frozenset(
    {
        "generated_tokens",
        "base_count",
        "base_successes",
        "base_generated_tokens",
        "replay_mismatches",
        "retry_count",
        "filled_slots",
        "success_reflections_trained",
        "prompts_over_context",
        "report_count",
    }
)
COUNTED_PREFIXES = ("pivot_count/",)


def is_counted(key: str) -> bool:
    return key in COUNTED or key.startswith(COUNTED_PREFIXES)


def contiguous_shards(tasks: int, workers: int) -> list[range]:
    """Consecutive slices of the batch, sizes differing by at most one, larger first; no empty slice. Whole
    tasks (so whole groups, with their reflections and retries) stay on one worker, and concatenating the
    shards' experiences gives the batch order."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    size, extra = divmod(tasks, workers)
    shards, start = [], 0
    for index in range(min(workers, tasks)):
        stop = start + size + (index < extra)
        shards.append(range(start, stop))
        start = stop
    return shards


def twin_shards(keys: Sequence[Hashable], workers: int) -> list[list[int]]:
    """Each worker's task indices: the contiguous shards, except that every task whose key (its prompt) an
    earlier task has goes with that earlier one, so all twins sample on one worker. A row's sampling seed counts the
    rows of the same prompt before it in one generator call (rollout/seeds.py); twins split across workers would
    each count from zero and draw the same stream, where the whole batch gives them different ones. Every prompt a
    task's episode sends starts with its first prompt, so only twins can share one: with them together a worker
    draws exactly what the whole batch would. Indices ascend within a shard; no shard is empty."""
    sizes = [len(shard) for shard in contiguous_shards(len(keys), workers)]
    first_index: dict[Hashable, int] = {}
    shard_of: dict[int, int] = {}
    shards: list[list[int]] = [[] for _ in sizes]
    current = 0
    for index, key in enumerate(keys):
        first = first_index.setdefault(key, index)
        if first != index:
            shards[shard_of[first]].append(index)
            continue
        while current < len(sizes) - 1 and len(shards[current]) >= sizes[current]:
            current += 1
        shards[current].append(index)
        shard_of[index] = current
    return [sorted(shard) for shard in shards if shard]


def moved_twins(shards: Sequence[Sequence[int]], workers: int) -> int:
    """How many tasks `twin_shards` put on another worker than their contiguous shard."""
    contiguous = contiguous_shards(sum(len(shard) for shard in shards), workers)
    return sum(index not in contiguous[number] for number, shard in enumerate(shards) for index in shard)


def merge_shard_metrics(parts: Sequence[tuple[dict[str, float], int]]) -> dict[str, float]:
    """One step's metrics from each shard's (metrics, number of tasks): counts summed, means weighted by tasks.
    A mean is exact when every task contributes the same number of items to it (episodes of a group); a mean
    over items whose number varies by task (retries, completions of multi-turn episodes) is the task-weighted
    mean of the shard means, close to but not always the one-process figure."""
    merged: dict[str, float] = {}
    weights: dict[str, int] = {}
    for metrics, tasks in parts:
        for key, value in metrics.items():
            if is_counted(key):
                merged[key] = merged.get(key, 0.0) + value
            else:
                merged[key] = merged.get(key, 0.0) + value * tasks
                weights[key] = weights.get(key, 0) + tasks
    return {key: value / weights[key] if key in weights else value for key, value in merged.items()}
