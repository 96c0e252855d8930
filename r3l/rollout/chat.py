"""Turn chat messages into prompt token ids with the tokenizer's chat template."""
from __future__ import annotations


def build_messages(user_message: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": user_message}]


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the conversation followed by the assistant header, ready for generation."""
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)
    text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return tokenizer(text, add_special_tokens=True)["input_ids"]
