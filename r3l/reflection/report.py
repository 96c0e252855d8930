"""R3L's structured reflection report: pull the JSON object out of model text and validate it, two ways.

`r3l` (default): the last balanced JSON object (prose, code fences and a <think> block around it are
fine); the outcome in any case; text fields non-empty strings; a pivot an integer or a digit string.
`reference`: the R3L code's reading, the text from its first '{' to its last '}' as one object; the
outcome exactly as written; text fields only present; a pivot an integer (docs/FIDELITY.md row 17).

Bad model output is expected: every failure raises `ReportError` with one of `REASON_CODES`, which
callers count (`ReportStats`) instead of crashing. Nothing here ever evaluates model text.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from r3l.registry import Registry

REPORT_KEYS = (
    "trajectory_summary",
    "root_cause_analysis",
    "trajectory_outcome",
    "improvement_suggestion",
    "retry_from_step",
)
REQUIRED_KEYS = REPORT_KEYS[:3]
RETRY_KEYS = REPORT_KEYS[3:]
OUTCOMES = ("success", "success_but_inefficient", "failure")
REASON_CODES = ("no_json", "invalid_json", "not_object", "missing_key", "bad_outcome", "bad_step", "too_long")
MAX_CHARS = 20_000

_THINK_END = "</think>"


class ReportError(ValueError):
    """A reflection that cannot be used; `reason_code` is one of `REASON_CODES`."""

    def __init__(self, reason_code: str, message: str):
        if reason_code not in REASON_CODES:
            raise ValueError(f"unknown report reason code {reason_code!r}")
        super().__init__(f"{reason_code}: {message}")
        self.reason_code = reason_code
        self.message = message


@dataclass(frozen=True)
class Report:
    trajectory_summary: str
    root_cause_analysis: str
    trajectory_outcome: str  # normalized: one of OUTCOMES
    improvement_suggestion: str | None = None
    retry_from_step: int | None = None  # 0-based pivot step; None when no retry is asked for


def _top_level_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced {...} not inside another balanced one, end inclusive.

    Double-quoted strings (with backslash escapes) are honoured while inside a brace; an opening
    brace that never closes (prose, truncated output) does not hide balanced objects after it.
    """
    stack: list[int] = []
    matched: list[tuple[int, int]] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = bool(stack)
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            matched.append((stack.pop(), i))
    matched.sort()
    spans: list[tuple[int, int]] = []
    for start, end in matched:
        if spans and start < spans[-1][1]:
            continue  # nested in the previous top-level object
        spans.append((start, end))
    return spans


