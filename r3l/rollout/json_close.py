"""Where a text's first JSON object closes: lets a generator stop a report once it is complete."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence


def json_object_end(text: str) -> int | None:
    """The index just past the `}` closing the first top-level `{...}` in `text` (braces inside strings, and
    escaped quotes inside strings, do not count; quotes before the first `{` are prose and start no string), or
    None while no object has closed. A `{` that never closes hides what follows (the report parser lets it pass):
    while a text grows, an unclosed brace cannot be told from an object still being written."""
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = depth > 0
        elif char == "{":
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                return index + 1
    return None


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def report_end(text: str) -> int | None:
    """The index just past the close of the first JSON object in `text` that parses as one, after any thinking
    (nothing while a <think> block is open; only what follows the last </think>), or None while there is none:
    where a report is complete, so generating more adds nothing the report parser would read in the usual case."""
    offset = 0
    if THINK_OPEN in text:
        if THINK_CLOSE not in text:
            return None
        offset = text.rindex(THINK_CLOSE) + len(THINK_CLOSE)
    while True:
        end = json_object_end(text[offset:])
        if end is None:
            return None
        span = text[offset : offset + end]
        try:
            value = json.loads(span[span.index("{") :], strict=False)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return offset + end
        offset += end


def tokens_to_report_end(tokens: Sequence[int], decode: Callable[[Sequence[int]], str]) -> int | None:
    """How many of `tokens` it takes to complete the report (`report_end` of their text), or None if they never
    do: only prefixes ending in a token whose text holds a `}` are decoded."""
    for count in range(1, len(tokens) + 1):
        if "}" in decode(tokens[count - 1 : count]) and report_end(decode(tokens[:count])) is not None:
            return count
    return None
