"""Pull the final answer out of a model reply: a tagged block, or else the last number."""
from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

TAIL_CHARS = 4000  # where a final answer is looked for: far more than any answer block needs
MAX_NUMBER_CHARS = 1000  # Python refuses to convert integers of more than 4300 digits; no answer needs that many
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_FINAL_NUMBER = re.compile(rf"(?<![\w.])({_NUMBER})(?![\w])")
_WHOLE_NUMBER = re.compile(
    rf"^\s*[$£€]?\s*({_NUMBER})\s*(?:/\s*(\d+))?\s*%?\s*(?:[A-Za-z][A-Za-z ]*)?\.?\s*$"
)


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
