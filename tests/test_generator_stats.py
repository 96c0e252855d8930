"""A training step logs its share of the generator's running totals (generator/NAME) and the share of prompt
positions taken from kept keys and values."""

from r3l.rollout.generator import step_generator_stats
from tests.conftest import one_step_config


def test_a_step_logs_the_difference_of_totals_and_the_level_of_what_is_kept():
    before = {"prefill_positions": 100.0, "kv_reused_positions": 50.0, "kv_cache_evictions": 1.0, "kv_cache_bytes": 9.0}
    after = {"prefill_positions": 130.0, "kv_reused_positions": 140.0, "kv_cache_evictions": 3.0, "kv_cache_bytes": 4.0}
    step = step_generator_stats(before, after)
    assert step == {
        "generator/prefill_positions": 30.0,
        "generator/kv_reused_positions": 90.0,
        "generator/kv_cache_evictions": 2.0,
        "generator/kv_cache_bytes": 4.0,
        "generator/kv_reuse_share": 0.75,  # 90 of 120 positions read
    }


def test_no_share_where_the_step_read_no_prompt_and_new_totals_count_from_zero():
    assert step_generator_stats({}, {"decode_steps": 5.0}) == {"generator/decode_steps": 5.0}
    assert step_generator_stats({}, {}) == {}


def test_a_training_step_logs_what_its_generator_did(tmp_path):
    from r3l.trainer import Trainer

    config = one_step_config(tmp_path, "sampling.max_new_tokens=4")
    trainer = Trainer(config)
    try:
        before = dict(trainer.parts.generator.stats)
        metrics = trainer.train_step()
        after = trainer.parts.generator.stats
    finally:
        trainer.close()
    assert metrics["generator/prefill_positions"] == after["prefill_positions"] - before["prefill_positions"] > 0
    assert metrics["generator/generated_tokens"] == metrics["generated_tokens"]
    assert 0.0 <= metrics["generator/kv_reuse_share"] <= 1.0
