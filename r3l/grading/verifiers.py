"""Named verifiers that grade a reply against a reference answer: 'math', 'exact', 'numeric'.

Each is `verifier(completion, gold, *, reveal_answer=True, answer_format=None) -> Verdict`; the reward is 1.0 or 0.0.
`answer_format` (r3l/grading/answer.py: tags, boxed, either, any) says where the answer is read; None keeps the
verifier's own reading ('math' and 'numeric': any; 'exact': tags).

Where the reference answer is a number, the answer must be a number written out (`parse_number_literal`):
math-verify evaluates expressions, so it would reward a reply that restates the question ('2 + 5' for
'Calculate 2 + 5.'). Symbolic reference answers ('x^2+1', '\\sqrt{2}/2') are compared by math-verify.
docs/VERIFIERS.md lists where these verdicts differ from the scorers shipped with the data, and why.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from contextlib import contextmanager
from fractions import Fraction
from typing import Protocol

from r3l.grading.answer import (
    extract_answer,
    extract_boxed,
    extract_final_number,
    parse_number,
    parse_number_literal,
    where_answers_go,
)
from r3l.grading.verdict import Verdict
from r3l.registry import Registry

NO_ANSWER = "no answer found inside <answer></answer> tags"
MATH_VERIFY_BUDGET_S = 0.75  # wall-clock budget of one math-verify comparison (sympy on 10**10**10 takes 1.5 s)
MAX_GRADED_CHARS = 300  # a longer tagged answer is not sent to math-verify (deeply nested input costs it seconds)
WHOLE_REPLY_TAIL_CHARS = 1000  # without tags, math-verify reads only the end of the reply, where the answer is
NUMERIC_TOLERANCE = Fraction(1, 10**6)  # relative, for the 'numeric' verifier


class Verifier(Protocol):
    def __call__(
        self, completion: str, gold: str, *, reveal_answer: bool = True, answer_format: str | None = None
    ) -> Verdict: ...


VERIFIERS: Registry[Verifier] = Registry("verifier")


def verify_math(completion: str, gold: str, *, reveal_answer: bool = True, answer_format: str | None = None) -> Verdict:
    """The answer read in `answer_format` is mathematically equal to `gold`; a number when `gold` is one. 'any'
    (the default) reads the tagged answer, else the last \\boxed{} value, else the last number of the reply (a
    symbolic `gold`: the whole reply's end, by math-verify)."""
    answer_format = answer_format or "any"
    answer = extract_answer(completion, "tags" if answer_format == "any" else answer_format)
    if answer is None and answer_format != "any":
        return _failure(missing_answer(answer_format))
    expected = gold_number(gold)
    numeric_gold = expected is not None
    if answer is None and numeric_gold:
        answer = extract_boxed(completion) or extract_final_number(completion)
        if answer is None:
            return _failure(NO_ANSWER)
    if answer is None:
        correct = _math_verify(gold, completion[-WHOLE_REPLY_TAIL_CHARS:], answer_is_whole_reply=True)
        return _success() if correct else _failure(NO_ANSWER)
    if not answer:
        empty = "the <answer></answer> tags are empty" if answer_format in ("tags", "any") else None
        return _failure(empty or f"the answer {where_answers_go(answer_format)} is empty")
    if len(answer) > MAX_GRADED_CHARS:
        return _failure(
            f"the answer is {len(answer)} characters long; an answer is one value, at most "
            f"{MAX_GRADED_CHARS} characters"
        )
    if numeric_gold:
        value = parse_number_literal(answer)
        if value is None:
            return _failure(_not_a_number(answer))
        return _success() if value == expected else _wrong(answer, gold, reveal_answer)
    return _success() if _math_verify(str(gold).strip(), answer) else _wrong(answer, gold, reveal_answer)


VERIFIERS.register("math")(verify_math)  # not as a decorator: that would type the name as a plain Verifier


@VERIFIERS.register("exact")
def verify_exact(
    completion: str, gold: str, *, reveal_answer: bool = True, answer_format: str | None = None
) -> Verdict:
    """The answer (tagged, unless `answer_format` says otherwise; 'any' reads as 'either'), stripped, equals
    `gold`, stripped."""
    answer_format = answer_format or "tags"
    answer = extract_answer(completion, answer_format)
    if answer is None:
        return _failure(missing_answer(answer_format))
    return _success() if answer == str(gold).strip() else _wrong(answer, gold, reveal_answer)


@VERIFIERS.register("numeric")
def verify_numeric(
    completion: str, gold: str, *, reveal_answer: bool = True, answer_format: str | None = None
) -> Verdict:
    """The answer read in `answer_format` ('any', the default: the tagged answer, else the last \\boxed{} value,
    else the last number) is within 1e-6 (relative) of `gold`."""
    expected = gold_number(gold)
    if expected is None:
        return _failure(f"the reference answer {_quote(gold)} is not a number; the 'numeric' verifier needs one")
    answer_format = answer_format or "any"
    answer = extract_answer(completion, answer_format)
    if answer is None and answer_format == "any":
        answer = extract_final_number(completion)
    if answer is None:
        return _failure(missing_answer(answer_format))
    value = parse_number_literal(answer)
    if value is None:
        return _failure(_not_a_number(answer))
    close = abs(value - expected) <= NUMERIC_TOLERANCE * max(Fraction(1), abs(expected))
    return _success() if close else _wrong(answer, gold, reveal_answer)


def missing_answer(answer_format: str) -> str:
    """The feedback for a reply with no answer where `answer_format` puts it."""
    return NO_ANSWER if answer_format in ("tags", "any") else f"no answer found {where_answers_go(answer_format)}"


def answers_match(answer: str, gold: str) -> bool:
    """A numeric `gold` is matched only by the same number written out; a symbolic one by math-verify."""
    expected = gold_number(gold)
    if expected is not None:
        return parse_number_literal(answer) == expected
    return _math_verify(str(gold).strip(), answer)


def gold_number(gold: str) -> Fraction | None:
    """The reference answer as a number ('42', '1,234', '\\frac{1}{2}'), or None when it is symbolic."""
    text = str(gold).strip()
    value = parse_number(text)
    return value if value is not None else parse_number_literal(text)


class _OwnBudgetIsOn(logging.Filter):
    """Drops math-verify's 'Timeout is disabled ...' warning (one from its parser, one from its grader, in every
    process that grades): its own timeouts are off on purpose, as _time_budget bounds each call. Its other
    warnings pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _module in ("math_verify.parser", "math_verify.grader"):  # the loggers that warn (math-verify not imported)
    logging.getLogger(_module).addFilter(_OwnBudgetIsOn())


class _OutOfTime(BaseException):
    """Raised by the budget's alarm; a BaseException so that no `except Exception` inside sympy swallows it."""


@contextmanager
def _time_budget(seconds: float):
    """Interrupt the block after `seconds` (a SIGALRM timer: main thread only; elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _OutOfTime()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _math_verify(gold: str, answer: str, answer_is_whole_reply: bool = False) -> bool:
    """math-verify's judgement within one wall-clock budget for parsing both sides and comparing (its own
    per-call timeouts are whole seconds each); out of time counts as not equal."""
    parse, verify = _warm_math_verify()
    try:
        with _time_budget(MATH_VERIFY_BUDGET_S):
            parsed_gold = _parse_short(gold, parse)
            parsed_answer = (
                parse(answer, parsing_timeout=None) if answer_is_whole_reply else _parse_short(answer, parse)
            )
            if not parsed_gold or not parsed_answer:
                return False
            return bool(verify(parsed_gold, parsed_answer, timeout_seconds=None))
    except _OutOfTime:
        return False


@functools.cache
def _warm_math_verify():
    """math-verify's parse and verify, after one symbolic comparison run outside any budget: the first one in a
    process imports the rest of sympy (0.1 s alone here, seconds on a loaded machine), which a 0.75 s budget
    would count against the answer being graded."""
    from math_verify import parse, verify  # imported lazily: it pulls in sympy

    verify(parse("$x+1$", parsing_timeout=None), parse("$1+x$", parsing_timeout=None), timeout_seconds=None)
    return parse, verify


def _parse_short(text: str, parse) -> list:
    """A bare answer is read as one LaTeX expression ('1+x' stays 1+x), else as free text (no timeout of
    math-verify's own: the caller's budget bounds it)."""
    if "$" not in text and "\\boxed" not in text:
        parsed = parse(f"${text}$", parsing_timeout=None)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=None)


def _success() -> Verdict:
    return Verdict(reward=1.0, success=True, feedback="correct")


def _failure(feedback: str) -> Verdict:
    return Verdict(reward=0.0, success=False, feedback=feedback)


def _not_a_number(answer: str) -> str:
    return f"answered {_quote(answer)}, which is not a number; give the final value alone"


def _wrong(answer: str, gold: str, reveal_answer: bool) -> Verdict:
    if reveal_answer:
        return _failure(f"answered {_quote(answer)}, the correct answer is {_quote(gold)}")
    return _failure(f"answered {_quote(answer)}, which is not correct")


def _quote(text: object, limit: int = 80) -> str:
    """Short one-line rendering of an answer for feedback."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
