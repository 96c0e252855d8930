"""The one line `r3l eval` prints when most replies miss the answer format (Qwen2.5-Coder-0.5B's untagged calls)."""

from r3l.evaluate import format_hint


def test_the_hint_names_the_share_and_the_grammar_when_most_first_replies_miss_the_format():
    hint = format_hint({"success": 0.0, "format_missing": 1.0}, structured_replies=False)
    assert hint.startswith("100% of the first replies") and "structured.replies=true" in hint and "\n" not in hint
    two_tries = {"first_try": {"format_missing": 0.5}, "second_try": {"format_missing": 1.0}}
    assert format_hint(two_tries, structured_replies=False).startswith("50% ")


def test_no_hint_below_half_where_unknown_or_where_the_grammar_is_already_on():
    assert format_hint({"format_missing": 0.49}, structured_replies=False) is None
    assert format_hint({"format_missing": None}, structured_replies=False) is None
    assert format_hint({"first_try": {"format_missing": None}}, structured_replies=False) is None
    assert format_hint({"format_missing": 1.0}, structured_replies=True) is None


def test_replies_cut_off_at_the_token_limit_are_named_before_the_grammar():
    """gsm at 256 tokens: half of Qwen's replies stopped mid-solution, before their \\boxed{} answer."""
    hint = format_hint({"format_missing": 0.5, "cut_off": 0.5}, structured_replies=False)
    assert hint.startswith("50% of the first replies") and "50% were cut off" in hint
    assert "raise eval.max_new_tokens" in hint and "structured.replies" not in hint and "\n" not in hint
    assert "raise eval.max_new_tokens" in format_hint({"first_try": {"format_missing": 1.0, "cut_off": 0.5}}, True)
    assert "structured.replies=true" in format_hint({"format_missing": 1.0, "cut_off": 0.49}, False)
    assert format_hint({"format_missing": 1.0, "cut_off": 0.49}, True) is None
    assert format_hint({"format_missing": 0.4, "cut_off": 0.4}, False) is None


def test_an_evaluation_records_which_replies_were_cut_off_at_the_token_limit(tiny):
    """A reply stopped by the token limit is cut off; one that ended by itself (the scripted answers) is not."""
    import torch

    from r3l.envs import make
    from r3l.evaluate import evaluate
    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator
    from r3l.testing.scripted import ScriptedGenerator

    model, tokenizer = tiny
    make_env = lambda: make("arithmetic", test_size=3, seed=0)  # noqa: E731
    tasks = make_env().tasks("test")
    one_token = SamplingParams(temperature=1.0, max_new_tokens=1, seed=0)
    cut = evaluate(tasks, make_env, HFGenerator(model, tokenizer, dtype=torch.float32), tokenizer, one_token)
    assert [s["cut_off"] for s in cut.samples] == [True] * 3 and cut.summary()["cut_off"] == 1.0
    whole = evaluate(tasks, make_env, ScriptedGenerator(model, tokenizer), tokenizer, SamplingParams(max_new_tokens=64))
    assert [s["cut_off"] for s in whole.samples] == [False] * 3 and whole.summary()["cut_off"] == 0.0


def test_every_column_of_the_two_attempt_evaluation_counts_its_own_cut_off_replies(tiny):
    """R3's second tries (after a reflection, after the verdict alone) are read for the token limit as the first."""
    import torch

    from r3l.envs import make
    from r3l.evaluate import TwoAttempts, evaluate_two_attempts
    from r3l.reflection.prompts import ReflectionPrompts
    from r3l.rollout.chat import PromptFormat
    from r3l.rollout.generator import SamplingParams
    from r3l.rollout.hf import HFGenerator

    model, tokenizer = tiny
    make_env = lambda: make("arithmetic", test_size=3, seed=0)  # noqa: E731
    record = evaluate_two_attempts(
        make_env().tasks("test"),
        make_env,
        HFGenerator(model, tokenizer, dtype=torch.float32),
        tokenizer,
        SamplingParams(temperature=1.0, max_new_tokens=1, seed=0),
        PromptFormat(),
        TwoAttempts(ReflectionPrompts.load(), reflection_max_new_tokens=1),
    )
    failures = [s for s in record["samples"] if not s["first_success"]]
    assert len(failures) == 3 and all(s["second_cut_off"] and s["verdict_only_cut_off"] for s in failures)
    for column in ("first_try", "second_try", "second_try_verdict_only"):
        assert record[column]["cut_off"] == 1.0, column
