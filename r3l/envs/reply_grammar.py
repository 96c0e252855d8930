"""Grammars of agent replies for structured decoding: `<think>` free, `<action>` one of the admissible actions;
`<answer>` a number. Written in xgrammar's EBNF, which vLLM accepts as well."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a constraint is made: `r3l envs` and `r3l config` need no torch
    from r3l.rollout.constraints import Constraint

NUMBER = '"-"? [0-9]+ ("." [0-9]+)?'


@dataclass(frozen=True)
class ReplyFormat:
    """The tags a reply uses and how many characters of free text may come before its action or answer
    (None: unbounded)."""

    action_tag: str = "action"
    think_tag: str = "think"
    think_chars: int | None = 600


def literal(text: str) -> str:
    """`text` as an EBNF string literal."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return f'"{escaped}"'


def free_text(limit: int | None) -> str:
    """Text without '<' (so it cannot open or close a tag), at most `limit` characters."""
    return "[^<]*" if limit is None else f"[^<]{{0,{limit}}}"


def tagged_action_grammar(actions: Sequence[str], reply: ReplyFormat) -> str:
    choices = " | ".join(literal(action) for action in dict.fromkeys(actions))
    return (
        f"root ::= {literal(f'<{reply.think_tag}>')} {free_text(reply.think_chars)} "
        f"{literal(f'</{reply.think_tag}>')} [ \\n]{{0,2}} {literal(f'<{reply.action_tag}>')} ({choices}) "
        f"{literal(f'</{reply.action_tag}>')}"
    )


def action_constraint(actions: Sequence[str], reply: ReplyFormat) -> Constraint | None:
    """The reply constraint of a turn with these admissible actions (None when there are none to choose)."""
    from r3l.rollout.constraints import Constraint

    return Constraint("grammar", tagged_action_grammar(actions, reply), "action") if actions else None


def answer_constraint(tag: str, content: str, reply: ReplyFormat) -> Constraint:
    """Free text (bounded), then `<tag>` + `content` (an EBNF expression) + `</tag>`."""
    grammar = f"root ::= {free_text(reply.think_chars)} {literal(f'<{tag}>')} {content} {literal(f'</{tag}>')}"
    from r3l.rollout.constraints import Constraint

    return Constraint("grammar", grammar, "answer")
