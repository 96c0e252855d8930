"""Tool calls written as JSON inside <tool_call></tool_call> tags: strict parsing, and two verifiers.

`verify_exact` is the xLAM/APIGen rule R3 trains with: the calls, as a multiset of (name, arguments),
equal the reference calls. `verify_bfcl` is r3l's own reading of BFCL's ground truth, the function_calling
env's 'strict' and 'lenient' checkers (its default, 'official', is BFCL's own checker:
`r3l.grading.bfcl_checker`): every reference call is matched by a distinct call of the same function whose
arguments are all known, whose required arguments are all there, and whose values are each one of the
reference's acceptable values (an acceptable value "" marks the argument optional).

Values compare by JSON type and structure: 1 != "1", True != 1, lists in order, dicts by key. An int
and a float are equal when numerically equal (1 == 1.0), since JSON writes both as numbers; a bool is
never a number. `verify_bfcl` adds that a float is wrong where the schema asks for an "integer" (for a
top-level value only). Strings compare exactly in `verify_exact`; `verify_bfcl` compares them after
stripping spaces at both ends ('strict'), or with `lenient_strings=True` ('lenient') after BFCL's
normalisation (case, spaces and ,./-_*^ ignored, ' read as ").

Where `verify_bfcl` and BFCL's checker disagree (each difference is tested in tests/test_bfcl_official.py):
- strings: strict counts case, inner spaces and punctuation ('LA' vs 'la'); BFCL and lenient do not;
- BFCL requires every argument the function's schema requires, even one the ground truth marks optional;
- BFCL checks the type of each array item (a float in an integer array fails); r3l compares by value;
- BFCL rejects an argument the schema does not list even where the ground truth accepts it;
- BFCL pairs parallel calls greedily, first fit in reply order; r3l finds a one-to-one matching if any;
- BFCL compares strings inside a list inside a dict exactly, and a value whose ground truth has another
  type than the schema (a variable name such as "data['sales']" for an array) exactly; r3l strips or
  normalises those strings as any other.

Model output is only ever parsed as JSON, never executed. Feedback is '; '-joined short clauses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from r3l.grading.verdict import Verdict

MAX_REPLY_CHARS = 50_000  # longer replies are rejected unread
MAX_CALLS = 32
MAX_FEEDBACK_CLAUSES = 6
_SHOWN_CHARS = 80

Json = Any
GoldCall = tuple[str, dict[str, list[Json]]]  # BFCL: function name -> {argument: acceptable values}


class ToolCallFormatError(ValueError):
    """The reply's tool calls cannot be read; the message is one short sentence for the model."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Json]

    def to_json(self) -> dict[str, Json]:
        return {"name": self.name, "arguments": self.arguments}


# ---------------------------------------------------------------------------------------------- parsing


@lru_cache(maxsize=16)
def _block_pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag)
    return re.compile(rf"<\s*{name}\s*>(.*?)<\s*/\s*{name}\s*>", re.IGNORECASE | re.DOTALL)


@lru_cache(maxsize=16)
def _open_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*{re.escape(tag)}\s*>", re.IGNORECASE)


def has_tool_call_block(text: str, tag: str = "tool_call") -> bool:
    """Whether `text` holds a closed <tag>...</tag> block, the format a reply's calls are read from (their JSON
    may still be wrong)."""
    return isinstance(text, str) and _block_pattern(tag).search(text[:MAX_REPLY_CHARS]) is not None


def parse_tool_calls(text: str, tag: str = "tool_call") -> list[Call]:
    """The calls in every <tag>...</tag> block, in order; each block holds one call object or a list of them.

    A call is exactly {"name": str, "arguments": object}. Raises ToolCallFormatError on anything else.
    """
    if not isinstance(text, str):
        raise ToolCallFormatError("the reply is not text")
    if len(text) > MAX_REPLY_CHARS:
        raise ToolCallFormatError(f"the reply is too long ({len(text)} characters, at most {MAX_REPLY_CHARS})")
    blocks = _block_pattern(tag).findall(text)
    if not blocks:
        if _open_pattern(tag).search(text):
            raise ToolCallFormatError(f"the <{tag}> tag is never closed with </{tag}>")
        raise ToolCallFormatError(f"no <{tag}> block found")
    calls: list[Call] = []
    for index, block in enumerate(blocks, start=1):
        which = "the tool call" if len(blocks) == 1 else f"tool call block {index}"
        if not block.strip():
            raise ToolCallFormatError(f"{which} is empty")
        value = _load_json(block, which)
        for item in value if isinstance(value, list) else [value]:
            calls.append(_to_call(item, which))
            if len(calls) > MAX_CALLS:
                raise ToolCallFormatError(f"too many tool calls (more than {MAX_CALLS})")
    return calls


