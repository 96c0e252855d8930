"""Tool-call parsing and the two verifiers (xLAM exact match, BFCL acceptable values), on hand-made cases."""

import json

import pytest

from r3l.grading.tool_calls import (
    MAX_REPLY_CHARS,
    Call,
    ToolCallFormatError,
    bfcl_reference_calls,
    format_tool_calls,
    parse_tool_calls,
    same_value,
    verify_bfcl,
    verify_exact,
)

WEATHER = {
    "name": "get_weather",
    "description": "Weather in a city.",
    "parameters": {
        "type": "dict",
        "required": ["city"],
        "properties": {
            "city": {"type": "string"},
            "units": {"type": "string"},
            "days": {"type": "integer"},
            "temp": {"type": "float"},
        },
    },
}
TIME = {"name": "get_time", "parameters": {"type": "dict", "properties": {"zone": {"type": "string"}}}}
FUNCTIONS = [WEATHER, TIME]


def tagged(*objects, tag="tool_call"):
    return "".join(f"<{tag}>{json.dumps(o)}</{tag}>" for o in objects)


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


# ---------------------------------------------------------------------------------------------- parsing


def test_parses_one_list_or_several_tags_with_text_around():
    listed = parse_tool_calls(f"Let me think.\n<tool_call>{json.dumps([call('a', x=1), call('b')])}</tool_call>")
    several = parse_tool_calls("ok " + tagged(call("a", x=1)) + " and " + tagged(call("b")) + " done")
    assert listed == several == [Call("a", {"x": 1}), Call("b", {})]
    assert parse_tool_calls(tagged(call("a"), tag="fn"), tag="fn") == [Call("a", {})]
    calls = [Call("f", {"s": "é", "n": [1, 2.5]})]
    assert parse_tool_calls(format_tool_calls(calls)) == calls


