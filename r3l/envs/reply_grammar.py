"""Grammars of agent replies for structured decoding: `<think>` free, `<action>` one of the admissible actions (or
any move of a game's own form); `<answer>` (or `\\boxed{}`) a number; `<tool_call>` blocks of JSON calls to the
listed functions. Written in xgrammar's EBNF, which vLLM accepts as well."""

from __future__ import annotations

import json
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
    return tagged_move_grammar(f"({choices})", reply)


def tagged_move_grammar(move: str, reply: ReplyFormat, rules: str = "") -> str:
    """`<think>` free text (bounded) `</think>`, then `<action>` + `move` (an EBNF expression) + `</action>`;
    `rules` adds the rules `move` refers to."""
    return (
        f"root ::= {literal(f'<{reply.think_tag}>')} {free_text(reply.think_chars)} "
        f"{literal(f'</{reply.think_tag}>')} [ \\n]{{0,2}} {literal(f'<{reply.action_tag}>')} {move} "
        f"{literal(f'</{reply.action_tag}>')}" + (f"\n{rules}" if rules else "")
    )


def move_constraint(move: str, reply: ReplyFormat, rules: str = "") -> Constraint:
    """The reply constraint of a game whose moves have a form rather than a list (`move`, an EBNF expression;
    e.g. a guess `"[" [0-9]{1,3} "]"`)."""
    from r3l.rollout.constraints import Constraint

    return Constraint("grammar", tagged_move_grammar(move, reply, rules), "action")


def action_constraint(actions: Sequence[str], reply: ReplyFormat) -> Constraint | None:
    """The reply constraint of a turn with these admissible actions (None when there are none to choose)."""
    from r3l.rollout.constraints import Constraint

    return Constraint("grammar", tagged_action_grammar(actions, reply), "action") if actions else None


def answer_constraint(tag: str, content: str, reply: ReplyFormat) -> Constraint:
    """Free text (bounded), then `<tag>` + `content` (an EBNF expression) + `</tag>`."""
    grammar = f"root ::= {free_text(reply.think_chars)} {literal(f'<{tag}>')} {content} {literal(f'</{tag}>')}"
    from r3l.rollout.constraints import Constraint

    return Constraint("grammar", grammar, "answer")


def boxed_constraint(content: str, reply: ReplyFormat) -> Constraint:
    """Free text (bounded, without a backslash), then `\\boxed{` + `content` (an EBNF expression) + `}`."""
    from r3l.rollout.constraints import Constraint

    text = "[^\\\\]*" if reply.think_chars is None else f"[^\\\\]{{0,{reply.think_chars}}}"
    grammar = f"root ::= {text} {literal(BOXED_OPEN)} {content} {literal('}')}"
    return Constraint("grammar", grammar, "answer")


BOXED_OPEN = "\\boxed{"
JSON_VALUE_RULES = r"""object ::= "{" ws (string ws ":" ws value (ws "," ws string ws ":" ws value)*)? ws "}"
value ::= object | array | string | number | "true" | "false" | "null"
array ::= "[" ws (value (ws "," ws value)*)? ws "]"
string ::= "\"" ([^"\\\x00-\x1f] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4})* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws ::= [ \n]{0,4}"""


def tool_call_constraint(function_names: Sequence[str], tag: str = "tool_call") -> Constraint:
    """One or more `<tag>` blocks, each `{"name": <a listed function>, "arguments": <a JSON object>}`, written
    as Qwen2.5's template shows a call (a newline inside each tag, one block per line)."""
    from r3l.rollout.constraints import Constraint

    names = " | ".join(literal(json.dumps(name, ensure_ascii=False)) for name in dict.fromkeys(function_names))
    opening, middle, closing = f'<{tag}>\n{{"name": ', ', "arguments": ', f"}}\n</{tag}>"
    call = f"{literal(opening)} ({names}) {literal(middle)} object {literal(closing)}"
    grammar = f'root ::= call ("\\n" call)*\ncall ::= {call}\n{JSON_VALUE_RULES}'
    return Constraint("grammar", grammar, "tool_call")
