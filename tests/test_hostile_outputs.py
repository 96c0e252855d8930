"""Hostile model output, fuzzed: 10,000 seeded cases through every verifier and parser (huge replies, control
characters and lone surrogates, deeply nested or enormous JSON, numbers such as 9**9**9, 1e309, NaN and
Infinity, unbalanced tags, code). Each must give a verdict with a feedback sentence (or its parser's own error),
within a second of CPU time, and never run anything."""

import json
import os
import random
import time
from pathlib import Path

import pytest

from r3l.agent.actions import parse_reply
from r3l.envs import make
from r3l.envs.base import Verdict
from r3l.envs.games.text_game import normalise_action
from r3l.grading.tool_calls import ToolCallFormatError, parse_tool_calls
from r3l.grading.verifiers import VERIFIERS
from r3l.reflection.report import Report, ReportError, parse_report

CASES = int(os.environ.get("R3L_FUZZ_CASES", "2000"))  # R3L_FUZZ_CASES=10000 for the full run (docs/RELIABILITY.md)
CPU_SECONDS_PER_CASE = 1.0
SENTINEL = Path("/tmp/r3l-hostile-output-ran")
NUMBERS = [
    "9**9**9",
    "1e309",
    "-1e309",
    "NaN",
    "Infinity",
    "-Infinity",
    "1" * 5000,
    "0x" + "f" * 400,
    "1/0",
    "10**10**10",
    "2^1000000",
    "\\frac{1}{0}",
    "1e-400",
    "-0",
    "1_000",
    "٣",
    "½",
]
CODE = [
    f"__import__('os').system('touch {SENTINEL}')",
    f"open('{SENTINEL}', 'w')",
    "exec('1')",
    f"$(touch {SENTINEL})",
    "lambda: 1",
    "{{7*7}}",
]
TAGS = [
    "<answer>",
    "</answer>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<action>",
    "</action>",
    "<answer",
    "</answer",
    "<<answer>>",
    "<ANSWER>",
]


def nested_json(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def random_text(draw: random.Random, size: int) -> str:
    """Printable text, control characters, lone surrogates and characters from far planes."""
    pieces = []
    for _ in range(size):
        kind = draw.random()
        if kind < 0.6:
            pieces.append(chr(draw.randint(32, 126)))
        elif kind < 0.75:
            pieces.append(chr(draw.randint(0, 31)))
        elif kind < 0.85:
            pieces.append(chr(draw.randint(0xD800, 0xDFFF)))  # what a bad byte decodes to with surrogateescape
        else:
            pieces.append(chr(draw.randint(0x80, 0x10FFFF)))
    return "".join(pieces)


def hostile_case(draw: random.Random) -> str:
    kind = draw.randrange(12)
    if kind == 0:
        return random_text(draw, draw.randint(0, 400))
    if kind == 1:  # huge
        return draw.choice(["9", "{", "<answer>", "a", "[", '"', "\\"]) * draw.randint(10_000, 1_000_000)
    if kind == 2:
        return f"<answer>{nested_json(draw.randint(100, 200_000))}</answer>"
    if kind == 3:
        return f"<tool_call>{nested_json(draw.randint(100, 200_000))}</tool_call>"
    if kind == 4:
        return f"<answer>{draw.choice(NUMBERS)}</answer>"
    if kind == 5:
        return json.dumps(
            {
                "trajectory_summary": draw.choice(NUMBERS),
                "root_cause_analysis": draw.choice(CODE),
                "trajectory_outcome": draw.choice(["failure", "FAILURE", None, 7, "x" * 5000]),
                "improvement_suggestion": draw.choice(["", "retry", ["x"], {"y": 1}]),
                "retry_from_step": draw.choice([0, -1, 10**100, "3", "٣", 1.5, True, None, "1e309"]),
            }
        )
    if kind == 6:
        return "".join(draw.choice(TAGS + NUMBERS + CODE + ["{", "}", '"', ":"]) for _ in range(draw.randint(1, 60)))
    if kind == 7:
        calls = [
            {
                "name": draw.choice(["f", "", None, "x" * 10_000]),
                "arguments": draw.choice([{}, {"a": draw.choice(NUMBERS)}, [1], "x", None, {"a": {"b": [1] * 10_000}}]),
            }
            for _ in range(draw.randint(0, 50))
        ]
        return f"<tool_call>{json.dumps(calls)}</tool_call>"
    if kind == 8:
        number = draw.choice(["NaN", "Infinity", "-Infinity", "1e309", "9" * 5000])
        return f'<tool_call>{{"name": "f", "arguments": {{"x": {number}}}}}</tool_call>'
    if kind == 9:
        return f"<think>{random_text(draw, 50)}</think><action>{draw.choice(CODE + NUMBERS)}</action>"
    if kind == 10:
        return f"<answer>{draw.choice(CODE)}</answer> " + draw.choice(CODE)
    return "<answer>" + "(" * draw.randint(1, 5000) + "1" + ")" * draw.randint(0, 5000) + "</answer>"


def single_turn(name: str, **args):
    env = make(name, **args)
    task = env.tasks("test")[0]
    return lambda text: env.verify(task, text)


def verdict_with_feedback(result) -> bool:
    return (
        isinstance(result, Verdict)
        and isinstance(result.feedback, str)
        and bool(result.feedback.strip())
        and result.reward == result.reward
    )  # not NaN


def report_result(text: str):
    try:
        return parse_report(text, 5)
    except ReportError as error:
        return error


def tool_calls_result(text: str):
    try:
        return parse_tool_calls(text)
    except ToolCallFormatError as error:
        return error


TARGETS = {  # name -> (make the callable, what counts as a handled result)
    "arithmetic": (lambda: single_turn("arithmetic", test_size=5, train_size=5), verdict_with_feedback),
    "gsm": (lambda: single_turn("gsm", test_size=5, train_size=5), verdict_with_feedback),
    "countdown": (lambda: single_turn("countdown", test_size=5, train_size=5), verdict_with_feedback),
    "function_calling": (lambda: single_turn("function_calling"), verdict_with_feedback),
    **{
        f"verifier:{name}": (lambda name=name: lambda text: VERIFIERS.get(name)(text, "42"), verdict_with_feedback)
        for name in ("math", "exact", "numeric")
    },
    "report": (
        lambda: report_result,
        lambda r: isinstance(r, Report) or (isinstance(r, ReportError) and bool(r.message)),
    ),
    "tool_calls": (lambda: tool_calls_result, lambda r: isinstance(r, (list, ToolCallFormatError))),
    "reply:tagged": (
        lambda: lambda text: parse_reply(text, "tagged"),
        lambda r: r.action is None or isinstance(r.action, str),
    ),
    "action": (lambda: normalise_action, lambda r: isinstance(r, str)),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_hostile_outputs_get_a_verdict_fast_and_run_nothing(target):
    SENTINEL.unlink(missing_ok=True)
    build, handled = TARGETS[target]
    judge = build()
    draw = random.Random(f"hostile-{target}")
    slowest, slowest_case = 0.0, ""
    for _ in range(CASES):
        text = hostile_case(draw)
        started = time.process_time()
        result = judge(text)
        spent = time.process_time() - started
        assert handled(result), (target, text[:200], result)
        if spent > slowest:
            slowest, slowest_case = spent, text[:120]
    assert slowest < CPU_SECONDS_PER_CASE, f"{target}: {slowest:.2f} s of CPU on {slowest_case!r}"
    assert not SENTINEL.exists(), "model output was executed"
