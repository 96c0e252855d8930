"""Keys and values kept across generation calls (r3l/rollout/prefix_cache.py) and the decode cache that grows in
place (r3l/models/cache.py): the store's rules on hand cases, and the HF generator's outputs with the cache as
without it.

"Identical" here is what it can be on a CPU: the same tokens, and log-probabilities within 1e-4 in float32 (the
tolerance the learner's recomputation is held to). Bit-identical numbers are out of reach with or without this
cache: a position's keys computed in a decode step (a matrix product of a few rows) and the same keys computed
in a prefill (hundreds of rows) differ in the last bits, because the CPU's GEMM picks its kernel, and with it the
order of its sums, by the number of rows (measured: float32 outputs of one 576x1536 linear layer differ by up to
4e-5 between 1-8 rows and 16+ rows; bfloat16 by up to 0.25). Without the cache the generator re-prefills every
turn, so its numbers are the prefill's; with it they are the decode's, as the first turn's always were.
"""

import numpy as np
import pytest
import torch

from r3l.agent.episodes import AgentLimits, EpisodeRunner, EpisodeStart
from r3l.envs import make
from r3l.models.cache import roomy_cache
from r3l.rollout.generator import SamplingParams
from r3l.rollout.hf import HFGenerator
from r3l.rollout.json_close import json_object_end, report_end, tokens_to_report_end
from r3l.rollout.prefix_cache import PrefixStore, common_prefix

# --- the store's rules, on hand cases -----------------------------------------------------------------------


def test_common_prefix_counts_the_shared_leading_tokens():
    assert common_prefix(np.array([1, 2, 3, 4]), np.array([1, 2, 9])) == 2
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix(np.array([5]), np.array([6])) == 0
    assert common_prefix(np.array([], dtype=np.int64), np.array([1])) == 0


def kv(length: int) -> torch.Tensor:
    """A stand-in entry: 1 layer, keys and values, 1 head, `length` positions, head dim 2: 4 * length floats."""
    return torch.zeros(1, 2, 1, length, 2)


def test_the_store_finds_the_longest_shared_prefix_and_drops_what_a_newer_entry_extends():
    store = PrefixStore(capacity_bytes=10_000)
    store.put([1, 2, 3], kv(3))
    store.put([1, 7], kv(2))
    entry, shared = store.longest([1, 2, 3, 4, 5])
    assert entry is not None and list(entry.tokens) == [1, 2, 3] and shared == 3
    assert store.longest([9])[1] == 0
    store.put([1, 2, 3, 4, 5, 6], kv(6))  # the next turn of [1, 2, 3]: holds all of it
    assert len(store) == 2 and store.bytes == 4 * 4 * (2 + 6)
    entry, shared = store.longest([1, 2, 8])  # a retry from the middle: the longer entry, cut at 2
    assert list(entry.tokens) == [1, 2, 3, 4, 5, 6] and shared == 2


def test_the_store_evicts_the_least_recently_used_beyond_its_capacity_and_counts_it():
    store = PrefixStore(capacity_bytes=4 * 4 * 5)  # room for 5 positions
    store.put([1, 1], kv(2))
    store.put([2, 2], kv(2))
    store.longest([1, 1])  # [1, 1] used last: [2, 2] goes first
    store.put([3, 3], kv(2))
    assert store.evictions == 1 and store.longest([2, 2])[1] == 0 and store.longest([1, 1])[1] == 2
    store.put([4] * 9, kv(9))  # larger than the whole store: not kept, counted
    assert store.evictions == 2 and store.longest([4])[1] == 0


@pytest.mark.parametrize(
    "text, end",
    [
        ('{"a": 1}', 8),
        ('Here: {"a": {"b": 2}} and more', 21),
        ('{"s": "a } inside"} tail', 19),
        ('{"s": "an \\" escaped quote }"}', 30),
        ('{"s": "a backslash \\\\"} x', 23),
        ('} stray close, then {"a": 1}', 28),
        ('Prose with an unclosed "quote, then {"k": 0}', 44),  # quotes before the first { are prose
        ('{"open": [1, 2', None),
        ("no object at all", None),
    ],
)
def test_json_object_end_finds_the_close_of_the_first_object(text, end):
    assert json_object_end(text) == end


# --- the decode cache -----------------------------------------------------------------------------------------