def _load_json(block: str, which: str) -> Json:
    try:
        return json.loads(block, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise ToolCallFormatError(
            f"{which} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None
    except _DuplicateKey as error:
        raise ToolCallFormatError(f"{which} is not valid JSON: the key {_show(str(error))} appears twice") from None
    except _BadConstant as error:
        raise ToolCallFormatError(f"{which} is not valid JSON: {error} is not a JSON value") from None
    except RecursionError:
        raise ToolCallFormatError(f"{which} is nested too deeply") from None
    except ValueError as error:  # e.g. an integer with more digits than Python converts
        raise ToolCallFormatError(f"{which} is not valid JSON: {_show(str(error))}") from None


class _DuplicateKey(ValueError):
    pass


class _BadConstant(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Json]]) -> dict[str, Json]:
    result: dict[str, Json] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _no_constant(name: str) -> Json:
    raise _BadConstant(name)


def _to_call(item: Json, which: str) -> Call:
    if not isinstance(item, dict):
        raise ToolCallFormatError(
            f'{which} must be a JSON object with "name" and "arguments", or a list of such objects'
        )
    extra = [key for key in item if key not in ("name", "arguments")]
    if extra:
        raise ToolCallFormatError(f'{which} has the unexpected key {_show(extra[0])}; use only "name" and "arguments"')
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolCallFormatError(f'{which} has no "name" string')
    if "arguments" not in item:
        raise ToolCallFormatError(f'{which} has no "arguments"; write "arguments": {{}} for none')
    if not isinstance(item["arguments"], dict):
        raise ToolCallFormatError(f'{which} has "arguments" that are not a JSON object')
    return Call(name.strip(), item["arguments"])


def format_tool_calls(calls: Iterable[Call | Mapping[str, Json]], tag: str = "tool_call") -> str:
    """Calls written the way `parse_tool_calls` reads them: one tag per call."""
    blocks = []
    for call in calls:
        data = call.to_json() if isinstance(call, Call) else {"name": call["name"], "arguments": call["arguments"]}
        blocks.append(f"<{tag}>{json.dumps(data, ensure_ascii=False)}</{tag}>")
    return "\n".join(blocks)


# ------------------------------------------------------------------------------------------ comparison

StringEqual = Callable[[str, str], bool]


def _exact_strings(a: str, b: str) -> bool:
    return a == b


def _stripped_strings(a: str, b: str) -> bool:
    return a.strip() == b.strip()


_BFCL_IGNORED = re.compile(r"[ ,./\-_*^]")


def _bfcl_strings(a: str, b: str) -> bool:
    """BFCL's `standardize_string`: spaces and ,./-_*^ removed, lowercased, ' read as "."""

    def norm(s: str) -> str:
        return _BFCL_IGNORED.sub("", s).lower().replace("'", '"')

    return norm(a) == norm(b)


def _is_number(value: Json) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_value(a: Json, b: Json, strings: StringEqual = _exact_strings) -> bool:
    """Typed structural equality of JSON values; int and float equal when numerically equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and strings(a, b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, strings) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[key], b[key], strings) for key in a)
    return False


def _show(value: Json) -> str:
    shown = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _show_list(values: Sequence[Json]) -> str:
    return "[" + ", ".join(_show(value) for value in values) + "]"


# ---------------------------------------------------------------------------------------------- verdicts

Compare = Callable[[Call, Any], list[str]]  # (call, (gold name, gold)) -> problems; [] is a match


def verify_exact(
    calls: Sequence[Call],
    gold_calls: Sequence[Call | Mapping[str, Json]],
    functions: Sequence[Mapping[str, Json]] | None = None,
) -> Verdict:
    """xLAM rule: the calls equal the gold calls as a multiset of (name, arguments), in any order."""
    golds = [gold if isinstance(gold, Call) else Call(gold["name"], dict(gold["arguments"])) for gold in gold_calls]

    def compare(call: Call, named_gold: tuple[str, Call]) -> list[str]:
        gold = named_gold[1]
        problems = []
        for argument, value in call.arguments.items():
            if argument not in gold.arguments:
                problems.append(f"unexpected argument '{argument}' for {call.name}")
            elif not same_value(value, gold.arguments[argument]):
                problems.append(
                    f"argument '{argument}' of {call.name} is {_show(value)}, "
                    f"expected {_show(gold.arguments[argument])}"
                )
        problems += [
            f"missing required argument '{argument}' for {call.name}"
            for argument in gold.arguments
            if argument not in call.arguments
        ]
        return problems

    available = None if functions is None else _function_names(functions)
    return _judge(calls, [(gold.name, gold) for gold in golds], compare, available)


def verify_bfcl(
    calls: Sequence[Call],
    ground_truth: Sequence[Mapping[str, Mapping[str, list[Json]]]],
    functions: Sequence[Mapping[str, Json]],
    *,
    lenient_strings: bool = False,
) -> Verdict:
    """r3l's BFCL rule over `ground_truth` ([{function: {argument: [acceptable values]}}]), order-free:
    'strict' by default, 'lenient' with `lenient_strings`; how it differs from BFCL's checker: module docstring."""
    golds = [_gold_call(entry) for entry in ground_truth]
    schemas = {doc.get("name"): doc for doc in functions if isinstance(doc, Mapping)}
    strings = _bfcl_strings if lenient_strings else _stripped_strings

    def compare(call: Call, gold: GoldCall) -> list[str]:
        name, spec = gold
        properties = _properties(schemas.get(name))
        problems = []
        for argument, value in call.arguments.items():
            if argument not in spec:
                problems.append(f"unexpected argument '{argument}' for {name}")
                continue
            acceptable = [choice for choice in spec[argument] if not _is_optional_marker(choice)]
            schema = _property(properties, argument)
            if schema.get("type") == "integer" and isinstance(value, float):
                problems.append(f"argument '{argument}' of {name} should be an integer, got {_show(value)}")
            elif not acceptable:
                problems.append(f"argument '{argument}' of {name} should be left out")
            elif not any(_accepts(value, choice, schema, strings) for choice in acceptable):
                examples = [_example(choice, schema) for choice in acceptable]
                problems.append(
                    f"argument '{argument}' of {name} is {_show(value)}, expected one of {_show_list(examples)}"
                )
        problems += [
            f"missing required argument '{argument}' for {name}"
            for argument, choices in spec.items()
            if argument not in call.arguments and not any(map(_is_optional_marker, choices))
        ]
        return problems

    return _judge(calls, golds, compare, _function_names(functions))