@pytest.mark.parametrize(
    "text, message",
    [
        ("The weather is nice.", "no <tool_call> block found"),
        ('<tool_call>{"name": "f", "arguments": {}}', "the <tool_call> tag is never closed with </tool_call>"),
        ("<tool_call>  </tool_call>", "the tool call is empty"),
        ('<tool_call>{"name": "f", "arguments": {"x": 1,}}</tool_call>', "the tool call is not valid JSON: "),
        ("<tool_call>{'name': 'f', 'arguments': {}}</tool_call>", "the tool call is not valid JSON: "),
        ('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>', "NaN is not a JSON value"),
        ('<tool_call>{"name": "f", "arguments": {"x": 1, "x": 2}}</tool_call>', "the key 'x' appears twice"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'the tool call has no "name" string'),
        ('<tool_call>{"name": "f"}</tool_call>', 'the tool call has no "arguments"'),
        ('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', "are not a JSON object"),
        ('<tool_call>{"name": "f", "parameters": {}}</tool_call>', "unexpected key 'parameters'"),
        ('<tool_call>["f"]</tool_call>', "must be a JSON object"),
        (
            '<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
            "tool call block 2 is not valid JSON",
        ),
        ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", "nested too deeply"),
        ('<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}</tool_call>", "not valid JSON"),
    ],
)
def test_malformed_replies_raise_one_short_message(text, message):
    with pytest.raises(ToolCallFormatError) as error:
        parse_tool_calls(text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_huge_input_is_rejected_quickly():
    with pytest.raises(ToolCallFormatError, match="too long"):
        parse_tool_calls("<tool_call>" * (MAX_REPLY_CHARS // 5))
    with pytest.raises(ToolCallFormatError, match="too many tool calls"):
        parse_tool_calls("<tool_call>" + json.dumps([call("f")] * 100) + "</tool_call>")


# ---------------------------------------------------------------------------------------- value equality


def test_values_compare_by_json_type_and_structure():
    assert same_value(1, 1.0) and same_value({"a": [1, "x"]}, {"a": [1.0, "x"]})
    assert not same_value(1, "1") and not same_value(True, 1) and not same_value(0, False)
    assert not same_value(None, "") and not same_value([1, 2], [2, 1]) and not same_value({"a": 1}, {"a": 1, "b": 2})


# -------------------------------------------------------------------------------------------- xLAM exact

GOLD = [Call("get_weather", {"city": "Paris", "days": 3}), Call("get_time", {"zone": "CET"})]


def test_exact_accepts_reordered_arguments_and_calls():
    calls = parse_tool_calls(tagged(call("get_time", zone="CET"), call("get_weather", days=3, city="Paris")))
    verdict = verify_exact(calls, GOLD, FUNCTIONS)
    assert (verdict.reward, verdict.success, verdict.feedback) == (1.0, True, "correct: all 2 calls match")


@pytest.mark.parametrize(
    "calls, feedback",
    [
        (
            [call("get_weather", city="Paris", days="3"), call("get_time", zone="CET")],
            "argument 'days' of get_weather is '3', expected 3",
        ),
        ([call("get_weather", city="Paris", days=3)], "made 1 call, expected 2; missing a call to get_time"),
        (
            [call("get_weather", city="Paris", days=3), call("get_time", zone="CET"), call("get_time", zone="CET")],
            "made 3 calls, expected 2",
        ),
        (
            [call("get_weather", city="Paris"), call("get_time", zone="CET")],
            "missing required argument 'days' for get_weather",
        ),
        (
            [call("get_weather", city="Paris", days=3, units="C"), call("get_time", zone="CET")],
            "unexpected argument 'units' for get_weather",
        ),
        (
            [call("get_weather", city="Paris", days=3), call("get_news", zone="CET")],
            "called get_news, which is not an available function; missing a call to get_time",
        ),
    ],
)
def test_exact_failures_explain_themselves(calls, feedback):
    verdict = verify_exact(parse_tool_calls(tagged(*calls)), GOLD, FUNCTIONS)
    assert (verdict.reward, verdict.success, verdict.feedback) == (0.0, False, feedback)


def test_exact_accepts_gold_as_plain_dicts_and_equal_numbers():
    assert verify_exact(
        [Call("get_weather", {"city": "Paris", "days": 3.0})], [call("get_weather", city="Paris", days=3)]
    ).success


# --------------------------------------------------------------------------------------------------- BFCL

TRUTH = [{"get_weather": {"city": ["London", "London, UK"], "units": ["metric", ""], "days": [2], "temp": [1.5, ""]}}]


def bfcl(*calls, truth=TRUTH, **options):
    return verify_bfcl(parse_tool_calls(tagged(*calls)), truth, FUNCTIONS, **options)


def test_bfcl_accepts_any_acceptable_value_reordered_and_optional_omitted():
    assert bfcl(call("get_weather", days=2, city=" London, UK ")).success
    assert bfcl(call("get_weather", units="metric", city="London", days=2, temp=1.5)).success


@pytest.mark.parametrize(
    "calls, feedback",
    [
        (
            [call("get_weather", city="Paris", days=2)],
            "argument 'city' of get_weather is 'Paris', expected one of ['London', 'London, UK']",
        ),
        ([call("get_weather", city="london", days=2)], "argument 'city' of get_weather is 'london'"),
        ([call("get_weather", city="London", days="2")], "argument 'days' of get_weather is '2', expected one of [2]"),
        (
            [call("get_weather", city="London", days=2.0)],
            "argument 'days' of get_weather should be an integer, got 2.0",
        ),
        ([call("get_weather", city="London")], "missing required argument 'days' for get_weather"),
        ([call("get_weather", city="London", days=2, zone="UTC")], "unexpected argument 'zone' for get_weather"),
        ([call("get_time", zone="UTC")], "wrong function: called get_time, expected get_weather"),
        ([call("get_weather", city="London", days=2)] * 2, "made 2 calls, expected 1"),
        (
            [call("weather", city="London", days=2)],
            "called weather, which is not an available function; missing a call to get_weather",
        ),
        (
            [call("get_weather", city="Rome", days=3, units="x", zone=1)],
            "argument 'city' of get_weather is 'Rome', expected one of ['London', 'London, UK']; "
            "argument 'days' of get_weather is 3, expected one of [2]; "
            "argument 'units' of get_weather is 'x', expected one of ['metric']; "
            "unexpected argument 'zone' for get_weather",
        ),
    ],
)
def test_bfcl_failures_explain_themselves(calls, feedback):
    verdict = bfcl(*calls)
    assert not verdict.success and verdict.reward == 0.0
    assert verdict.feedback.startswith(feedback)


def test_bfcl_accepts_int_for_float_and_lenient_strings_on_request():
    assert bfcl(call("get_weather", city="London", days=2, temp=1.5)).success
    truth = [{"get_weather": {"city": ["London"], "days": [2], "temp": [2.0]}}]
    assert bfcl(call("get_weather", city="London", days=2, temp=2), truth=truth).success
    assert not bfcl(call("get_weather", city="london", days=2)).success
    assert bfcl(call("get_weather", city="london uk", days=2), lenient_strings=True).success


PARALLEL = [
    {"get_weather": {"city": ["London"], "days": [1]}},
    {"get_weather": {"city": ["Paris"], "days": [1]}},
    {"get_time": {"zone": ["CET"]}},
]


def test_bfcl_parallel_calls_match_in_any_order_one_to_one():
    calls = [
        call("get_time", zone="CET"),
        call("get_weather", days=1, city="Paris"),
        call("get_weather", city="London", days=1),
    ]
    assert bfcl(*calls, truth=PARALLEL).success
    twice = [
        call("get_time", zone="CET"),
        call("get_weather", city="Paris", days=1),
        call("get_weather", city="Paris", days=1),
    ]
    assert (
        bfcl(*twice, truth=PARALLEL).feedback == "argument 'city' of get_weather is 'Paris', expected one of ['London']"
    )
    short = bfcl(call("get_weather", city="Paris", days=1), call("get_time", zone="CET"), truth=PARALLEL)
    assert short.feedback == "made 2 calls, expected 3; missing a call to get_weather"


def test_bfcl_nested_dict_values_and_reference_calls():
    functions = [
        {
            "name": "find",
            "parameters": {
                "type": "dict",
                "properties": {
                    "where": {"type": "dict", "properties": {}},
                    "rules": {"type": "array", "items": {"type": "dict"}},
                },
            },
        }
    ]
    truth = [
        {
            "find": {
                "where": [{"school": ["Bluebird HS", "Bluebird"], "grade": [9, ""]}],
                "rules": [[{"field": ["age"], "value": [25]}], ""],
            }
        }
    ]
    reference = bfcl_reference_calls(truth, functions)
    assert reference == [Call("find", {"where": {"school": "Bluebird HS"}})]
    assert verify_bfcl(reference, truth, functions).success
    good = Call("find", {"where": {"grade": 9, "school": "Bluebird"}, "rules": [{"value": 25, "field": "age"}]})
    assert verify_bfcl([good], truth, functions).success
    bad = Call("find", {"where": {"school": "Bluebird", "city": "X"}})
    verdict = verify_bfcl([bad], truth, functions)
    assert verdict.feedback.startswith("argument 'where' of find is {") and "expected one of [{" in verdict.feedback


def test_bfcl_reference_calls_give_what_the_schema_requires_even_if_the_truth_marks_it_optional():
    functions = [
        {
            "name": "factors",
            "parameters": {
                "type": "dict",
                "required": ["number", "formatted"],
                "properties": {
                    "number": {"type": "integer"},
                    "formatted": {"type": "boolean"},
                    "limit": {"type": "integer"},
                },
            },
        }
    ]
    truth = [{"factors": {"number": [450], "formatted": ["", True], "limit": ["", 10]}}]  # as in simple_python_17
    reference = bfcl_reference_calls(truth, functions)
    assert reference == [Call("factors", {"number": 450, "formatted": True})]
    assert verify_bfcl(reference, truth, functions).success