def test_a_decode_step_writes_in_place_instead_of_copying_the_cache(tiny):
    """transformers' DynamicLayer concatenates: each step copies every layer's whole cache."""
    model, _ = tiny
    cache = roomy_cache(model, capacity=16)
    layer = cache.layers[0]
    layer.update(torch.ones(2, 1, 5, 4), torch.ones(2, 1, 5, 4))
    storage = layer.keys.data_ptr()
    keys, values = layer.update(torch.full((2, 1, 1, 4), 2.0), torch.full((2, 1, 1, 4), 3.0))
    assert keys.data_ptr() == storage and keys.shape == (2, 1, 6, 4) and layer.get_seq_length() == 6
    assert keys[:, :, 5].eq(2.0).all() and values[:, :, :5].eq(1.0).all()
    layer.update(torch.zeros(2, 1, 20, 4), torch.zeros(2, 1, 20, 4))  # past the room: grows, keeps what it held
    assert layer.get_seq_length() == 26 and layer.keys[:, :, 5].eq(2.0).all()


# --- the generator with and without kept keys and values ------------------------------------------------------


def outputs(generator, prompts, params, n=1):
    return [[(c.tokens, c.logprobs) for c in group] for group in generator.generate(prompts, params, n=n)]


def assert_same(got, expected, tolerance=1e-4):
    for got_group, expected_group in zip(got, expected, strict=True):
        for (tokens, logprobs), (expected_tokens, expected_logprobs) in zip(got_group, expected_group, strict=True):
            assert tokens == expected_tokens
            assert np.allclose(logprobs, expected_logprobs, atol=tolerance, rtol=0)


def extend(prompts, groups, turn):
    """Each prompt followed by its first completion and a few new tokens (the next turn's observation)."""
    return [p + group[0][0] + [30 + turn] * (2 + i) for i, (p, group) in enumerate(zip(prompts, groups))]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_calls_that_extend_earlier_ones_prefill_only_what_is_new_and_sample_the_same(tiny, temperature):
    model, tokenizer = tiny
    kept, fresh = (HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache=on) for on in (True, False))
    params = SamplingParams(temperature=temperature, max_new_tokens=6, seed=5)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], [11, 12, 13, 14, 15, 16, 17]]
    for turn in range(3):
        expected = outputs(fresh, prompts, params)
        assert_same(outputs(kept, prompts, params), expected)
        prompts = extend(prompts, expected, turn)
    assert kept.stats["kv_reused_positions"] > 0
    assert kept.stats["prefill_positions"] < fresh.stats["prefill_positions"] / 2


def test_new_weights_drop_the_kept_keys_and_values(tiny):
    """Kept keys and values belong to the weights that computed them: reused after a sync they would be stale."""
    model, tokenizer = tiny
    kept, fresh = (HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache=on) for on in (True, False))
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8]]
    first = outputs(kept, prompts, params)
    torch.manual_seed(0)
    changed = {name: tensor + 0.5 * torch.randn_like(tensor) for name, tensor in model.state_dict().items()}
    for generator in (kept, fresh):
        generator.sync_weights(changed)
    prompts = extend(prompts, first, 0)
    assert_same(outputs(kept, prompts, params), outputs(fresh, prompts, params), tolerance=1e-5)
    assert kept.stats["kv_reused_positions"] == 0


def test_a_full_store_evicts_counts_and_still_samples_the_same(tiny):
    model, tokenizer = tiny
    kept = HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache_bytes=20_000)
    fresh = HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache=False)
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], [11, 12, 13, 14, 15, 16, 17]]
    for turn in range(3):
        expected = outputs(fresh, prompts, params)
        assert_same(outputs(kept, prompts, params), expected)
        prompts = extend(prompts, expected, turn)
    assert kept.stats["kv_cache_evictions"] > 0 and kept.stats["kv_cache_bytes"] <= 20_000


def test_groups_of_n_keep_each_row_and_reuse_the_shared_opening(tiny):
    model, tokenizer = tiny
    kept, fresh = (HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache=on) for on in (True, False))
    params = SamplingParams(temperature=1.0, max_new_tokens=5, seed=2)
    opening = [[3, 4, 5, 6, 7, 8]]
    expected = outputs(fresh, opening, params, n=3)
    assert_same(outputs(kept, opening, params, n=3), expected)
    rows = [opening[0] + tokens + [40] for tokens, _ in expected[0]]
    assert_same(outputs(kept, rows, params), outputs(fresh, rows, params))
    assert kept.stats["kv_reused_positions"] >= 3 * len(opening[0])


