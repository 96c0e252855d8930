"""Action formats: how the action an environment plays is read out of a model reply (one per registry entry)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from r3l.registry import Registry


@dataclass(frozen=True)
class ParsedReply:
    """The action to play (None when the reply has none: a format error), and the thought, if any."""

    action: str | None
    thought: str | None = None


ACTION_FORMATS: Registry[Callable[..., ParsedReply]] = Registry("action format")


HEAD_CHARS = 8000  # an action is read from the reply's first characters (a lazy scan of a huge reply is quadratic)


def _tag_content(text: str, tag: str) -> str | None:
    match = re.search(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text[:HEAD_CHARS], re.S)
    return match.group(1).strip() if match else None


@ACTION_FORMATS.register("tagged")
def tagged(text: str, action_tag: str = "action", think_tag: str = "think") -> ParsedReply:
    """`<think>...</think><action>...</action>`: the first complete, non-empty action element is played."""
    action = _tag_content(text, action_tag)
    return ParsedReply(action if action else None, _tag_content(text, think_tag))


@ACTION_FORMATS.register("whole_reply")
def whole_reply(text: str, action_tag: str = "action", think_tag: str = "think") -> ParsedReply:
    """The whole reply is the action (single-turn answers, multi-attempt dialogues)."""
    return ParsedReply(text, None)


def parse_reply(text: str, format_name: str, action_tag: str = "action", think_tag: str = "think") -> ParsedReply:
    return ACTION_FORMATS.get(format_name)(text, action_tag=action_tag, think_tag=think_tag)
