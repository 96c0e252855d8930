"""Where a text's first JSON object closes: lets a generator stop a report once it is complete."""

from __future__ import annotations


def json_object_end(text: str) -> int | None:
    """The index just past the `}` closing the first top-level `{...}` in `text` (braces inside strings, and
    escaped quotes inside strings, do not count; quotes before the first `{` are prose and start no string), or
    None while no object has closed."""
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