def test_the_json_close_stops_a_row(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, dtype=torch.float32)
    report = tokenizer.encode('{"mistake": "a } in text", "n": {"x": 1}} and then', add_special_tokens=False)
    stops = [generator._hit_stop(report[:k], SamplingParams(stop_at_json_close=True)) for k in range(1, len(report))]
    first = stops.index(True)
    assert json_object_end(tokenizer.decode(report[: first + 1])) is not None
    assert json_object_end(tokenizer.decode(report[:first])) is None
    assert not any(generator._hit_stop(report[:k], SamplingParams()) for k in range(1, len(report)))


# --- whole episodes on the embedded model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    from r3l.models import load_policy

    return load_policy("smollm2-135m-instruct")


def play(embedded, make_env, kv_cache: bool, params: SamplingParams, retry: bool):
    """Two fresh episodes and, from the first one's step 1, a guided retry; every step's tokens and
    log-probabilities, and the generator's counters."""
    model, tokenizer = embedded
    generator = HFGenerator(model, tokenizer, dtype=torch.float32, kv_cache=kv_cache)
    runner = EpisodeRunner(make_env, generator, tokenizer, limits=AgentLimits(max_turns=3, terminate_on=()))
    env = make_env()
    tasks = env.tasks("train")[:2]
    env.close()
    episodes = runner.run([EpisodeStart(task) for task in tasks], params)
    if retry:
        start = EpisodeStart(tasks[0], base=episodes[0], pivot=1, guidance="Try a different move.")
        episodes += runner.run([start], params)
    runner.close()
    steps = [[[(s.completion.tokens, s.completion.logprobs)] for s in episode.steps] for episode in episodes]
    return steps, generator.stats


@pytest.mark.parametrize(
    "make_env, params, retry",
    [
        (
            lambda: make("textworld_express", games=["coin"], max_steps=6),
            SamplingParams(temperature=0.0, max_new_tokens=12),
            True,
        ),
        (
            lambda: make(
                "textarena", id="GuessTheNumber-v0", max_steps=6, train_size=4, test_size=2, distinct_games=False
            ),
            SamplingParams(temperature=1.0, max_new_tokens=12, seed=11),
            False,
        ),
    ],
    ids=["textworld_express-greedy-retry", "guess_the_number-sampled"],
)
def test_episodes_play_the_same_with_kept_keys_and_values(embedded, make_env, params, retry):
    kept, kept_stats = play(embedded, make_env, True, params, retry)
    fresh, fresh_stats = play(embedded, make_env, False, params, retry)
    assert [len(e) for e in kept] == [len(e) for e in fresh]
    for kept_episode, fresh_episode in zip(kept, fresh):
        assert_same(kept_episode, fresh_episode)
    assert kept_stats["prefill_positions"] < fresh_stats["prefill_positions"] / 2


@pytest.mark.parametrize(
    "text, end",
    [
        ('{"a": 1} then more', 8),
        ('{not json} and then {"a": 1} more', 28),  # a first object that does not parse is not the report
        ('<think>maybe {"a": 1}?', None),  # thinking still open: no report yet
        ('<think>{"draft": 0}</think> {"a": 1} x', 36),
        ('{"open": [1, 2', None),
        # an unclosed brace cannot be told from an object in progress: no stop at the object inside it (the parser,
        # reading the finished text, still finds {"b": 1})
        ('Use {x and {"b": 1}', None),
        ('{"report": {"b": 1}', None),
    ],
)
def test_report_end_is_the_first_parsing_object_after_thinking(text, end):
    assert report_end(text) == end


def test_a_reply_is_cut_at_its_reports_end_token_by_token(tiny):
    _, tokenizer = tiny
    reply = tokenizer.encode('Sure. {"a": "x}"} and some rambling after it', add_special_tokens=False)
    keep = tokens_to_report_end(reply, tokenizer.decode)
    assert keep is not None and keep < len(reply)
    assert report_end(tokenizer.decode(reply[:keep])) is not None
    assert report_end(tokenizer.decode(reply[: keep - 1])) is None
    assert tokens_to_report_end(tokenizer.encode("no report here", add_special_tokens=False), tokenizer.decode) is None