def bfcl_reference_calls(
    ground_truth: Sequence[Mapping[str, Mapping[str, list[Json]]]], functions: Sequence[Mapping[str, Json]]
) -> list[Call]:
    """One answer BFCL's checker accepts: the first acceptable value of every argument the ground truth
    requires or the function's schema lists as required, other optional ones left out.

    BFCL's checker rejects a call missing an argument its schema requires even where the ground truth
    marks that argument optional ("" among its values; e.g. simple_python_17 'formatted': [true, ""]),
    so those are given too."""
    schemas = {doc.get("name"): doc for doc in functions if isinstance(doc, Mapping)}
    calls = []
    for name, spec in map(_gold_call, ground_truth):
        properties = _properties(schemas.get(name))
        required = set(_required(schemas.get(name)))
        arguments = {}
        for argument, choices in spec.items():
            acceptable = [choice for choice in choices if not _is_optional_marker(choice)]
            if acceptable and (argument in required or not any(map(_is_optional_marker, choices))):
                schema = _property(properties, argument)
                arguments[argument] = _example(acceptable[0], schema)
        calls.append(Call(name, arguments))
    return calls


def _gold_call(entry: Mapping[str, Mapping[str, list[Json]]]) -> GoldCall:
    if not isinstance(entry, Mapping) or len(entry) != 1:
        raise ValueError(f"a BFCL ground-truth entry must be {{function: {{argument: [values]}}}}, got {entry!r}")
    ((name, spec),) = entry.items()
    return name, dict(spec)


def _properties(schema: Mapping[str, Json] | None) -> Mapping[str, Json]:
    parameters = (schema or {}).get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _property(properties: Mapping[str, Json], argument: str) -> Mapping[str, Json]:
    """The schema of one argument ({} when the function's schema does not describe it)."""
    schema = properties.get(argument)
    return schema if isinstance(schema, Mapping) else {}


def _required(schema: Mapping[str, Json] | None) -> list[str]:
    """The argument names the function's schema lists as required."""
    parameters = (schema or {}).get("parameters")
    required = parameters.get("required") if isinstance(parameters, Mapping) else None
    return [name for name in required if isinstance(name, str)] if isinstance(required, list) else []


def _is_optional_marker(choice: Json) -> bool:
    return isinstance(choice, str) and choice == ""


def _nested_kind(schema: Mapping[str, Json]) -> str | None:
    """'dict' when the schema is a dict, 'list_of_dicts' for an array of dicts: BFCL nests acceptable values there."""
    kind = schema.get("type")
    if kind == "dict":
        return "dict"
    items = schema.get("items")
    if kind in ("array", "tuple") and isinstance(items, Mapping) and items.get("type") == "dict":
        return "list_of_dicts"
    return None


def _accepts(value: Json, choice: Json, schema: Mapping[str, Json], strings: StringEqual) -> bool:
    kind = _nested_kind(schema)
    if kind == "dict" and isinstance(choice, dict) and isinstance(value, dict):
        return _dict_accepts(value, choice, strings)
    if kind == "list_of_dicts" and isinstance(choice, list) and isinstance(value, list):
        return len(value) == len(choice) and all(
            isinstance(item, dict) and isinstance(spec, dict) and _dict_accepts(item, spec, strings)
            for item, spec in zip(value, choice)
        )
    return same_value(value, choice, strings)


