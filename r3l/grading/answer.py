"""Pull the final answer out of a model reply (a tagged block, a \\boxed{} value, or else the last number) and
read a number written out, telling it apart from an expression that still needs computing.

Answer formats (a verifier setting, `env.args.answer_format`): 'tags' reads the last `<answer></answer>` block,
'boxed' the last `\\boxed{}`, 'either' the last `<answer>` block and, where the reply has none, the last
`\\boxed{}`; 'any' (the `dataset` environment's default) also falls back to the reply's last number."""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from math import gcd

TAIL_CHARS = 4000  # where a final answer is looked for: far more than any answer block needs
MAX_NUMBER_CHARS = 1000  # Python refuses to convert integers of more than 4300 digits; no answer needs that many
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_FINAL_NUMBER = re.compile(rf"(?<![\w.])((?:{_NUMBER})(?:\s*/\s*\d+)?)(?![\w])")
_WHOLE_NUMBER = re.compile(rf"^\s*[$£€]?\s*({_NUMBER})\s*(?:/\s*(\d+))?\s*%?\s*(?:[A-Za-z][A-Za-z ]*)?\.?\s*$")


_LITERAL = re.compile(rf"^[$£€]?\s*({_NUMBER})\s*%?\s*(?:[A-Za-z][A-Za-z ]*)?\.?$")
_FRACTION = re.compile(r"^([-+]?)(?:\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|(\d+)\s*/\s*(\d+))\.?$")
_LATEX_TEXT = re.compile(r"\\(?:text|textrm|mathrm|mbox)\{([^{}]*)\}")
_BOXED = re.compile(r"\\boxed\{")
_LATEX_SPELLINGS = {"{,}": ",", "\\,": "", "\\!": "", "\\ ": " ", "\\$": "$", "\\%": "%", "−": "-", "–": "-"}


@lru_cache(maxsize=16)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag)
    return re.compile(rf"<\s*{name}\s*>(.*?)<\s*/\s*{name}\s*>", re.IGNORECASE | re.DOTALL)


def extract_tagged(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last <tag>...</tag> block in the reply's last TAIL_CHARS characters (the
    answer ends a reply; the bound keeps the lazy scan linear in the reply), or None when there is none."""
    matches = _tag_pattern(tag).findall(text[-TAIL_CHARS:])
    return matches[-1].strip() if matches else None


def extract_final_number(text: str) -> str | None:
    """The last number written in `text` ('1,234' becomes '1234'), or None."""
    matches = _FINAL_NUMBER.findall(text)
    return matches[-1].replace(",", "") if matches else None


def parse_number(text: str) -> Fraction | None:
    """`text` as an exact number when it is one number: '42', '-3.5', '1,234', '$18', '3/4', '12 apples'.

    A trailing '%' is ignored, as are trailing unit words. Anything else, and anything longer than
    MAX_NUMBER_CHARS, returns None.
    """
    if len(text) > MAX_NUMBER_CHARS:
        return None
    match = _WHOLE_NUMBER.match(text)
    if not match:
        return None
    numerator, denominator = match.groups()
    value = Fraction(numerator.replace(",", ""))
    if denominator is not None:
        if int(denominator) == 0:
            return None
        value /= int(denominator)
    return value


def parse_number_literal(text: str) -> Fraction | None:
    """`text` as a number written out, or None when it is anything else, an unevaluated expression included.

    Read: '42', '-3.5', '42.0', '1,234', '$18', '50%', '12 apples', the LaTeX '$-55{,}761$', '\\boxed{7}',
    '7 \\text{ cm}', and a fraction in lowest terms ('3/4', '\\frac{3}{4}'). Refused: '2 + 5', '6*7', '12/4',
    '7/1', '\\frac{84}{2}', '\\sqrt{4}', 'x = 7': a reply that restates the question's expression, or a step of
    it, has not computed the answer.
    """
    if len(text) > MAX_NUMBER_CHARS:
        return None
    body = _unwrap_latex(text)
    fraction = _FRACTION.match(body)
    if fraction:
        sign, latex_top, latex_bottom, top, bottom = fraction.groups()
        numerator, denominator = int(latex_top or top), int(latex_bottom or bottom)
        if denominator < 2 or gcd(numerator, denominator) != 1:
            return None
        value = Fraction(numerator, denominator)
        return -value if sign == "-" else value
    match = _LITERAL.match(body)
    return Fraction(match.group(1).replace(",", "")) if match else None


def _unwrap_latex(text: str) -> str:
    """Math delimiters, \\boxed{} and \\text{} taken off, LaTeX spellings of ',' '$' '%' '-' made plain."""
    body = text.strip()
    for spelling, plain in _LATEX_SPELLINGS.items():
        body = body.replace(spelling, plain)
    body = _LATEX_TEXT.sub(lambda match: match.group(1), body).strip()
    for opening, closing in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(body) > len(opening) + len(closing) and body.startswith(opening) and body.endswith(closing):
            body = body[len(opening) : -len(closing)].strip()
    boxed = _BOXED.match(body)
    if boxed and body.endswith("}"):
        body = body[boxed.end() : -1].strip()
    return body


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} in the reply's tail (braces balanced), or None."""
    tail = text[-TAIL_CHARS:]
    starts = [match.end() for match in _BOXED.finditer(tail)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for position in range(start, len(tail)):
        depth += {"{": 1, "}": -1}.get(tail[position], 0)
        if depth == 0:
            return tail[start:position].strip()
    return None


ANSWER_FORMATS = ("tags", "boxed", "either", "any")


def extract_answer(text: str, answer_format: str) -> str | None:
    """The answer a reply gives in `answer_format` ('any' reads as 'either' here: its last-number fallback is the
    verifier's), or None when the reply has none in that format."""
    if answer_format == "tags":
        return extract_tagged(text)
    if answer_format == "boxed":
        return extract_boxed(text)
    if answer_format in ("either", "any"):
        tagged = extract_tagged(text)
        return tagged if tagged is not None else extract_boxed(text)
    raise ValueError(f"unknown answer format {answer_format!r}; use one of {', '.join(ANSWER_FORMATS)}")


def where_answers_go(answer_format: str) -> str:
    """Where a reply in `answer_format` puts its answer, for instructions and feedback."""
    return {
        "tags": "inside <answer></answer> tags",
        "boxed": "in \\boxed{}",
        "either": "inside <answer></answer> tags or in \\boxed{}",
        "any": "inside <answer></answer> tags or in \\boxed{}",
    }[answer_format]
