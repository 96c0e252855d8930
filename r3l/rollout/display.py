"""Readable, coloured printing of experiences: trained tokens highlighted, the rest dimmed."""
from __future__ import annotations

from typing import Sequence

from rich.text import Text

from r3l.experience import Experience
from r3l.logging import console


def masked_text(experience: Experience, tokenizer) -> Text:
    """The experience's tokens, with runs of trained (mask 1) tokens in green and untrained ones dim."""
    text = Text()
    tokens, mask = experience.tokens, experience.loss_mask
    start = 0
    for index in range(1, len(tokens) + 1):
        if index == len(tokens) or mask[index] != mask[start]:
            chunk = tokenizer.decode(tokens[start:index], skip_special_tokens=False)
            text.append(chunk, style="bold green" if mask[start] else "dim")
            start = index
    return text


def show_experiences(experiences: Sequence[Experience], tokenizer) -> None:
    for experience in experiences:
        header = (f"[bold]{experience.kind}[/] group={experience.group} reward={experience.reward:.3f} "
                  f"advantage={experience.advantage:+.3f} trained_tokens={experience.num_trained_tokens}")
        if experience.pivot is not None:
            header += f" pivot={experience.pivot}"
        console.rule(header)
        console.print(masked_text(experience, tokenizer))