def _strip_fence(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        if body.rstrip().endswith("```"):
            body = body.rstrip()[:-3]
    return body.strip()


def extract_json_object(text: str) -> dict[str, Any]:
    """The last balanced top-level {...} in `text` that parses as a JSON object.

    Tolerates code fences, prose around the object and a leading <think>...</think> block.
    """
    if not isinstance(text, str):
        raise ReportError("no_json", f"expected text, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ReportError("too_long", f"reflection is {len(text)} characters, the limit is {MAX_CHARS}")
    if _THINK_END in text:
        text = text.rsplit(_THINK_END, 1)[1]
    spans = _top_level_spans(text)
    for start, end in reversed(spans):
        try:
            value = json.loads(text[start : end + 1], strict=False)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
            continue
        if isinstance(value, dict):
            return value
    if spans or "{" in text:
        raise ReportError("invalid_json", "found braces but no complete, valid JSON object")
    body = _strip_fence(text)
    if body:
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            value = None
        else:
            raise ReportError("not_object", f"expected a JSON object, got a JSON {type(value).__name__}")
    raise ReportError("no_json", "no JSON object in the reflection")


def _text_field(obj: dict, key: str) -> str:
    value = obj.get(key)
    if key not in obj or value is None:
        raise ReportError("missing_key", f"the report has no {key!r}")
    if not isinstance(value, str) or not value.strip():
        raise ReportError("missing_key", f"{key!r} must be a non-empty string")
    return value.strip()


def _step(value: Any, num_steps: int) -> int:
    if isinstance(value, bool):
        raise ReportError("bad_step", f"retry_from_step must be an integer, got {value!r}")
    if isinstance(value, int):
        step = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        step = int(value.strip())
    else:
        raise ReportError("bad_step", f"retry_from_step must be an integer, got {value!r}")
    if not 0 <= step < num_steps:
        raise ReportError("bad_step", f"retry_from_step {step} is outside [0, {num_steps})")
    return step


def parse_report(text: str, num_steps: int) -> Report:
    """Validate a reflection for a trajectory of `num_steps` steps; raises `ReportError`."""
    obj = extract_json_object(text)
    summary = _text_field(obj, "trajectory_summary")
    root_cause = _text_field(obj, "root_cause_analysis")
    raw_outcome = _text_field(obj, "trajectory_outcome")
    outcome = raw_outcome.lower()
    if outcome not in OUTCOMES:
        raise ReportError("bad_outcome", f"trajectory_outcome {raw_outcome!r} is not one of {', '.join(OUTCOMES)}")
    if outcome == "success":
        suggestion = obj.get("improvement_suggestion")
        suggestion = suggestion.strip() if isinstance(suggestion, str) and suggestion.strip() else None
        return Report(summary, root_cause, outcome, suggestion, None)
    suggestion = _text_field(obj, "improvement_suggestion")
    if "retry_from_step" not in obj or obj["retry_from_step"] is None:
        raise ReportError("missing_key", "the report has no 'retry_from_step'")
    return Report(summary, root_cause, outcome, suggestion, _step(obj["retry_from_step"], num_steps))


def parse_report_reference(text: str, num_steps: int) -> Report:
    """The R3L code's reading (`get_reflect` and `validate_reflect_report`). Its check lets a float (2.0), a
    digit string and True through as the pivot, and its retry then fails on the raw value (caught, no retry),
    so here they are `bad_step` at once."""
    if not isinstance(text, str):
        raise ReportError("no_json", f"expected text, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise ReportError("too_long", f"reflection is {len(text)} characters, the limit is {MAX_CHARS}")
    first, last = text.find("{"), text.rfind("}")
    body = text[first : last + 1] if 0 <= first < last else text
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        raise ReportError(
            "invalid_json" if "{" in text else "no_json", "no JSON object from the first '{' to the last '}'"
        ) from None
    if not isinstance(obj, dict):
        raise ReportError("not_object", f"expected a JSON object, got a JSON {type(obj).__name__}")
    for key in REQUIRED_KEYS:
        if key not in obj:
            raise ReportError("missing_key", f"the report has no {key!r}")
    summary, root_cause = _as_text(obj["trajectory_summary"]), _as_text(obj["root_cause_analysis"])
    outcome, suggestion = obj["trajectory_outcome"], obj.get("improvement_suggestion")
    if outcome == "success":
        return Report(summary, root_cause, "success", None if suggestion is None else _as_text(suggestion), None)
    if outcome not in OUTCOMES:
        raise ReportError("bad_outcome", f"trajectory_outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    step = obj.get("retry_from_step")
    if suggestion is None or step is None:
        raise ReportError(
            "missing_key", "a report that asks for a retry needs improvement_suggestion and retry_from_step"
        )
    if isinstance(step, bool) or not isinstance(step, int):
        raise ReportError("bad_step", f"retry_from_step must be an integer, got {step!r}")
    if not 0 <= step < num_steps:
        raise ReportError("bad_step", f"retry_from_step {step} is outside [0, {num_steps})")
    return Report(summary, root_cause, outcome, _as_text(suggestion), step)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


REPORT_PARSERS: Registry[Callable[[str, int], Report]] = Registry("report parser")
REPORT_PARSERS.register("r3l")(parse_report)
REPORT_PARSERS.register("reference")(parse_report_reference)


def needs_retry(report: Report) -> bool:
    return report.trajectory_outcome != "success"


def outcome_agreement(judged: Iterable[tuple[Report | ReportError | str, bool]]) -> float | None:
    """Share of the valid reports whose outcome agrees with the environment's verdict ("failure" for a failed
    episode, "success" or "success_but_inefficient" for a successful one); None without a valid report."""
    pairs = [(result.trajectory_outcome, success) for result, success in judged if isinstance(result, Report)]
    if not pairs:
        return None
    return sum((outcome != "failure") == success for outcome, success in pairs) / len(pairs)


class ReportStats:
    """Counts parsed reports: valid ones and invalid ones by reason code."""

    def __init__(self) -> None:
        self.valid = 0
        self.invalid: Counter[str] = Counter()

    def add(self, result: Report | ReportError | str) -> None:
        """Record a `Report`, a `ReportError`, or a reason code."""
        if isinstance(result, Report):
            self.valid += 1
        elif isinstance(result, ReportError):
            self.invalid[result.reason_code] += 1
        elif result in REASON_CODES:
            self.invalid[result] += 1
        else:
            raise ValueError(f"cannot count {result!r} as a report result")

    def extend(self, results: Iterable[Report | ReportError | str]) -> None:
        for result in results:
            self.add(result)

    @property
    def total(self) -> int:
        return self.valid + sum(self.invalid.values())

    def metrics(self) -> dict[str, float]:
        """`invalid_report_rate` and `invalid_report/<code>` (fraction of all reports, every code)."""
        total = self.total
        rate = (lambda n: n / total) if total else (lambda n: 0.0)
        invalid = rate(sum(self.invalid.values()))
        out = {
            "report_count": float(total),
            "invalid_report_rate": invalid,
            "valid_report_rate": 1.0 - invalid if total else 0.0,
        }
        out.update({f"invalid_report/{code}": rate(self.invalid[code]) for code in REASON_CODES})
        return out
