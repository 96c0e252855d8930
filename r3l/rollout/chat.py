"""Turn a task's message into prompt token ids: system prompt, example turns, the tools it may call, chat template.

Tools (function schemas, OpenAI's `{"type": "function", "function": {...}}` form) go to the chat template's own
`tools=` where the template renders them, so a model sees them the way it was trained to (Qwen2.5's template lists
them in its system message and teaches `<tool_call>{"name": ..., "arguments": ...}</tool_call>` replies). A
template that ignores `tools` (SmolLM2's) gets the same block written into the system message by r3l (Hermes'
wording, as Qwen2.5's template writes it), so the reply format is the same `<tool_call>` JSON either way. A template
that renders tools but teaches another reply format is refused: r3l reads `<tool_call>` blocks only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from r3l.errors import UserError

Tools = Sequence[dict[str, Any]]
_PROBE_NAME = "r3l_probe_function"
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": _PROBE_NAME, "description": "", "parameters": {"type": "object", "properties": {}}},
}
_TEMPLATE_TOOLS: dict[str, bool] = {}  # chat template text -> whether it renders `tools` itself


@dataclass(frozen=True)
class PromptFormat:
    """What goes before each task's first message; `system_prompt` None keeps the environment's own."""

    system_prompt: str | None = None
    few_shot: tuple[tuple[str, str], ...] = ()  # (role, content) pairs

    @classmethod
    def from_config(cls, env_config) -> PromptFormat:
        return cls(env_config.system_prompt, tuple((m.role, m.content) for m in env_config.few_shot))

    def messages(self, user_message: str, env_system_prompt: str | None = None) -> list[dict[str, str]]:
        system = self.system_prompt if self.system_prompt is not None else env_system_prompt
        messages = [{"role": "system", "content": system}] if system else []
        messages += [{"role": role, "content": content} for role, content in self.few_shot]
        return messages + [{"role": "user", "content": user_message}]


def tools_block(tools: Tools) -> str:
    """The tools and the `<tool_call>` reply format in Hermes' wording (Qwen2.5's template writes the same)."""
    listing = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>"
    )


def tools_in_system(messages: list[dict[str, str]], tools: Tools) -> list[dict[str, str]]:
    """`messages` with `tools_block` ending the system message (a system message of its own where there is none)."""
    block = tools_block(tools)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def template_takes_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders `tools=` itself (and teaches `<tool_call>` replies); a
    template that renders tools but teaches another format is a UserError."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        return False
    if template not in _TEMPLATE_TOOLS:
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}], tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
            )
        except Exception:  # noqa: BLE001 - a template that cannot take tools raises whatever its code raises
            text = ""
        takes = _PROBE_NAME in text
        if takes and "<tool_call>" not in text:
            raise UserError(
                "the chat template lists tools but teaches a reply format other than <tool_call> JSON, which is the "
                "one r3l reads; set env.args.tool_format=prompt"
            )
        _TEMPLATE_TOOLS[template] = takes
    return _TEMPLATE_TOOLS[template]


def renders_later_system_messages(tokenizer) -> bool:
    """Whether the chat template writes a system message that comes after the first turn where it stands, after
    the turns before it (some templates drop it, some refuse it, some move every system message to the top);
    without a template every message is written in order (`render`)."""
    probe = "r3l-later-system-probe"
    earlier = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    messages = [*earlier, {"role": "system", "content": probe}, {"role": "user", "content": "c"}]
    try:
        before = render(tokenizer, earlier, generation_prompt=False)
        text = render(tokenizer, messages)
    except Exception:  # noqa: BLE001 - a template that refuses the message raises whatever its code raises
        return False
    return text.startswith(before) and probe in text[len(before) :]


def template_default_system(tokenizer, tools: Tools | None = None) -> str | None:
    """The system prompt the chat template writes when a conversation brings none (Qwen2.5's "You are Qwen ...",
    SmolLM2's "You are a helpful AI assistant named SmolLM ..."), or None where it writes none: read by rendering one
    user turn with and without a system message and taking what stands where the system message's text would."""
    probe = "r3l-system-probe"
    user = {"role": "user", "content": "r3l-user-probe"}
    alone = render(tokenizer, [user], tools)
    framed = render(tokenizer, [{"role": "system", "content": probe}, user], tools)
    head, _, tail = framed.partition(probe)
    if not tail or not alone.startswith(head) or not alone.endswith(tail) or len(alone) <= len(head) + len(tail):
        return None
    return alone[len(head) : len(alone) - len(tail)]


def render(
    tokenizer, messages: list[dict[str, str]], tools: Tools | None = None, generation_prompt: bool = True
) -> str:
    """The conversation as the chat template writes it (the messages joined by blank lines without a template),
    with `tools` given to the template where it renders them and in the system message where it does not."""
    if tools and not template_takes_tools(tokenizer):
        messages, tools = tools_in_system(messages, tools), None
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(
            messages, tools=list(tools) if tools else None, tokenize=False, add_generation_prompt=generation_prompt
        )
    return "\n\n".join(m["content"] for m in messages) + ("\n\n" if generation_prompt else "")


def encode_prompt(tokenizer, messages: list[dict[str, str]], tools: Tools | None = None) -> list[int]:
    """Token ids of the conversation followed by the assistant header, ready for generation."""
    if tools and not template_takes_tools(tokenizer):
        messages, tools = tools_in_system(messages, tools), None
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template(
            messages,
            tools=list(tools) if tools else None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)
    text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return tokenizer(text, add_special_tokens=True)["input_ids"]