def _dict_accepts(value: dict[str, Json], spec: dict[str, Json], strings: StringEqual) -> bool:
    """A dict value against BFCL's nested {key: [acceptable values]}."""
    for key, item in value.items():
        choices = spec.get(key)
        if not isinstance(choices, list):
            return False
        if not any(same_value(item, choice, strings) for choice in choices if not _is_optional_marker(choice)):
            return False
    return all(
        key in value or (isinstance(choices, list) and any(map(_is_optional_marker, choices)))
        for key, choices in spec.items()
    )


def _example(choice: Json, schema: Mapping[str, Json]) -> Json:
    """An acceptable value in plain form: nested {key: [values]} specs reduced to their first values."""

    def reduce(spec: Json) -> Json:
        if not isinstance(spec, dict):
            return spec
        return {
            key: next(c for c in choices if not _is_optional_marker(c))
            for key, choices in spec.items()
            if isinstance(choices, list) and choices and not any(map(_is_optional_marker, choices))
        }

    kind = _nested_kind(schema)
    if kind == "dict":
        return reduce(choice)
    if kind == "list_of_dicts" and isinstance(choice, list):
        return [reduce(item) for item in choice]
    return choice


def correct_verdict(count: int) -> Verdict:
    """Full reward for `count` calls that all match."""
    feedback = "correct: the call matches" if count == 1 else f"correct: all {count} calls match"
    return Verdict(reward=1.0, success=True, feedback=feedback)


def count_mismatch(made: int, expected: int) -> str:
    """'made 1 call, expected 2'."""
    return f"made {made} call{'' if made == 1 else 's'}, expected {expected}"


def failed_verdict(clauses: Sequence[str]) -> Verdict:
    """No reward; the distinct clauses joined, at most MAX_FEEDBACK_CLAUSES of them and a count of the rest."""
    distinct = list(dict.fromkeys(clauses))
    if len(distinct) > MAX_FEEDBACK_CLAUSES:
        more = len(distinct) - MAX_FEEDBACK_CLAUSES
        distinct = distinct[:MAX_FEEDBACK_CLAUSES] + [f"and {more} more problem{'' if more == 1 else 's'}"]
    return Verdict(reward=0.0, success=False, feedback="; ".join(distinct) or "the calls do not match")


def _function_names(functions: Sequence[Mapping[str, Json]]) -> set[str]:
    return {doc["name"] for doc in functions if isinstance(doc, Mapping) and isinstance(doc.get("name"), str)}


def _judge(
    calls: Sequence[Call], golds: Sequence[tuple[str, Any]], compare: Compare, available: set[str] | None
) -> Verdict:
    """Match calls to gold calls one-to-one (maximum matching over exact fits); explain what is left over."""
    problems = [[compare(call, gold) if call.name == gold[0] else None for gold in golds] for call in calls]
    match = _maximum_matching(len(calls), len(golds), lambda i, j: problems[i][j] == [])
    if len(match) == len(golds) == len(calls):
        return correct_verdict(len(calls))

    feedback: list[str] = []
    if len(calls) != len(golds):
        feedback.append(count_mismatch(len(calls), len(golds)))
    unknown = [i for i, call in enumerate(calls) if available is not None and call.name not in available]
    feedback += [f"called {calls[i].name}, which is not an available function" for i in unknown]
    spare_calls = [i for i in range(len(calls)) if i not in match and i not in unknown]
    unpaired = []
    for j in (j for j in range(len(golds)) if j not in match.values()):
        same_name = [(i, found) for i in spare_calls if (found := problems[i][j]) is not None]
        if same_name:
            best, best_problems = min(same_name, key=lambda pair: len(pair[1]))
            spare_calls.remove(best)
            feedback += best_problems
        else:
            unpaired.append(j)
    for j in unpaired:
        if spare_calls:
            feedback.append(f"wrong function: called {calls[spare_calls.pop(0)].name}, expected {golds[j][0]}")
        else:
            feedback.append(f"missing a call to {golds[j][0]}")
    return failed_verdict(feedback)  # parallel calls can repeat a clause: failed_verdict keeps one


def _maximum_matching(left: int, right: int, fits: Callable[[int, int], bool]) -> dict[int, int]:
    """Kuhn's augmenting paths; returns {left index: right index}. Sizes are at most MAX_CALLS."""
    owner: dict[int, int] = {}  # right -> left

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(right):
            if j not in seen and fits(i, j):
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(left):
        augment(i, set())
    return {i: j for j, i in owner.items()}
