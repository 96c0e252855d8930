"""A chat transcript kept as token ids: assistant turns exactly as generated, other turns tokenised once.

Nothing is ever re-tokenised: the tokens of each assistant turn are the sampled ids, and the text
the chat template puts between turns is tokenised on its own when a user turn is added.
`drift()` compares the result with a fresh tokenisation of the whole conversation. A conversation that
offers tools keeps them: every rendering of it (its prompt, each added turn, `drift()`) passes them to the
template (`r3l.rollout.chat.render`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from r3l.rollout.chat import Tools, encode_prompt, render
from r3l.rollout.constraints import TokenMasks
from r3l.rollout.generator import Completion

_SENTINEL = "\u2063R3L-TURN-END\u2063"


@dataclass
class TokenConversation:
    tokenizer: Any
    messages: list[dict[str, str]]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    # constrained assistant turns: (the turn's first token position, the tokens each of its positions allowed)
    allowed: list[tuple[int, TokenMasks]] = field(default_factory=list)
    _open_end: str = ""
    # per assistant turn: (number of messages up to and including it, the template text still owed after it)
    _turn_ends: list[tuple[int, str]] = field(default_factory=list)
    tools: Tools | None = None  # the function schemas the chat template is given, on every rendering

    @classmethod
    def start(
        cls, tokenizer, messages: list[dict[str, str]], tokens: list[int] | None = None, tools: Tools | None = None
    ) -> TokenConversation:
        """The prompt (messages + assistant header, and the `tools` it offers), ready for the first assistant turn;
        pass `tokens` when the prompt is already encoded."""
        tokens = list(tokens) if tokens is not None else encode_prompt(tokenizer, messages, tools)
        return cls(tokenizer, list(messages), tokens, [0.0] * len(tokens), [0] * len(tokens), tools=tools)

    def copy(self) -> TokenConversation:
        return TokenConversation(
            self.tokenizer,
            copy.deepcopy(self.messages),
            list(self.tokens),
            list(self.logprobs),
            list(self.loss_mask),
            list(self.turn_spans),
            list(self.allowed),
            self._open_end,
            list(self._turn_ends),
            self.tools,
        )

    def before_turn(self, turn: int) -> TokenConversation:
        """A copy cut just before assistant turn `turn` (0-based): every token up to that turn's first one,
        so it is token-identical to this conversation there, ready for the model to write that turn again."""
        if not 0 <= turn < len(self.turn_spans):
            raise IndexError(f"turn {turn} is outside [0, {len(self.turn_spans)})")
        cut = self.turn_spans[turn][0]
        messages = self._turn_ends[turn][0] - 1
        return TokenConversation(
            self.tokenizer,
            copy.deepcopy(self.messages[:messages]),
            self.tokens[:cut],
            self.logprobs[:cut],
            self.loss_mask[:cut],
            list(self.turn_spans[:turn]),
            self._allowed_before(cut),
            "",
            list(self._turn_ends[:turn]),
            self.tools,
        )

    def after_turn(self, turn: int) -> TokenConversation:
        """A copy cut right after assistant turn `turn` (0-based), ready for `add_user`."""
        if not 0 <= turn < len(self.turn_spans):
            raise IndexError(f"turn {turn} is outside [0, {len(self.turn_spans)})")
        cut = self.turn_spans[turn][1]
        messages, open_end = self._turn_ends[turn]
        return TokenConversation(
            self.tokenizer,
            copy.deepcopy(self.messages[:messages]),
            self.tokens[:cut],
            self.logprobs[:cut],
            self.loss_mask[:cut],
            list(self.turn_spans[: turn + 1]),
            self._allowed_before(cut),
            open_end,
            list(self._turn_ends[: turn + 1]),
            self.tools,
        )

    def _allowed_before(self, cut: int) -> list[tuple[int, TokenMasks]]:
        return [(start, masks) for start, masks in self.allowed if start < cut]

    def mask_turns(self, turns: range | list[int], trained: bool) -> None:
        """Set the loss mask of whole assistant turns."""
        for turn in turns:
            start, end = self.turn_spans[turn]
            self.loss_mask[start:end] = [int(trained)] * (end - start)

    def add_assistant(self, completion: Completion, trained: bool) -> tuple[int, int]:
        """Append a generated turn token-for-token; returns its [start, end) span."""
        start = len(self.tokens)
        self.tokens += completion.tokens
        self.logprobs += completion.logprobs
        self.loss_mask += [int(trained)] * len(completion.tokens)
        self.turn_spans.append((start, len(self.tokens)))
        if completion.allowed is not None and len(completion.allowed):
            self.allowed.append((start, completion.allowed))
        self.messages.append({"role": "assistant", "content": completion.text})
        self._open_end = self._turn_end_text(completion)
        self._turn_ends.append((len(self.messages), self._open_end))
        return start, len(self.tokens)

    def add_user(self, content: str) -> None:
        """Append a user turn and the next assistant header, tokenised once and never trained."""
        self.add_turns([{"role": "user", "content": content}])

    def add_turns(self, messages: list[dict[str, str]]) -> None:
        """Append non-assistant `messages` (a system message before a user turn, say) and the next assistant
        header, tokenised once and never trained."""
        before = self._render(self.messages, generation_prompt=False)
        self.messages += [dict(message) for message in messages]
        after = self._render(self.messages, generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("the chat template does not render conversations prefix-stably")
        bridge = self._open_end + after[len(before) :]
        ids = self.tokenizer(bridge, add_special_tokens=False)["input_ids"]
        self.tokens += ids
        self.logprobs += [0.0] * len(ids)
        self.loss_mask += [0] * len(ids)
        self._open_end = ""

    def drift(self) -> int:
        """Positions where these tokens differ from a fresh tokenisation of the conversation text (0 = exact)."""
        fresh = self.tokenizer(
            self._render(self.messages, generation_prompt=self.messages[-1]["role"] != "assistant"),
            add_special_tokens=False,
        )["input_ids"]
        own = self.tokens
        if self.messages[-1]["role"] == "assistant" and self._open_end:
            own = own + self.tokenizer(self._open_end, add_special_tokens=False)["input_ids"]
        return sum(a != b for a, b in zip(own, fresh)) + abs(len(own) - len(fresh))

    def _render(self, messages, generation_prompt: bool) -> str:
        return render(self.tokenizer, messages, self.tools, generation_prompt)

    def _turn_end_text(self, completion: Completion) -> str:
        """What the template writes after an assistant message's content, less what was generated."""
        probe = self.messages[:-1] + [{"role": "assistant", "content": _SENTINEL}]
        tail = self._render(probe, generation_prompt=False).split(_SENTINEL, 1)[1]
        generated_end = (
            self.tokenizer.decode(completion.tokens[-1:], skip_special_tokens=False) if completion.tokens else ""
        )
        if completion.finish_reason == "stop" and generated_end and tail.startswith(generated_end):
            return tail[len(generated_end) :]
        return tail
