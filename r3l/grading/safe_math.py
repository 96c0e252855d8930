"""Evaluate model-written arithmetic (numbers, + - * /, parentheses, optional **) exactly, without eval()."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

MAX_LENGTH = 200
MAX_EXPONENT = 64
MAX_BITS = 1024  # bound on numerator and denominator of every intermediate value

# Symbols models often write for the same operators.
_TYPOGRAPHY = {"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "\\times": "*", "\\cdot": "*", "\\div": "/"}

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_SYMBOL = {
    ast.Pow: "**",
    ast.BitXor: "^",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitAnd: "&",
}


class ExpressionError(ValueError):
    """Text that is not a safe arithmetic expression, or cannot be evaluated; the message is feedback."""


class Evaluation(NamedTuple):
    value: Fraction
    numbers: list[int | Fraction]  # the numeric literals in the order written (ints stay ints)


def evaluate(text: str, *, allow_power: bool = False) -> Evaluation:
    """Evaluate `text` exactly, or raise ExpressionError with a message a model can act on."""
    tree = parse_expression(text)
    numbers: list[int | Fraction] = []
    value = _evaluate_node(tree.body, numbers, allow_power)
    return Evaluation(value, numbers)


def parse_expression(text: str) -> ast.Expression:
    text = normalise_symbols(text).strip()
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression is too long ({len(text)} characters, at most {MAX_LENGTH})")
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExpressionError(f"not a valid arithmetic expression: {text!r}") from None


def normalise_symbols(text: str) -> str:
    for symbol, replacement in _TYPOGRAPHY.items():
        text = text.replace(symbol, replacement)
    return text


def format_number(value: int | Fraction | float) -> str:
    """Integers as written; other values rounded to 4 decimals ('2.3333')."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return str(value.numerator)
    if isinstance(value, int):
        return str(value)
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


def _evaluate_node(node: ast.AST, numbers: list[int | Fraction], allow_power: bool) -> Fraction:
    if isinstance(node, ast.Constant):
        literal = _literal(node.value)
        numbers.append(literal)
        return _bounded(Fraction(literal))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _evaluate_node(node.operand, numbers, allow_power)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left = _evaluate_node(node.left, numbers, allow_power)
        right = _evaluate_node(node.right, numbers, allow_power)
        return _bounded(_apply(node.op, left, right, allow_power))
    raise ExpressionError(
        f"not a valid arithmetic expression: {_describe(node)} is not allowed; "
        "use only numbers, + - * / and parentheses"
    )


def _literal(value: object) -> int | Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError(f"not a valid arithmetic expression: {value!r} is not a number")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ExpressionError("number too large")
        exact = Fraction(repr(value))
        return exact.numerator if exact.denominator == 1 else exact
    return value


def _apply(op: ast.operator, left: Fraction, right: Fraction, allow_power: bool) -> Fraction:
    if isinstance(op, ast.Div) and right == 0:
        raise ExpressionError("division by zero")
    if type(op) in _BINARY:
        return _BINARY[type(op)](left, right)
    if isinstance(op, ast.Pow) and allow_power:
        return _power(left, right)
    symbol = _SYMBOL.get(type(op), type(op).__name__)
    allowed = "+ - * / **" if allow_power else "+ - * /"
    raise ExpressionError(f"operator {symbol} is not allowed; use only {allowed}")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ExpressionError(f"exponent {format_number(exponent)} is not a whole number")
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {format_number(exponent)} is too large (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise ExpressionError("division by zero")
    if base != 0 and abs(exponent) * max(abs(base.numerator), base.denominator).bit_length() > MAX_BITS + 64:
        raise ExpressionError("number too large")
    return base ** int(exponent)


def _bounded(value: Fraction) -> Fraction:
    if abs(value.numerator).bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise ExpressionError("number too large")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Constant):
        return "implicit multiplication (write 2*(3+4), not 2(3+4))"
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, ast.Attribute):
        return "an attribute"
    if isinstance(node, ast.Compare):
        return "a comparison"
    if isinstance(node, ast.UnaryOp):
        return "the operator " + {ast.Not: "not", ast.Invert: "~"}.get(type(node.op), type(node.op).__name__)
    return f"a {type(node).__name__.lower()}"
