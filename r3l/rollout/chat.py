"""Turn a task's message into prompt token ids: system prompt, example turns, chat template."""

from __future__ import annotations

from dataclasses import dataclass


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


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the conversation followed by the assistant header, ready for generation."""
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)
    text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return tokenizer(text, add_special_tokens=True)["input_ids"]
