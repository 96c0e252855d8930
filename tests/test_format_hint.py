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
