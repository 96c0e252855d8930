"""Identical prompts in a batch split across rollout workers (issue 51 #8): every row draws the stream it draws in
the whole batch, and two copies of one prompt draw different ones."""

from __future__ import annotations

from r3l.distributed.sharding import contiguous_shards, moved_twins, twin_shards
from r3l.rollout.seeds import row_seeds

P, Q, R, S = [5, 6, 7], [8, 9], [10], [11, 12]


def shard_seeds(batch, shards, seed=7, n=2):
    """Each task's row seeds as the worker holding it draws them: one call per shard, its tasks in order."""
    drawn = {}
    for shard in shards:
        seeds = row_seeds(seed, [batch[index] for index in shard], n)
        for position, index in enumerate(shard):
            drawn[index] = seeds[position * n : (position + 1) * n]
    return [drawn[index] for index in range(len(batch))]


def test_twins_across_the_cut_draw_the_whole_batchs_streams():
    batch = [P, Q, R, P]  # contiguous shards for two workers would put the two copies of P apart
    assert [list(shard) for shard in contiguous_shards(len(batch), 2)] == [[0, 1], [2, 3]]
    whole = row_seeds(7, batch, n=2)
    whole_by_task = [whole[index * 2 : index * 2 + 2] for index in range(len(batch))]
    shards = twin_shards(batch_keys(batch), 2)
    assert shard_seeds(batch, shards) == whole_by_task
    assert set(whole_by_task[0]).isdisjoint(whole_by_task[3])  # the two copies draw different streams


def test_the_contiguous_cut_gives_twins_the_same_stream():
    """What the pool did before: each worker counts P's rows from zero, so both copies draw one stream."""
    batch = [P, Q, R, P]
    seeds = shard_seeds(batch, [list(shard) for shard in contiguous_shards(len(batch), 2)])
    assert seeds[0] == seeds[3]


def batch_keys(batch):
    return [tuple(prompt) for prompt in batch]


def test_twin_shards_are_the_contiguous_ones_without_twins_and_keep_twins_together():
    assert twin_shards(list("abcdef"), 2) == [[0, 1, 2], [3, 4, 5]]
    assert twin_shards(list("abcdaf"), 2) == [[0, 1, 2, 4], [3, 5]]
    assert moved_twins(twin_shards(list("abcdaf"), 2), 2) == 1 and moved_twins([[0, 1, 2], [3, 4, 5]], 2) == 0
    assert twin_shards(list("aaaa"), 3) == [[0, 1, 2, 3]]  # one prompt: one worker, none empty
    assert twin_shards(list("ab"), 4) == [[0], [1]] and twin_shards([], 2) == []
    for keys in ("abcab", "aabbcc", "abcdeb", "xyzzyx"):
        shards = twin_shards(list(keys), 3)
        assert sorted(i for shard in shards for i in shard) == list(range(len(keys)))
        assert all(shard == sorted(shard) for shard in shards)
        where = {keys[i]: {n for n, shard in enumerate(shards) if i in shard} for i in range(len(keys))}
        assert all(len(found) == 1 for found in where.values())
        assert shard_seeds([[ord(k)] for k in keys], shards, n=1) == [
            [s] for s in row_seeds(7, [[ord(k)] for k in keys])
        ]
